"""INT4 weight-only quantization of Linear layers, our own path (issue #22).

torchao 0.18's Int4WeightOnlyConfig needs the `mslk` package even to pack on
the CPU, so we quantize ourselves: symmetric, per group of `group_size` input
features, q = round(w / s) clamped to [-8, 7] with s = max|w| / 7 per group.
The weight is stored packed two per byte (ONNX INT4 order: element 2j in the
low nibble, 2j+1 in the high), so named data holds ceil(numel / 2) bytes once;
the scales [out, in / group] stay in the graph like the int8 path's.

The model computes `etrt_quant.dequantize_int4(packed, scale, group_size)`,
whose ONNX translation is a placeholder node that `lower_int4_nodes` turns,
after export, into an opset-21 block DequantizeLinear (axis 1, block_size =
group) over an INT4 initializer that reinterprets the packed bytes (ONNX has no
bitcast, and torch no int4 tensors the exporter could carry).
"""
from __future__ import annotations

import onnx_ir as ir
import torch
import torch.nn.functional as F

from .errors import QuantizationError
from .ops import (DEQUANTIZE_INT4, PLACEHOLDER_DOMAIN, PLACEHOLDER_OP, finish_placeholders,
                  replace_placeholder)

GROUP_SIZES = (32, 64, 128)
INT4_MAX = 7  # symmetric: [-7, 7] used, -8 never produced


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """int8 values in [-8, 7], shape [out, in] (in even) -> uint8 [out, in / 2]."""
    nibbles = (q.to(torch.int16) & 0xF).to(torch.uint8)
    return nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)


def check_group_size(layer: str, in_features: int, group_size: int) -> None:
    """Refuses a group size not in GROUP_SIZES or one that does not divide the layer's input."""
    if group_size not in GROUP_SIZES:
        raise QuantizationError(f"layer {layer!r}: int4 group size {group_size} is not one of "
                                f"{list(GROUP_SIZES)}")
    if in_features % group_size:
        raise QuantizationError(
            f"layer {layer!r}: int4 group size {group_size} does not divide its "
            f"{in_features} input features; choose a group size from {list(GROUP_SIZES)} "
            "that divides them, or leave this layer unquantized")


def quantize_int4(weight: torch.Tensor, group_size: int, layer: str = "") -> tuple[torch.Tensor,
                                                                                    torch.Tensor]:
    """A float weight [out, in] -> (packed uint8 [out, in / 2], scale float32 [out, in / g])."""
    out_features, in_features = weight.shape
    check_group_size(layer, in_features, group_size)
    w = weight.detach().to(torch.float32).reshape(out_features, -1, group_size)
    amax = w.abs().amax(dim=-1, keepdim=True)
    # TensorRT's parser needs every scale positive: an all-zero group gets 1.
    scale = torch.where(amax > 0, amax / INT4_MAX, torch.ones_like(amax))
    q = torch.clamp(torch.round(w / scale), -8, 7).to(torch.int8).reshape(out_features, -1)
    return pack_int4(q).contiguous(), scale.reshape(out_features, -1).contiguous()


class Int4Linear(torch.nn.Module):
    """y = x @ dequantize_int4(packed, scale).T + bias."""

    def __init__(self, packed: torch.Tensor, scale: torch.Tensor, group_size: int,
                 bias: torch.Tensor | None) -> None:
        super().__init__()
        self.group_size = group_size
        self.register_buffer("qweight_int4", packed)
        self.register_buffer("weight_scale", scale)
        self.bias = bias

    @property
    def in_features(self) -> int:
        return self.qweight_int4.shape[1] * 2

    @property
    def out_features(self) -> int:
        return self.qweight_int4.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = DEQUANTIZE_INT4(self.qweight_int4, self.weight_scale, self.group_size)
        return F.linear(x, weight, self.bias)


def declare_packed(value: ir.Value, dtype: ir.DataType) -> None:
    """Declares a packed uint8 initializer [out, in / 2] as `dtype` [out, in]
    (INT4, or fp4.py's FLOAT4E2M1) over the same bytes, no copy: ONNX has no
    bitcast, and torch no 4-bit tensors the exporter could carry."""
    packed = getattr(value.const_value, "raw", None)
    if not isinstance(packed, torch.Tensor):
        packed = torch.from_numpy(value.const_value.numpy())
    rows, cols = packed.shape
    shape = ir.Shape([rows, cols * 2])
    value.const_value = ir.PackedTensor(packed, dtype, shape=shape, name=value.name)
    value.dtype = dtype
    value.shape = shape


def lower_int4_nodes(model: ir.Model) -> None:
    """Rewrites each placeholder node of an exported model, in place, into
    DequantizeLinear(INT4 [out, in], scale, axis=1, block_size=group): the
    packed uint8 initializer is reinterpreted (same bytes, no copy)."""
    nodes = [n for n in model.graph
             if n.domain == PLACEHOLDER_DOMAIN and n.op_type == PLACEHOLDER_OP]
    if not nodes:
        return
    for node in nodes:
        packed_value, scale_value = node.inputs[0], node.inputs[1]
        tensor = packed_value.const_value if packed_value is not None else None
        if tensor is None or packed_value.name not in model.graph.initializers:
            raise QuantizationError(
                f"an int4 weight reached the ONNX model as a computed value ({node.name}), not "
                "a constant; TensorRT needs int4 weights as initializers")
        declare_packed(packed_value, ir.DataType.INT4)
        group = node.attributes["group_size"].as_int()
        replacement = ir.node("DequantizeLinear", [packed_value, scale_value],
                              attributes={"axis": 1, "block_size": group}, name=node.name)
        replace_placeholder(model, node, replacement)
    # Block DequantizeLinear and INT4 tensors need opset 21 (IR version 10).
    finish_placeholders(model)
