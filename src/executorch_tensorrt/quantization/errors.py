"""The quantization error: a layer or a scheme TensorRT cannot take as asked."""
from __future__ import annotations

from ..errors import ExportError


class QuantizationError(ExportError):
    """A quantized layer or scheme that TensorRT cannot take as it is; the
    message names the layer or scheme, why, and what to do."""
