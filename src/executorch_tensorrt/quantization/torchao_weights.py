"""torchao-quantized linears -> explicit dequantize ops over plain buffers.

`quantize_(model, Int8WeightOnlyConfig())` leaves tensor subclasses as weights;
torch.export of those gives graphs whose constants the ONNX exporter cannot
read. `lower_torchao(model)` returns a structural copy of the model (its
tensors shared, not copied) in which each such linear holds its int8 data and
scales as buffers and dequantizes them with ops.DEQUANTIZE_WEIGHT. Only what
TensorRT can run is accepted: symmetric (all-zero zero points) per-channel
int8; anything else raises QuantizationError naming the layer and why.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from .errors import QuantizationError
from .ops import DEQUANTIZE_WEIGHT


class DequantizedLinear(torch.nn.Module):
    """y = x @ dequantize(q, scale).T + bias, with q int8 [out, in], scale [out]."""

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.register_buffer("qweight", q)
        self.register_buffer("weight_scale", scale)
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, DEQUANTIZE_WEIGHT(self.qweight, self.weight_scale, 0), self.bias)


def _torchao_kind(weight) -> str | None:
    name = type(weight).__name__
    module = type(weight).__module__
    return name if module.startswith("torchao") else None


def _int8_linear(name: str, linear: torch.nn.Linear) -> DequantizedLinear:
    w = linear.weight
    q, scale, zero = w.qdata, w.scale, getattr(w, "zero_point", None)
    block = list(getattr(w, "block_size", [1, q.shape[1]]))
    if getattr(w, "act_quant_kwargs", None) is not None:
        raise QuantizationError(
            f"layer {name!r}: torchao dynamic activation quantization is not supported yet; "
            "use Int8WeightOnlyConfig (weight-only) for TensorRT")
    if q.dtype != torch.int8 or q.dim() != 2:
        raise QuantizationError(f"layer {name!r}: expected a 2-D int8 weight, got {q.dtype} "
                                f"{tuple(q.shape)}")
    if block != [1, q.shape[1]]:
        raise QuantizationError(
            f"layer {name!r}: int8 block size {block} is not per-channel ([1, {q.shape[1]}]); "
            "TensorRT-RTX takes int8 weights per output channel only")
    if zero is not None and bool(torch.any(zero != 0)):
        raise QuantizationError(
            f"layer {name!r}: asymmetric int8 weights (non-zero zero points); TensorRT only "
            "supports symmetric quantization. Quantize with a symmetric mapping.")
    if scale.numel() != q.shape[0]:
        raise QuantizationError(f"layer {name!r}: {scale.numel()} scales for {q.shape[0]} "
                                "output channels")
    return DequantizedLinear(q.detach(), scale.detach().reshape(-1).to(torch.float32),
                             linear.bias)


def has_torchao_weights(model: torch.nn.Module) -> bool:
    return any(_torchao_kind(p) for p in model.parameters())


def lower_torchao(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` sharing its tensors, with torchao linears replaced."""
    shared = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    lowered = copy.deepcopy(model, memo=shared)
    for name, module in list(lowered.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            kind = _torchao_kind(getattr(child, "weight", None))
            if kind is None:
                continue
            if not isinstance(child, torch.nn.Linear):
                raise QuantizationError(f"layer {full!r}: torchao weights on a "
                                        f"{type(child).__name__}; only Linear is supported")
            if kind != "Int8Tensor":
                raise QuantizationError(
                    f"layer {full!r}: torchao {kind} weights are not supported yet (supported: "
                    "Int8Tensor from Int8WeightOnlyConfig); nothing was exported")
            setattr(module, child_name, _int8_linear(full, child))
    return lowered
