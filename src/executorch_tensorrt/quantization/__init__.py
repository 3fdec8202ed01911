"""Quantized models through TensorRT (issue #22): weights stored quantized in
named data, dequantized by ONNX DequantizeLinear that TensorRT fuses into its
GEMMs and onnxruntime's fallback runs (docs/quantization.md).

`quantize(model, scheme="int8_weight_only" | "int4_weight_only")` is the one
call; torchao Int8WeightOnlyConfig models are taken too (lower_torchao)."""
from .capability import IMPLEMENTED, SCHEMES, refusal
from .errors import QuantizationError
from .quantize import QuantizationPlan, quantization_plan, quantize
from .torchao_weights import has_torchao_weights, lower_torchao

__all__ = ["IMPLEMENTED", "SCHEMES", "QuantizationError", "QuantizationPlan",
           "has_torchao_weights", "lower_torchao", "quantization_plan", "quantize", "refusal"]
