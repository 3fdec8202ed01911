"""Quantized models through TensorRT (issue #22): weights stored quantized in
named data, dequantized by ONNX DequantizeLinear that TensorRT fuses into its
GEMMs and onnxruntime's fallback runs (docs/quantization.md)."""
from .torchao_weights import QuantizationError, has_torchao_weights, lower_torchao

__all__ = ["QuantizationError", "has_torchao_weights", "lower_torchao"]
