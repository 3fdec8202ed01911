"""INT4 weight-only quantization of Linear layers and embedding tables, our own path.

torchao 0.18's Int4WeightOnlyConfig needs the `mslk` package even to pack on
the CPU, so we quantize ourselves: symmetric, per group of `group_size` input
features, q = round(w / s) clamped to [-8, 7] with s = max|w| / 7 per group.
The weight is stored packed two per byte (ONNX INT4 order: element 2j in the
low nibble, 2j+1 in the high), so named data holds ceil(numel / 2) bytes once;
the scales [out, in / group] stay in the graph like the int8 path's.

The model computes `etrt_quant.dequantize_int4(packed, scale, group_size)`,
whose ONNX translation is a placeholder node that `lower_onnx` turns,
after export, into an opset-21 block DequantizeLinear (axis 1, block_size =
group) over an INT4 initializer that reinterprets the packed bytes (ONNX has no
bitcast, and torch no int4 tensors the exporter could carry).
"""
from __future__ import annotations

import onnx_ir as ir
import torch
import torch.nn.functional as F

from ...errors import QuantizationError
from ..placeholders import (QuantizedEmbedding, declare_packed, finish_placeholders,
                            grouped_dequantize_translation, pack_int4, placeholder_nodes,
                            replace_placeholder, unpack_int4)

GROUP_SIZES = (32, 64, 128)
INT4_MAX = 7  # symmetric: [-7, 7] used, -8 never produced


_LIB = torch.library.Library("etrt_quant", "FRAGMENT")
_LIB.define("dequantize_int4(Tensor packed, Tensor scale, int group_size) -> Tensor")


@torch.library.impl(_LIB, "dequantize_int4", "CompositeExplicitAutograd")
def _dequantize_int4(packed: torch.Tensor, scale: torch.Tensor, group_size: int) -> torch.Tensor:
    q = unpack_int4(packed).to(scale.dtype)
    return q * scale.repeat_interleave(group_size, dim=1)


@torch.library.register_fake("etrt_quant::dequantize_int4")
def _dequantize_int4_fake(packed: torch.Tensor, scale: torch.Tensor,
                          group_size: int) -> torch.Tensor:
    return torch.empty((packed.shape[0], packed.shape[1] * 2), dtype=scale.dtype,
                       device=packed.device)


DEQUANTIZE_INT4 = torch.ops.etrt_quant.dequantize_int4.default

PLACEHOLDER_OP = "DequantizeInt4Packed"  # never left in an exported model (lower_onnx)
TRANSLATIONS = {DEQUANTIZE_INT4: grouped_dequantize_translation(PLACEHOLDER_OP, "tensor(uint8)")}


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

    @classmethod
    def from_values(cls, q: torch.Tensor, scale: torch.Tensor, group_size: int,
                    bias: torch.Tensor | None) -> Int4Linear:
        """From int4 values held as int8 [out, in] (packed here) and scales [out, in / g]."""
        return cls(pack_int4(q).contiguous(), scale.contiguous(), group_size, bias)

    @property
    def in_features(self) -> int:
        return self.qweight_int4.shape[1] * 2

    @property
    def out_features(self) -> int:
        return self.qweight_int4.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = DEQUANTIZE_INT4(self.qweight_int4, self.weight_scale, self.group_size)
        return F.linear(x, weight, self.bias)


def lower_onnx(model: ir.Model) -> None:
    """Rewrites each placeholder node of an exported model, in place, into
    DequantizeLinear(INT4 [out, in], scale, axis=1, block_size=group): the
    packed uint8 initializer is reinterpreted (same bytes, no copy)."""
    nodes = placeholder_nodes(model, PLACEHOLDER_OP)
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


class Int4Embedding(QuantizedEmbedding):
    """Rows dequantized per group of `group_size` features (the groups' axis)."""

    def __init__(self, qweight: torch.Tensor, scale: torch.Tensor, group_size: int,
                 padding_idx: int | None) -> None:
        super().__init__(qweight, scale, padding_idx)
        self.group_size = group_size

    def dequantize_rows(self, qweight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return DEQUANTIZE_INT4(qweight, scale, self.group_size)


def quantize_linear(linear: torch.nn.Linear, layer: str,
                    group_size: int) -> tuple[torch.nn.Module, str]:
    packed, scale = quantize_int4(linear.weight, group_size, layer)
    return (Int4Linear(packed, scale, group_size, linear.bias),
            f"int4 weight-only (group {group_size})")


def quantize_embedding(embedding: torch.nn.Embedding, layer: str,
                       group_size: int) -> tuple[torch.nn.Module, str]:
    weight = embedding.weight.detach()
    packed, scale = quantize_int4(weight, group_size, layer)
    return (Int4Embedding(packed, scale.to(weight.dtype), group_size, embedding.padding_idx),
            f"int4 weight-only embedding (group {group_size})")


def check_options(group_size: int) -> None:
    if group_size not in GROUP_SIZES:
        raise QuantizationError(f"int4 group size {group_size} is not one of "
                                f"{list(GROUP_SIZES)}")


# What the importers build int4 layers from (registry.FormatSteps).
linear_module = Int4Linear
dequantize_weight = DEQUANTIZE_INT4
quantize_activation = None
dequantize_activation = None
element_dtype = None  # packed two per byte: torch has no int4 tensors
max_value = float(INT4_MAX)
group_sizes = GROUP_SIZES
quantize_weight = quantize_int4
