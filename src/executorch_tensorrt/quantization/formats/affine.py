"""Affine (asymmetric) int4 / int8 weights: zero points and float offsets
lowered onto TensorRT's symmetric weight-only GEMM plus a small float GEMM.

TensorRT's parser takes Q/DQ with zero points of 0 only. An affine weight

    W = (u - z) * s + o          (u unsigned codes, per group g: z, s, o)

is rewritten exactly as W = q * s + b per group, with the signed codes
q = u - 2**(bits-1) (for 4 bits u XOR 8 on each nibble: the packed bytes are
recoded, never unpacked; for 8 bits u XOR 0x80 read as int8) and the group
bias b = (2**(bits-1) - z) * s + o. Then

    y = x @ (q * s)^T + groupsum(x) @ b^T + bias

where groupsum(x) sums each group of input features ([.., K] -> [.., K/G]).
The first term is the symmetric int4 / int8 weight-only DequantizeLinear +
MatMul that TensorRT fuses (the int4 format's op, the int8 format's per-channel
op, or this module's block int8 op); the second is plain float ops (Reshape,
ReduceSum, MatMul, Add) over a [out, K/G] float matrix. A checkpoint's
permuted input order (GPTQ act-order) becomes a Gather of the activations'
columns before both. Stored: the codes once (signed: the reader's own bytes), the scales,
and b in the place of the zero points / offsets; no float weight.

Rounding: b is computed in float32 and kept in the scales' dtype; the two
GEMMs add in the activation dtype. In float32 the result equals x @ W^T within
a few ulps of the output's magnitude (docs/quantization.md, "Asymmetric").
"""
from __future__ import annotations

import onnx_ir as ir
import torch
import torch.nn.functional as F

from ...errors import QuantizationError
from ..packed_weight import PackedWeight
from ..placeholders import (finish_placeholders, grouped_dequantize_translation, pack_int4,
                            placeholder_nodes, replace_placeholder)
from ..registry import mark_read_only, steps_of

# The symmetric ops this format reuses, through the registry.
_int4, _int8 = steps_of("int4"), steps_of("int8")
DEQUANTIZE_INT4, DEQUANTIZE_PER_CHANNEL = _int4.dequantize_weight, _int8.dequantize_weight

# Float bytes of weight rows an eager forward dequantizes at once.
EAGER_BLOCK_BYTES = 16 * 1024 * 1024

_LIB = torch.library.Library("etrt_quant", "FRAGMENT")
_LIB.define("dequantize_int8_block(Tensor q, Tensor scale, int group_size) -> Tensor")


@torch.library.impl(_LIB, "dequantize_int8_block", "CompositeExplicitAutograd")
def _dequantize_int8_block(q: torch.Tensor, scale: torch.Tensor, group_size: int) -> torch.Tensor:
    return q.to(scale.dtype) * scale.repeat_interleave(group_size, dim=1)


@torch.library.register_fake("etrt_quant::dequantize_int8_block")
def _dequantize_int8_block_fake(q: torch.Tensor, scale: torch.Tensor,
                                group_size: int) -> torch.Tensor:
    return torch.empty(q.shape, dtype=scale.dtype, device=q.device)


DEQUANTIZE_INT8_BLOCK = torch.ops.etrt_quant.dequantize_int8_block.default

# Block DequantizeLinear is opset 21; our exports are opset 18: a placeholder.
PLACEHOLDER_OP = "DequantizeInt8Block"
TRANSLATIONS = {DEQUANTIZE_INT8_BLOCK: grouped_dequantize_translation(PLACEHOLDER_OP,
                                                                     "tensor(int8)")}


def lower_onnx(model: ir.Model) -> None:
    """Each block int8 placeholder -> DequantizeLinear(q, scale, axis=1,
    block_size=group) over the same int8 initializer."""
    nodes = placeholder_nodes(model, PLACEHOLDER_OP)
    for node in nodes:
        q_value = node.inputs[0]
        if q_value is None or q_value.name not in model.graph.initializers:
            raise QuantizationError(
                f"an int8 weight reached the ONNX model as a computed value ({node.name}), not "
                "a constant; TensorRT needs quantized weights as initializers")
        group = node.attributes["group_size"].as_int()
        replacement = ir.node("DequantizeLinear", [q_value, node.inputs[1]],
                              attributes={"axis": 1, "block_size": group}, name=node.name)
        replace_placeholder(model, node, replacement)
    if nodes:
        finish_placeholders(model)


