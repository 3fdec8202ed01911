"""FP4 (FLOAT4E2M1) weights on the onnxruntime fallback.

onnxruntime 1.32's CPU provider has no DequantizeLinear (nor Cast) over
FLOAT4E2M1: "NOT_IMPLEMENTED : Could not find an implementation for
DequantizeLinear(23)". So, at session build only (the embedded ONNX and the
TensorRT engine keep the packed form), each block DequantizeLinear over a
FLOAT4E2M1 initializer becomes

    Reshape(Cast(w float16, to=float), [out, in / block, block])
        * Unsqueeze(scale [out, in / block], -1)  ->  Reshape [out, in]

i.e. a Mul with each block scale repeated over its block, and the initializer
holds the E2M1 values as float16, which represents every one of them exactly.
The DequantizeLinear of the FP8 block scales becomes Cast + Mul by the
per-tensor scale (the same single float32 product), because onnxruntime never
constant-folds a DequantizeLinear: so the whole chain is constant and
onnxruntime folds it, at session build, into one float32 weight that the
MatMul reads, with no dequantizing per call. Exact in values, but the fallback
then holds 4 bytes per weight (8x the packed bytes) and cannot read the
packed named data in place (docs/quantization.md). Only 2-D weights dequantized along axis 1 (what
quantization/formats/fp4.py writes) are taken; anything else is refused by name.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ...dtypes import E2M1_VALUES
from ...errors import InvalidProgramError

__all__ = ["E2M1_FLOAT16", "FP4_DTYPE", "decode_e2m1", "fp4_as_float16"]

FP4_DTYPE = "float4_e2m1"  # the blob's name for a packed FLOAT4E2M1 weight
#: E2M1 code (sign, 2 exponent bits, 1 mantissa bit) -> its value, exact in float16.
E2M1_FLOAT16 = np.array(E2M1_VALUES, dtype=np.float16)


def decode_e2m1(packed, shape: tuple[int, ...]) -> np.ndarray:
    """Packed bytes (element 2j in the low nibble) -> an array of `shape`.
    `packed` must hold exactly ceil(numel / 2) bytes (named_data.py checked a
    named-data weight's size; an inline one is checked here)."""
    count = math.prod(shape)
    data = np.frombuffer(packed, dtype=np.uint8)
    if data.size != (count + 1) // 2:
        raise InvalidProgramError(f"a FLOAT4E2M1 tensor of shape {list(shape)} holds "
                                  f"{data.size} bytes, expected {(count + 1) // 2}; the blob is "
                                  "corrupt (re-export it)")
    codes = np.empty(data.size * 2, dtype=np.uint8)
    codes[0::2] = data & 0xF
    codes[1::2] = data >> 4
    return E2M1_FLOAT16[codes[:count]].reshape(shape)


# TensorProto.data_type (field 2, varint) = FLOAT4E2M1 (23), as serialized.
_FP4_FIELD = bytes([2 << 3, TensorProto.FLOAT4E2M1])


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def _int64(name: str, values: list[int]) -> TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _as_float16(t: TensorProto) -> None:
    """The initializer's type becomes FLOAT16; inline bytes are decoded here,
    named-data ones where they are fed (named_weights.py)."""
    if t.data_location == TensorProto.EXTERNAL:
        t.data_type = TensorProto.FLOAT16
        return
    values = decode_e2m1(t.raw_data, tuple(t.dims)) if t.raw_data else \
        numpy_helper.to_array(t).astype(np.float16)
    t.CopyFrom(numpy_helper.from_array(values, t.name))


def _foldable_block_scales(graph: onnx.GraphProto, fp4: dict) -> set[str]:
    """The DequantizeLinear nodes (by output name) that make an fp4 weight's scale from
    constant FP8 block scales, a float32 per-tensor scale and a zero point of 0
    (or none): each is float(x) * scale, which Cast + Mul compute alike."""
    inits = {t.name: t for t in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    found = set()
    for node in graph.node:
        if node.op_type != "DequantizeLinear" or not node.input or node.input[0] not in fp4 \
                or len(node.input) < 2 or node.input[1] not in producer:
            continue
        source = producer[node.input[1]]
        x, scale = (inits.get(n) for n in (list(source.input) + ["", ""])[:2])
        zero = inits.get(source.input[2]) if len(source.input) > 2 and source.input[2] else None
        if source.op_type == "DequantizeLinear" and x is not None and scale is not None and \
                x.data_type == TensorProto.FLOAT8E4M3FN and scale.data_type == TensorProto.FLOAT \
                and (len(source.input) < 3 or not source.input[2] or (
                    zero is not None and zero.raw_data and not any(zero.raw_data))):
            found.add(source.output[0])
    return found


def fp4_as_float16(model_bytes: bytes) -> bytes:
    """The model with every DequantizeLinear over a FLOAT4E2M1 initializer
    rewritten as above (the bytes unchanged when there is none);
    InvalidProgramError for a form it does not take."""
    if _FP4_FIELD not in model_bytes:  # no tensor can be FLOAT4E2M1: skip the parse
        return model_bytes
    model = onnx.load_model_from_string(model_bytes)
    graph = model.graph
    fp4 = {t.name: t for t in graph.initializer if t.data_type == TensorProto.FLOAT4E2M1}
    if not fp4:
        return model_bytes
    foldable = _foldable_block_scales(graph, fp4)
    nodes = []
    for node in graph.node:
        if node.op_type == "DequantizeLinear" and node.output and node.output[0] in foldable:
            cast = f"{node.output[0]}__fp8"
            nodes += [helper.make_node("Cast", [node.input[0]], [cast], to=TensorProto.FLOAT),
                      helper.make_node("Mul", [cast, node.input[1]], [node.output[0]])]
            continue
        name = node.input[0] if node.input else ""
        if name not in fp4:
            if any(i in fp4 for i in node.input):
                raise InvalidProgramError(f"node {node.name or node.op_type!r} reads the "
                                          f"FLOAT4E2M1 tensor {name or node.input!r} other than "
                                          "as a DequantizeLinear's input; the blob is corrupt")
            nodes.append(node)
            continue
        dims = list(fp4[name].dims)
        block = _attr(node, "block_size", 0)
        if node.op_type != "DequantizeLinear" or len(dims) != 2 or \
                _attr(node, "axis", 1) not in (1, -1) or block <= 0 or dims[1] % block or \
                len(node.input) != 2:
            raise InvalidProgramError(
                f"FLOAT4E2M1 weight {name!r} {dims} is read by {node.op_type} "
                f"(axis {_attr(node, 'axis', 1)}, block_size {block}); the fallback runs only "
                "a 2-D weight's block DequantizeLinear along axis 1 without a zero point, "
                "the block dividing the input features; the blob is corrupt (re-export it)")
        out, cols = dims
        p = f"{node.output[0]}__fp4"
        graph.initializer.extend([_int64(p + "_blocks", [out, cols // block, block]),
                                  _int64(p + "_shape", [out, cols]),
                                  _int64(p + "_last", [-1])])
        nodes += [
            helper.make_node("Cast", [name], [p + "_w"], to=TensorProto.FLOAT),
            helper.make_node("Reshape", [p + "_w", p + "_blocks"], [p + "_wb"]),
            helper.make_node("Unsqueeze", [node.input[1], p + "_last"], [p + "_s"]),
            helper.make_node("Mul", [p + "_wb", p + "_s"], [p + "_y"]),
            helper.make_node("Reshape", [p + "_y", p + "_shape"], [node.output[0]]),
        ]
    for t in fp4.values():
        _as_float16(t)
    for value in graph.value_info:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT4E2M1:
            value.type.tensor_type.elem_type = TensorProto.FLOAT16
    del graph.node[:]
    graph.node.extend(nodes)
    return model.SerializeToString()
