"""FP8 (e4m3) per-tensor quantize / dequantize ops with TensorRT's semantics.

PT2E's `quantized_decomposed.quantize_per_tensor` rounds x / scale to an
integer before casting to float8, which is not what TensorRT (or ONNX
QuantizeLinear) computes for FP8: a saturating cast of x / scale to e4m3, no
integer rounding. The Q/DQ lowering (importers/qdq_graph.py) rewrites PT2E's FP8 nodes
into `etrt_quant.quantize_fp8` / `dequantize_fp8`, so the eager reference and
the exported graph compute the same thing.

ONNX float8 needs opset 19 and our exports are opset 18, so, like int4
(int4.py), their translations are placeholder nodes that `lower_onnx`
rewrites after export into QuantizeLinear / DequantizeLinear with a constant
float scale and a float8 zero point of 0, raising the model to opset 21.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxscript
import torch

from ...errors import QuantizationError
from ..placeholders import (PARAMETER, PLACEHOLDER_DOMAIN, PLACEHOLDER_OPSET, finish_placeholders,
                            fp8_zero, placeholder_nodes, placeholder_op, replace_placeholder)

FP8_MAX = 448.0  # largest finite e4m3fn value
FP8 = torch.float8_e4m3fn

_LIB = torch.library.Library("etrt_quant", "FRAGMENT")

_LIB.define("quantize_fp8(Tensor x, float scale) -> Tensor")
_LIB.define("dequantize_fp8(Tensor q, float scale) -> Tensor")


@torch.library.impl(_LIB, "quantize_fp8", "CompositeExplicitAutograd")
def _quantize_fp8(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.clamp(x.to(torch.float32) / scale, -FP8_MAX, FP8_MAX).to(FP8)


@torch.library.register_fake("etrt_quant::quantize_fp8")
def _quantize_fp8_fake(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty(x.shape, dtype=FP8, device=x.device)


@torch.library.impl(_LIB, "dequantize_fp8", "CompositeExplicitAutograd")
def _dequantize_fp8(q: torch.Tensor, scale: float) -> torch.Tensor:
    return q.to(torch.float32) * scale


@torch.library.register_fake("etrt_quant::dequantize_fp8")
def _dequantize_fp8_fake(q: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty(q.shape, dtype=torch.float32, device=q.device)


_LIB.define("dequantize_fp8_weight(Tensor q, Tensor scale, int axis) -> Tensor")


@torch.library.impl(_LIB, "dequantize_fp8_weight", "CompositeExplicitAutograd")
def _dequantize_fp8_weight(q: torch.Tensor, scale: torch.Tensor, axis: int) -> torch.Tensor:
    if scale.dim() == 0:  # per tensor
        return q.to(torch.float32) * scale
    shape = [1] * q.dim()
    shape[axis] = q.shape[axis]
    return q.to(torch.float32) * scale.reshape(shape)


@torch.library.register_fake("etrt_quant::dequantize_fp8_weight")
def _dequantize_fp8_weight_fake(q: torch.Tensor, scale: torch.Tensor, axis: int) -> torch.Tensor:
    return torch.empty(q.shape, dtype=torch.float32, device=q.device)


QUANTIZE_FP8 = torch.ops.etrt_quant.quantize_fp8.default
DEQUANTIZE_FP8_WEIGHT = torch.ops.etrt_quant.dequantize_fp8_weight.default
DEQUANTIZE_FP8 = torch.ops.etrt_quant.dequantize_fp8.default

_P = PARAMETER
_SCALE_ATTR = onnx.defs.OpSchema.Attribute("scale", onnx.defs.OpSchema.AttrType.FLOAT, "")
# Schemas of our own, given to onnxscript only (never registered with onnx):
# float8 is not an opset-18 type, so the placeholder carries it as uint8.
_Q_SCHEMA = onnx.defs.OpSchema("QuantizeFp8", PLACEHOLDER_DOMAIN, 1,
                               inputs=[_P("x", "tensor(float)")],
                               outputs=[_P("y", "tensor(float8e4m3fn)")], attributes=[_SCALE_ATTR])
_DQ_SCHEMA = onnx.defs.OpSchema("DequantizeFp8", PLACEHOLDER_DOMAIN, 1,
                                inputs=[_P("q", "tensor(float8e4m3fn)")],
                                outputs=[_P("y", "tensor(float)")], attributes=[_SCALE_ATTR])
_WEIGHT_SCHEMA = onnx.defs.OpSchema(
    "DequantizeFp8Weight", PLACEHOLDER_DOMAIN, 1,
    inputs=[_P("q", "tensor(float8e4m3fn)"), _P("scale", "tensor(float)")],
    outputs=[_P("y", "tensor(float)")],
    attributes=[onnx.defs.OpSchema.Attribute("axis", onnx.defs.OpSchema.AttrType.INT, "")])
_WEIGHT_OP = placeholder_op("DequantizeFp8Weight", _WEIGHT_SCHEMA)
_Q_OP = placeholder_op("QuantizeFp8", _Q_SCHEMA)
_DQ_OP = placeholder_op("DequantizeFp8", _DQ_SCHEMA)


def _onnx_quantize_fp8(x, scale: float):
    return _Q_OP(x, scale=scale)


def _onnx_dequantize_fp8(q, scale: float):
    return _DQ_OP(q, scale=scale)


def _onnx_dequantize_fp8_weight(q, scale, axis: int):
    return _WEIGHT_OP(q, scale, axis=axis)


TRANSLATIONS = {
    DEQUANTIZE_FP8_WEIGHT: onnxscript.TracedOnnxFunction(PLACEHOLDER_OPSET,
                                                         _onnx_dequantize_fp8_weight),
    QUANTIZE_FP8: onnxscript.TracedOnnxFunction(PLACEHOLDER_OPSET, _onnx_quantize_fp8),
    DEQUANTIZE_FP8: onnxscript.TracedOnnxFunction(PLACEHOLDER_OPSET, _onnx_dequantize_fp8),
}


def lower_onnx(model: ir.Model) -> None:
    """Rewrites each FP8 placeholder node of an exported model, in place, into
    QuantizeLinear(x, scale, zero_point float8 0) / DequantizeLinear(q, scale,
    zero_point float8 0): scale a float32 scalar initializer."""
    nodes = placeholder_nodes(model, "QuantizeFp8", "DequantizeFp8", "DequantizeFp8Weight")
    if not nodes:
        return
    for node in nodes:
        if node.op_type == "DequantizeFp8Weight":
            _lower_weight_node(model, node)
            continue
        scale_value = node.attributes["scale"].as_float()
        scale = ir.Value(name=f"{node.name}_scale", type=ir.TensorType(ir.DataType.FLOAT),
                         shape=ir.Shape([]),
                         const_value=ir.tensor(np.array(scale_value, dtype=np.float32),
                                               name=f"{node.name}_scale"))
        model.graph.register_initializer(scale)
        zero = fp8_zero(model, f"{node.name}_zero")
        op_type = "QuantizeLinear" if node.op_type == "QuantizeFp8" else "DequantizeLinear"
        replacement = ir.node(op_type, [node.inputs[0], scale, zero], name=node.name)
        replacement.outputs[0].dtype = node.outputs[0].dtype
        replacement.outputs[0].shape = node.outputs[0].shape
        replace_placeholder(model, node, replacement)
    # float8 Q/DQ need opset 19; 21 like the int4 path, so both can meet in one model.
    finish_placeholders(model)


def _lower_weight_node(model: ir.Model, node) -> None:
    """DequantizeFp8Weight(q, scale) -> DequantizeLinear(q, scale, axis): a
    0-d scale is per tensor, [out] per output channel; zero point float8 0."""
    q, scale = node.inputs[0], node.inputs[1]
    if q is None or q.name not in model.graph.initializers or scale is None \
            or scale.const_value is None:
        raise QuantizationError(
            f"an fp8 weight or its scale reached the ONNX model as a computed value "
            f"({node.name}), not a constant; TensorRT needs both as initializers")
    axis = node.attributes["axis"].as_int()
    zero = fp8_zero(model, f"{node.name}_zero",
                    list(scale.shape) if scale.shape is not None else [])
    replacement = ir.node("DequantizeLinear", [q, scale, zero], attributes={"axis": axis},
                          name=node.name)
    replacement.outputs[0].dtype = node.outputs[0].dtype
    replacement.outputs[0].shape = node.outputs[0].shape
    replace_placeholder(model, node, replacement)


class Fp8WeightLinear(torch.nn.Module):
    """y = x @ dequantize_fp8_weight(q, scale).T + bias: q e4m3 [out, in], scale
    0-d (per tensor) or [out] (per output channel), float activations."""

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.register_buffer("qweight_fp8", q)
        self.register_buffer("weight_scale", scale)
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = DEQUANTIZE_FP8_WEIGHT(self.qweight_fp8, self.weight_scale, 0)
        return torch.nn.functional.linear(x, weight.to(x.dtype), self.bias)


# fp8 weight-only layers come from the importers (torchao, ModelOpt); quantize()
# has no fp8 weight-only path of its own yet.
quantize_linear = None
quantize_embedding = None
check_options = None

# What the importers build fp8 layers from (registry.FormatSteps).
linear_module = Fp8WeightLinear
dequantize_weight = DEQUANTIZE_FP8_WEIGHT
quantize_activation = QUANTIZE_FP8
dequantize_activation = DEQUANTIZE_FP8
element_dtype = FP8
max_value = FP8_MAX
group_sizes = ()
check_group_size = None
quantize_weight = None