class AffineLinear(torch.nn.Module):
    """y = x[..., order] @ (q * s)^T + groupsum(x[..., order]) @ b^T + bias.

    `qweight`: 4 bits: uint8 [out, in / 2], signed int4 two per byte (ONNX
    order); 8 bits: int8 [out, in]. `weight_scale`: [out, in / group] ([out]
    for 8 bits with one group). `group_bias`: [out, in / group], or None when
    every b is 0 (a symmetric weight). `input_order`: int64 [in] or None.
    """

    def __init__(self, qweight: torch.Tensor, weight_scale: torch.Tensor,
                 group_bias: torch.Tensor | None, input_order: torch.Tensor | None,
                 bias: torch.Tensor | None, bits: int, group_size: int) -> None:
        super().__init__()
        self.bits = bits
        self.group_size = group_size
        for name, tensor in (("qweight", qweight), ("weight_scale", weight_scale),
                             ("group_bias", group_bias), ("input_order", input_order),
                             ("bias", bias)):
            self.register_buffer(name, mark_read_only(tensor))

    @property
    def in_features(self) -> int:
        return self.qweight.shape[1] * (2 if self.bits == 4 else 1)

    @property
    def out_features(self) -> int:
        return self.qweight.shape[0]

    def symmetric_weight(self, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """q * s, [out, in] in stored column order (output features start..stop)."""
        q, scale = self.qweight[start:stop], self.weight_scale[start:stop]
        if self.bits == 4:
            return DEQUANTIZE_INT4(q, scale, self.group_size)
        if scale.dim() == 1:
            return DEQUANTIZE_PER_CHANNEL(q, scale, 0)
        return DEQUANTIZE_INT8_BLOCK(q, scale, self.group_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.input_order is not None:
            x = x.index_select(-1, self.input_order)
        if type(x) is torch.Tensor and not torch.compiler.is_compiling():
            # Eager (a reference run): a block of rows dequantized at a time,
            # never the layer's whole float weight. Traced: one op over the codes.
            rows = max(1, EAGER_BLOCK_BYTES // (4 * self.in_features))
            y = torch.cat([F.linear(x, self.symmetric_weight(i, i + rows))
                           for i in range(0, self.out_features, rows)], dim=-1)
            y = y if self.bias is None else y + self.bias
        else:
            y = F.linear(x, self.symmetric_weight(), self.bias)
        if self.group_bias is None:
            return y
        sums = x.unflatten(-1, (self.group_bias.shape[1], self.group_size)).sum(-1)
        return y + F.linear(sums, self.group_bias)


def _signed_codes(weight: PackedWeight) -> torch.Tensor:
    """The codes as signed q = u - 2**(bits-1): the checkpoint's own bytes when
    its reader holds them signed (no copy), else recoded once."""
    codes = weight.signed_codes().contiguous()
    return codes if weight.bits == 4 else codes.view(torch.int8)


def _module(q: torch.Tensor, scale: torch.Tensor, group_bias: torch.Tensor,
            input_order: torch.Tensor | None, bias: torch.Tensor | None, bits: int,
            group_size: int) -> AffineLinear:
    dtype = scale.dtype
    b = group_bias.to(dtype) if bool(torch.any(group_bias != 0)) else None
    if bits == 8 and scale.shape[1] == 1:
        scale = scale.reshape(-1)  # per channel: the int8 format's op
    if input_order is not None and torch.equal(input_order, torch.arange(input_order.numel())):
        input_order = None
    return AffineLinear(q, scale.contiguous(), b, input_order, bias, bits, group_size)


def from_packed(weight: PackedWeight, dtype: torch.dtype | None = None) -> AffineLinear:
    """The module computing `weight` (a checkpoint's form) on TensorRT's symmetric GEMM,
    its scales and corrections in `dtype` (the activations'; default: the scales')."""
    weight.check()
    midpoint = 2 ** (weight.bits - 1)
    scale = weight.scales.to(torch.float32)
    if weight.zero_points is not None:
        zero = weight.zero_points.to(torch.float32)
    else:
        zero = torch.full_like(scale, 0.0 if weight.offsets is not None else midpoint)
    group_bias = (midpoint - zero) * scale
    if weight.offsets is not None:
        group_bias = group_bias + weight.offsets.to(torch.float32)
    dtype = dtype or weight.scales.dtype
    bias = None if weight.bias is None else weight.bias.to(dtype)
    return _module(_signed_codes(weight), weight.scales.to(dtype),
                   group_bias, weight.input_order, bias, weight.bits, weight.group_size)


def from_signed(name: str, q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor,
                bits: int, group_size: int, bias: torch.Tensor | None) -> AffineLinear:
    """W = (q - zero) * scale with signed integer q [out, in] (int4 values in
    [-8, 7] held as int8, or int8), scale and zero [out, in / group] (zero any
    real number: torchao's and PT2E's zero points)."""
    low, high = -2 ** (bits - 1), 2 ** (bits - 1) - 1
    if int(q.min()) < low or int(q.max()) > high:
        raise QuantizationError(f"layer {name!r}: int{bits} values outside [{low}, {high}]")
    group_bias = -zero.to(torch.float32) * scale.to(torch.float32)
    stored = pack_int4(q).contiguous() if bits == 4 else q.to(torch.int8).contiguous()
    return _module(stored, scale, group_bias, None, bias, bits, group_size)


def describe(module: AffineLinear, form: str) -> str:
    """The report's line for one layer; `form` says what the checkpoint stored."""
    order = ", input order" if module.input_order is not None else ""
    groups = ("per channel" if module.group_size == module.in_features
              else f"group {module.group_size}")
    return f"int{module.bits} affine weight-only ({groups}, {form}{order})"


# What the importers build affine layers from (registry.FormatSteps).
quantize_linear = None  # built from checkpoints and importers, not from float weights
quantize_embedding = None
check_options = None
linear_module = AffineLinear
dequantize_weight = DEQUANTIZE_INT8_BLOCK
quantize_activation = None
dequantize_activation = None
element_dtype = None  # 4 bits packed two per byte, or int8
max_value = None
group_sizes = ()
check_group_size = None
quantize_weight = None
