"""What the formats share to reach ONNX: placeholder nodes and their rewrite,
and weights packed two per byte.

A format whose ONNX form needs a newer opset than our exports (int4, fp8,
fp4: opset 21-23; we export at 18), or a dtype torch cannot carry (4-bit),
translates its dequantize op into a placeholder node of our own domain, and
rewrites that node after export into standard QuantizeLinear /
DequantizeLinear (each format's `lower_onnx`). No placeholder is ever left
in an exported model.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxscript
import torch

from .registry import mark_read_only

PLACEHOLDER_DOMAIN = "pkg.executorch_tensorrt.quant"
PLACEHOLDER_OPSET = onnxscript.values.Opset(domain=PLACEHOLDER_DOMAIN, version=1)
PARAMETER = onnx.defs.OpSchema.FormalParameter


def placeholder_op(name: str, schema: onnx.defs.OpSchema) -> onnxscript.values.Op:
    """A placeholder op for `schema`, a schema of our own given to onnxscript
    only (never registered with onnx): the exporter needs one to emit a node
    of an unknown domain."""
    return onnxscript.values.Op(PLACEHOLDER_OPSET, name, schema)


def grouped_dequantize_translation(name: str, codes_type: str) -> onnxscript.TracedOnnxFunction:
    """The ONNX translation of a `(codes, scale, int group_size) -> y` dequantize
    op (one scale per `group_size` codes along a row) as placeholder `name`,
    whose codes are `codes_type` (e.g. "tensor(uint8)")."""
    op = placeholder_op(name, onnx.defs.OpSchema(
        name, PLACEHOLDER_DOMAIN, 1,
        inputs=[PARAMETER("codes", codes_type), PARAMETER("scale", "T")],
        outputs=[PARAMETER("y", "T")],
        type_constraints=[("T", ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"], "")],
        attributes=[onnx.defs.OpSchema.Attribute("group_size",
                                                 onnx.defs.OpSchema.AttrType.INT, "")]))

    def translate(codes, scale, group_size: int):
        return op(codes, scale, group_size=group_size)

    return onnxscript.TracedOnnxFunction(PLACEHOLDER_OPSET, translate)


def placeholder_nodes(model: ir.Model, *op_types: str) -> list:
    return [n for n in model.graph if n.domain == PLACEHOLDER_DOMAIN and n.op_type in op_types]


def replace_placeholder(model, node, replacement, before=()) -> None:
    """Puts `replacement` (a standard ONNX node, onnx_ir), preceded by the
    nodes `before` it reads, where the placeholder `node` was, its output
    keeping the placeholder's name."""
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


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """int8 values in [-8, 7] (or 4-bit codes), shape [out, in] (in even) ->
    uint8 [out, in / 2]: element 2j in the low nibble (ONNX's INT4 and
    FLOAT4E2M1 order)."""
    nibbles = (q.to(torch.int16) & 0xF).to(torch.uint8)
    return nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [out, n] -> int8 [out, 2n], sign-extended."""
    low = (packed & 0xF).to(torch.int8)
    high = (packed >> 4).to(torch.int8)
    both = torch.stack([low, high], dim=-1).reshape(packed.shape[0], -1)
    return torch.where(both >= 8, both - 16, both)


def declare_packed(value: ir.Value, dtype: ir.DataType) -> None:
    """Declares a packed uint8 initializer [out, in / 2] as `dtype` [out, in]
    (INT4 or FLOAT4E2M1) over the same bytes, no copy: ONNX has no bitcast,
    and torch no 4-bit tensors the exporter could carry."""
    packed = getattr(value.const_value, "raw", None)
    if not isinstance(packed, torch.Tensor):
        packed = torch.from_numpy(value.const_value.numpy())
    rows, cols = packed.shape
    shape = ir.Shape([rows, cols * 2])
    value.const_value = ir.PackedTensor(packed, dtype, shape=shape, name=value.name)
    value.dtype = dtype
    value.shape = shape


def fp8_zero(model: ir.Model, name: str, dims: list[int] | None = None) -> ir.Value:
    """A float8 e4m3 zero point of shape `dims` (a scalar by default), registered
    as an initializer. Every FP8 Q/DQ gets an explicit one: without it,
    onnxruntime's fused FP8 Q/DQ kernels gave wrong results (max error 0.45)."""
    dims = list(dims or [])
    zero = ir.Value(name=name, type=ir.TensorType(ir.DataType.FLOAT8E4M3FN), shape=ir.Shape(dims),
                    const_value=ir.tensor(np.zeros(dims, dtype=np.uint8),
                                          dtype=ir.DataType.FLOAT8E4M3FN, name=name))
    model.graph.register_initializer(zero)
    return zero


class QuantizedEmbedding(torch.nn.Module):
    """ids -> rows of a quantized table (a row is an output channel); a format
    says how its rows dequantize (`dequantized`)."""

    def __init__(self, qweight: torch.Tensor, scale: torch.Tensor,
                 padding_idx: int | None) -> None:
        super().__init__()
        self.padding_idx = padding_idx
        # never written by a forward: a strict torch.export keeps them by reference
        self.register_buffer("qweight", mark_read_only(qweight))
        self.register_buffer("weight_scale", mark_read_only(scale))

    @property
    def num_embeddings(self) -> int:
        return self.qweight.shape[0]

    def dequantized(self) -> torch.Tensor:
        return self.dequantize_rows(self.qweight, self.weight_scale)

    def dequantize_rows(self, qweight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """Rows of the table (their codes and scales, rows on dim 0) as floats."""
        raise NotImplementedError

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if type(ids) is torch.Tensor and not torch.compiler.is_compiling():
            # Eager (a reference run): only the looked-up rows dequantized, never
            # the whole float table (a vocabulary's is gigabytes). Traced: the table.
            flat = ids.reshape(-1)
            rows = self.dequantize_rows(self.qweight[flat], self.weight_scale[flat])
            return rows.reshape(*ids.shape, rows.shape[-1])
        return torch.nn.functional.embedding(ids, self.dequantized(), self.padding_idx)

