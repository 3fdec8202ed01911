"""Quantized models through TensorRT (issue #22): weights stored quantized in
named data, dequantized by ONNX DequantizeLinear that TensorRT fuses into its
GEMMs and onnxruntime's fallback runs (docs/quantization.md).

`quantize(model, example_inputs, scheme=..., calibration=...)` is the one call
for every scheme (int8 / int4 weight-only, int8 / fp8 W8A8 through the PT2E
quantizer); torchao quantize_ models (lower_torchao), ModelOpt mtq.quantize
models (lower_modelopt) and PT2E graphs (TensorRTQuantizer -> prepare_pt2e /
convert_pt2e: qdq_graph.py) are taken too."""
from .capability import IMPLEMENTED, SCHEMES, refusal
from .errors import QuantizationError
from .modelopt_models import has_modelopt_quantizers, lower_modelopt
from .plan import QuantizationPlan, quantization_plan
from .pt2e import PT2E_SCHEMES, TensorRTQuantizer
from .qdq_graph import is_qdq_graph, lower_qdq
from .quantize import quantize
from .torchao_weights import has_torchao_weights, lower_torchao

__all__ = ["IMPLEMENTED", "PT2E_SCHEMES", "SCHEMES", "QuantizationError", "QuantizationPlan",
           "TensorRTQuantizer", "has_modelopt_quantizers", "has_torchao_weights",
           "is_qdq_graph", "lower_modelopt", "lower_qdq", "lower_torchao",
           "quantization_plan", "quantize", "refusal"]
