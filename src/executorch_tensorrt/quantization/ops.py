"""The one dequantize op a quantized weight reaches the ONNX exporter through.

torchao keeps quantized weights as tensor subclasses that torch.export flattens
into an int8 matmul followed by a scale multiply, with storage the exporter
cannot read ("invalid python storage"). We instead give each quantized linear
an explicit `etrt_quant.dequantize_weight(q, scale, axis)` over plain buffers:
ExecuTorch's named data stores `q` as int8 (once), and the ONNX translation is
DequantizeLinear(q, scale, axis) with no zero point (symmetric, which is all
TensorRT's parser takes), so TensorRT sees a weight-only quantized MatMul.
"""
from __future__ import annotations

import onnx
import onnxscript
import torch
from onnxscript.onnx_opset import opset18 as op

_LIB = torch.library.Library("etrt_quant", "DEF")
_LIB.define("dequantize_weight(Tensor q, Tensor scale, int axis) -> Tensor")
# int4 weights packed two per byte, symmetric per group of input features (int4.py).


def _scale_view(q: torch.Tensor, scale: torch.Tensor, axis: int) -> torch.Tensor:
    shape = [1] * q.dim()
    shape[axis] = q.shape[axis]
    return scale.reshape(shape)


@torch.library.impl(_LIB, "dequantize_weight", "CompositeExplicitAutograd")
def _dequantize_weight(q: torch.Tensor, scale: torch.Tensor, axis: int) -> torch.Tensor:
    return q.to(scale.dtype) * _scale_view(q, scale, axis)


@torch.library.register_fake("etrt_quant::dequantize_weight")
def _dequantize_weight_fake(q: torch.Tensor, scale: torch.Tensor, axis: int) -> torch.Tensor:
    return torch.empty(q.shape, dtype=scale.dtype, device=q.device)


DEQUANTIZE_WEIGHT = torch.ops.etrt_quant.dequantize_weight.default

_OPSET = onnxscript.values.Opset(domain="pkg.executorch_tensorrt.quant", version=1)


def _onnx_dequantize_weight(q, scale, axis: int):
    """Per-channel DequantizeLinear, zero point omitted (= 0, symmetric)."""
    return op.DequantizeLinear(q, scale, axis=axis)


TRANSLATIONS = {DEQUANTIZE_WEIGHT: onnxscript.TracedOnnxFunction(_OPSET, _onnx_dequantize_weight)}


_LIB.define("dequantize_int4(Tensor packed, Tensor scale, int group_size) -> Tensor")


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [out, n] -> int8 [out, 2n], sign-extended."""
    low = (packed & 0xF).to(torch.int8)
    high = (packed >> 4).to(torch.int8)
    both = torch.stack([low, high], dim=-1).reshape(packed.shape[0], -1)
    return torch.where(both >= 8, both - 16, both)


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

# The placeholder's domain: never left in an exported model (lower_int4_nodes).
PLACEHOLDER_DOMAIN = "pkg.executorch_tensorrt.quant"
PLACEHOLDER_OP = "DequantizeInt4Packed"
_PLACEHOLDER = onnxscript.values.Opset(domain=PLACEHOLDER_DOMAIN, version=1)
_P = onnx.defs.OpSchema.FormalParameter
# A schema of our own (given to onnxscript, not registered with onnx): the
# exporter needs one to emit a node of an unknown domain.
_PLACEHOLDER_SCHEMA = onnx.defs.OpSchema(
    PLACEHOLDER_OP, PLACEHOLDER_DOMAIN, 1,
    inputs=[_P("packed", "tensor(uint8)"), _P("scale", "T")], outputs=[_P("y", "T")],
    type_constraints=[("T", ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"], "")],
    attributes=[onnx.defs.OpSchema.Attribute("group_size", onnx.defs.OpSchema.AttrType.INT, "")])
_PLACEHOLDER_OP = onnxscript.values.Op(_PLACEHOLDER, PLACEHOLDER_OP, _PLACEHOLDER_SCHEMA)


def _onnx_dequantize_int4(packed, scale, group_size: int):
    return _PLACEHOLDER_OP(packed, scale, group_size=group_size)


INT4_TRANSLATION = onnxscript.TracedOnnxFunction(_PLACEHOLDER, _onnx_dequantize_int4)

TRANSLATIONS[DEQUANTIZE_INT4] = INT4_TRANSLATION


def register_quant_ops(registry) -> None:
    for target, function in TRANSLATIONS.items():
        if not registry.is_registered(target):
            registry.register_op(target, function, is_complex=False)


def replace_placeholder(model, node, replacement, before=()) -> None:
    """Puts `replacement` (a standard ONNX node, onnx_ir), preceded by the
    nodes `before` it reads, where the placeholder `node` was, its output
    keeping the placeholder's name."""
    import onnx_ir as ir

    replacement.outputs[0].name = node.outputs[0].name
    ir.convenience.replace_nodes_and_values(model.graph, node, [node],
                                            [*before, replacement], node.outputs,
                                            replacement.outputs)


def finish_placeholders(model, opset: int = 21, ir_version: int = 10) -> None:
    """Once every placeholder is replaced: at least opset 21 and IR version 10
    (block and float8 Q/DQ, INT4 tensors; FLOAT4E2M1 asks for 23 and 11; the
    int4, fp8 and fp4 paths can meet in one model), and no placeholder domain
    left."""
    model.opset_imports[""] = max(model.opset_imports.get("", opset), opset)
    model.opset_imports.pop(PLACEHOLDER_DOMAIN, None)
    model.ir_version = max(model.ir_version or ir_version, ir_version)
