"""TensorRTQuantizer: the PT2E quantizer for this delegate (ExecuTorch's convention).

    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e, convert_pt2e
    gm = prepare_pt2e(torch.export.export(model, x).module(), TensorRTQuantizer("int8_w8a8"))
    for batch in calibration: gm(*batch)
    gm = convert_pt2e(gm)
    executorch_tensorrt.export(gm, x, "model.pte")

It annotates what TensorRT quantizes: the weight (and, for W8A8, the input
activation) of every Linear and Conv2d whose weight is a constant, with
symmetric specs only (TensorRT takes zero points of 0 only):

- "int8_w8a8": int8 weights per output channel ([-127, 127]), int8
  activations per tensor ([-128, 127], the range ONNX QuantizeLinear saturates
  to). Standard TensorRT; TensorRT-RTX has no INT8 activation quantization.
- "fp8_w8a8": fp8 e4m3 weights and activations, per tensor (scale = max|x| /
  448). Compute capability 8.9 or newer.
- "int8_weight_only": int8 weights per output channel, float activations
  (both flavours; TensorRT-RTX's INT8 path).

INT4 weight-only per group has no PT2E observer in torchao 0.18's pt2e
module that convert_pt2e lowers to quantized_decomposed ops; it stays
`quantize(model, scheme="int4_weight_only")` (quantize.py), and asking this
quantizer for it says so. Bias stays float (TensorRT adds it in float).
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.observer import MinMaxObserver, PerChannelMinMaxObserver
from torchao.quantization.pt2e.quantizer import (QuantizationAnnotation, QuantizationSpec,
                                                 Quantizer)

from .capability import scheme_named
from .errors import QuantizationError
from .fp8 import FP8, FP8_MAX
from .qdq_graph import LAYERS

PT2E_SCHEMES = ("int8_w8a8", "fp8_w8a8", "int8_weight_only")
_EPS = 2 ** -20  # smallest scale an observer may choose (an all-zero tensor)


def _int8_activation() -> QuantizationSpec:
    return QuantizationSpec(dtype=torch.int8, quant_min=-128, quant_max=127,
                            qscheme=torch.per_tensor_symmetric,
                            observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=_EPS))


def _int8_weight() -> QuantizationSpec:
    return QuantizationSpec(dtype=torch.int8, quant_min=-127, quant_max=127,
                            qscheme=torch.per_channel_symmetric, ch_axis=0,
                            observer_or_fake_quant_ctr=PerChannelMinMaxObserver.with_args(
                                eps=_EPS))


def _fp8_tensor() -> QuantizationSpec:
    # A symmetric range of +-448 makes the observer's scale max|x| / 448.
    bound = int(FP8_MAX)
    return QuantizationSpec(dtype=FP8, quant_min=-bound, quant_max=bound,
                            qscheme=torch.per_tensor_symmetric,
                            observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=_EPS))


class TensorRTQuantizer(Quantizer):
    """A PT2E quantizer whose annotations TensorRT can run (module docstring)."""

    def __init__(self, scheme: str = "int8_w8a8") -> None:
        super().__init__()
        name = scheme_named(scheme).name  # uint4 / int2 / unknown: refused with the reason
        if name not in PT2E_SCHEMES:
            hint = (" (use executorch_tensorrt.quantization.quantize(model, "
                    "scheme='int4_weight_only'))" if name == "int4_weight_only" else "")
            raise QuantizationError(f"TensorRTQuantizer has no scheme {name!r}{hint}; its "
                                    f"schemes are {list(PT2E_SCHEMES)}")
        self.scheme = name
        self.skipped: dict[str, str] = {}  # node -> why it was not annotated

    def _specs(self) -> tuple[QuantizationSpec | None, QuantizationSpec]:
        if self.scheme == "fp8_w8a8":
            return _fp8_tensor(), _fp8_tensor()
        if self.scheme == "int8_w8a8":
            return _int8_activation(), _int8_weight()
        return None, _int8_weight()

    def annotate(self, model: GraphModule) -> GraphModule:
        activation, weight = self._specs()
        found = 0
        for node in model.graph.nodes:
            if node.op != "call_function" or node.target not in LAYERS:
                continue
            x, w = node.args[0], node.args[1]
            if not (isinstance(w, Node) and w.op == "get_attr"):
                self.skipped[node.name] = "its weight is computed, not a constant"
                continue
            if "quantization_annotation" in node.meta:
                continue  # annotated by another quantizer composed before this one
            specs = {w: weight}
            if activation is not None and isinstance(x, Node):
                specs[x] = activation
            node.meta["quantization_annotation"] = QuantizationAnnotation(
                input_qspec_map=specs, _annotated=True)
            found += 1
        if not found:
            raise QuantizationError(
                "TensorRTQuantizer found no Linear or Conv2d with a constant weight to quantize "
                f"({'; '.join(f'{n}: {w}' for n, w in self.skipped.items()) or 'none at all'});"
                " pass the graph of torch.export.export(model, inputs).module()")
        return model

    def validate(self, model: GraphModule) -> None:
        """Nothing to validate beyond annotate(): lower_qdq checks the converted graph."""
