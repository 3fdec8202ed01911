"""Quantized models through TensorRT: weights stored quantized in named data,
dequantized by ONNX DequantizeLinear that TensorRT fuses into its GEMMs and
onnxruntime's fallback runs (docs/quantization.md).

`quantize(model, example_inputs, scheme=..., calibration=...)` is the one call
for every scheme (int8 / int4 / fp4 weight-only, int8 / fp8 W8A8 through the
PT2E quantizer); torchao quantize_ models (lower_torchao), ModelOpt
mtq.quantize models (lower_modelopt) and PT2E graphs (TensorRTQuantizer ->
prepare_pt2e / convert_pt2e: importers/qdq_graph.py) are taken too. The
formats and their schemes are the registry's (registry.py).

The names below load on first use: the registry is torch-free, so the CLI
reads the scheme names without importing torch.
"""
from __future__ import annotations

from ..errors import QuantizationError

_LAZY = {
    "quantize": "workflow", "prepare_for_export": "workflow",
    "QuantizationPlan": "registry", "quantization_plan": "registry",
    "SCHEMES": "registry", "FORMATS": "registry", "refusal": "registry",
    "implemented": "registry",
    "TensorRTQuantizer": "pt2e", "PT2E_SCHEMES": "pt2e",
    "is_qdq_graph": "qdq_graph", "lower_qdq": "qdq_graph",
    "has_modelopt_quantizers": "modelopt", "lower_modelopt": "modelopt",
    "has_torchao_weights": "torchao", "lower_torchao": "torchao",
}

__all__ = ["FORMATS", "PT2E_SCHEMES", "SCHEMES", "QuantizationError", "QuantizationPlan",
           "TensorRTQuantizer", "has_modelopt_quantizers", "has_torchao_weights",
           "implemented", "is_qdq_graph", "lower_modelopt", "lower_qdq", "lower_torchao",
           "prepare_for_export", "quantization_plan", "quantize", "refusal"]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module == "workflow":
        from . import workflow as found
    elif module == "registry":
        from . import registry as found
    elif module == "pt2e":
        from .importers import pt2e as found
    elif module == "qdq_graph":
        from .importers import qdq_graph as found
    elif module == "modelopt":
        from .importers import modelopt as found
    elif module == "torchao":
        from .importers import torchao as found
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(found, name)
    globals()[name] = value  # found once
    return value
