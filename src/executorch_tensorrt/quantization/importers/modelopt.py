"""Models fake-quantized with NVIDIA ModelOpt (`mtq.quantize`) -> our Q/DQ ops.

ModelOpt replaces each Linear by a QuantLinear whose `input_quantizer` and
`weight_quantizer` (TensorQuantizer) fake-quantize with a calibrated `amax`.
On a CPU torch.export cannot trace its INT8 fake quant (a data-dependent
`if amax.min() < 0`), and the FP8 one becomes `tensorrt::quantize_op`, which
has no ONNX translation. So, like the torchao path, `lower_modelopt(model)`
returns a structural copy (tensors shared) in which each QuantLinear is a
module of ours computing the same thing with ops TensorRT parses: the weight
quantized once (int8 per channel / fp8 per tensor, stored quantized in named
data) and dequantized by DequantizeLinear; the activation through
QuantizeLinear/DequantizeLinear with the constant scale amax / 127 (int8) or
amax / 448 (fp8). ModelOpt's INT8 is signed with zero point 0 and bounds
[-128, 127] (narrow_range False), the same as ONNX's QuantizeLinear.
A QuantizationPlan is recorded, so export refuses what the flavour cannot run
(INT8 W8A8 on TensorRT-RTX, FP8 below SM89) and reports each layer.
ModelOpt is never imported here: quantizers are recognised by their module.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ...errors import QuantizationError
from ..registry import QuantizationPlan, shared_copy, steps_of, with_plan

# The formats' pieces through the registry, never a format module by name.
_fp8, _int8 = steps_of("fp8"), steps_of("int8")
FP8, FP8_MAX = _fp8.element_dtype, _fp8.max_value
QUANTIZE_FP8, DEQUANTIZE_FP8 = _fp8.quantize_activation, _fp8.dequantize_activation
DEQUANTIZE_FP8_WEIGHT, DEQUANTIZE_WEIGHT = _fp8.dequantize_weight, _int8.dequantize_weight

_INT8 = 8
_FP8 = (4, 3)  # ModelOpt's num_bits for e4m3


def _is_quantizer(obj) -> bool:
    return type(obj).__module__.startswith("modelopt") and type(obj).__name__ == "TensorQuantizer"


def has_modelopt_quantizers(model: torch.nn.Module) -> bool:
    return any(_is_quantizer(m) for m in model.modules())


class QDQLinear(torch.nn.Module):
    """y = linear(dq(q(x)), dq(w_q)) + bias: int8 or fp8 weights stored
    quantized; activations Q/DQ'd with a constant scale (None: weight-only)."""

    def __init__(self, kind: str, qweight: torch.Tensor, weight_scale: torch.Tensor,
                 input_scale: float | None, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.kind, self.input_scale = kind, input_scale
        self.register_buffer("qweight", qweight)
        self.register_buffer("weight_scale", weight_scale)
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "int8":
            if self.input_scale is not None:
                qd = torch.ops.quantized_decomposed
                q = qd.quantize_per_tensor.default(x, self.input_scale, 0, -128, 127, torch.int8)
                x = qd.dequantize_per_tensor.default(q, self.input_scale, 0, -128, 127,
                                                     torch.int8)
            weight = DEQUANTIZE_WEIGHT(self.qweight, self.weight_scale, 0)
        else:
            if self.input_scale is not None:
                x = DEQUANTIZE_FP8(QUANTIZE_FP8(x, self.input_scale), self.input_scale)
            weight = DEQUANTIZE_FP8_WEIGHT(self.qweight, self.weight_scale, 0)
        return F.linear(x, weight, self.bias)


def _format(name: str, quantizer, what: str):
    """(num_bits, amax) of an enabled, calibrated, static, signed quantizer."""
    if getattr(quantizer, "block_sizes", None):
        raise QuantizationError(
            f"layer {name!r}: ModelOpt block quantization of its {what} ({quantizer.block_sizes}: "
            "INT4 AWQ, NVFP4, MX formats) is not supported yet; use INT8_DEFAULT_CFG or "
            "FP8_DEFAULT_CFG, or quantize(model, scheme='int4_weight_only')")
    if getattr(quantizer, "unsigned", False):
        raise QuantizationError(f"layer {name!r}: unsigned {what} quantization; TensorRT's "
                                "quantized types are signed with zero point 0")
    if getattr(quantizer, "_dynamic", False):
        raise QuantizationError(f"layer {name!r}: dynamic {what} quantization; TensorRT's Q/DQ "
                                "need constant scales (calibrate with a forward_loop)")
    bits = quantizer.num_bits
    bits = tuple(bits) if isinstance(bits, (list, tuple)) else bits
    if bits not in (_INT8, _FP8):
        raise QuantizationError(f"layer {name!r}: ModelOpt num_bits {bits} for its {what}; "
                                "TensorRT takes 8 (INT8) and (4, 3) (FP8 e4m3) here")
    amax = getattr(quantizer, "amax", None)
    if amax is None:
        raise QuantizationError(f"layer {name!r}: its {what} quantizer has no amax: it was "
                                "never calibrated; pass forward_loop= to mtq.quantize")
    amax = amax.detach().to(torch.float32)
    if bool(torch.any(amax <= 0)):
        raise QuantizationError(f"layer {name!r}: non-positive amax in its {what} quantizer; "
                                "TensorRT needs positive scales (calibrate on real data)")
    return bits, amax


def _lower_linear(name: str, linear: torch.nn.Linear) -> tuple[QDQLinear, str, str] | None:
    wq, iq = linear.weight_quantizer, linear.input_quantizer
    out_q = getattr(linear, "output_quantizer", None)
    if out_q is not None and out_q.is_enabled:
        raise QuantizationError(f"layer {name!r}: ModelOpt output quantizers are not supported "
                                "(TensorRT quantizes a layer's inputs); disable it")
    if not wq.is_enabled and not iq.is_enabled:
        return None  # left float by the config (e.g. an excluded lm_head)
    if not wq.is_enabled:
        raise QuantizationError(f"layer {name!r}: its weight quantizer is disabled while its "
                                "input is quantized; TensorRT needs both (or weights only)")
    bits, w_amax = _format(name, wq, "weight")
    in_bits, in_amax = _format(name, iq, "input") if iq.is_enabled else (bits, None)
    if in_bits != bits:
        raise QuantizationError(f"layer {name!r}: weight num_bits {bits} but input {in_bits}; "
                                "TensorRT takes INT8 with INT8 and FP8 with FP8")
    if in_amax is not None and in_amax.numel() != 1:
        raise QuantizationError(f"layer {name!r}: per-channel input scales; TensorRT takes "
                                "activations per tensor")
    w = linear.weight.detach().to(torch.float32)
    out_features = w.shape[0]
    if bits == _INT8:
        if w_amax.numel() not in (1, out_features):
            raise QuantizationError(f"layer {name!r}: int8 weight amax of shape "
                                    f"{tuple(w_amax.shape)}; expected per tensor or per channel")
        inverse = 127.0 / w_amax.reshape(-1, 1).expand(out_features, 1)  # ModelOpt's rounding
        q = torch.clamp(torch.round(w * inverse), -128, 127).to(torch.int8)
        scale = (1.0 / inverse).reshape(-1)
        in_scale = None if in_amax is None else float(in_amax) / 127.0
        kind, label = "int8", "int8"
    else:
        if w_amax.numel() != 1:
            raise QuantizationError(f"layer {name!r}: per-channel fp8 weight amax; TensorRT's "
                                    "FP8 W8A8 takes weights per tensor")
        scale = w_amax.reshape(()) / FP8_MAX
        q = torch.clamp(w / scale, -FP8_MAX, FP8_MAX).to(FP8)
        in_scale = None if in_amax is None else float(in_amax) / FP8_MAX
        kind, label = "fp8", "fp8"
    if in_scale is None:
        scheme, how = f"{label}_weight_only", f"{label} weight-only (ModelOpt)"
    else:
        scheme, how = f"{label}_w8a8", f"{label} W8A8 (ModelOpt)"
    return QDQLinear(kind, q.contiguous(), scale.contiguous(), in_scale, linear.bias), scheme, how


def lower_modelopt(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` sharing its tensors, each ModelOpt QuantLinear replaced."""
    lowered = shared_copy(model)
    layers: dict[str, str] = {}
    schemes: set[str] = set()
    for name, module in list(lowered.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if not any(_is_quantizer(c) for c in child.children()):
                continue
            if not isinstance(child, torch.nn.Linear):
                raise QuantizationError(
                    f"layer {full!r}: ModelOpt quantized a {type(child).__name__}; only Linear "
                    "is supported here (quantize convolutions with TensorRTQuantizer)")
            lowered_linear = _lower_linear(full, child)
            if lowered_linear is None:
                continue
            replacement, scheme, how = lowered_linear
            setattr(module, child_name, replacement)
            layers[full] = how
            schemes.add(scheme)
    if len(schemes) > 1:
        raise QuantizationError(f"ModelOpt quantized layers with several schemes "
                                f"({sorted(schemes)}); export one scheme per model")
    return with_plan(lowered, QuantizationPlan(schemes.pop() if schemes else "int8_weight_only",
                                               layers))
