"""Checks a blob's quantized named-data weights against the DequantizeLinear
nodes that read them, before any executor reads a byte (docs/quantization.md).

An int8 or int4 weight in named data is only as safe as the scale and block
size in the graph that dequantizes it: a scale of the wrong shape, or a block
size that does not tile the weight, makes onnxruntime or TensorRT index past
the scales or fail deep inside a kernel. The blob schema already checked each
weight's byte size against its dtype and shape (int4: ceil(numel / 2));
this checks each DequantizeLinear over a listed weight: its scale is a
constant of the layout the weight needs (per tensor, per axis, or per block
of `block_size` along `axis`, the block dividing that dimension), so a
crafted .pte is refused with the weight named instead.
"""
from __future__ import annotations

import onnx

from ..errors import InvalidProgramError

__all__ = ["check_quantized_weights"]

_QUANTIZED = ("int8", "int4", "uint8", "float8")


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def _expected_scale(shape: list[int], axis: int, block: int, name: str) -> list[list[int]]:
    """The scale shapes DequantizeLinear accepts for a weight of `shape`."""
    rank = len(shape)
    if not -rank <= axis < rank:
        raise InvalidProgramError(f"DequantizeLinear of weight {name!r} {shape}: axis {axis} "
                                  f"is outside its {rank} dimensions; the blob is corrupt")
    axis %= rank
    if block == 0:
        return [[], [1], [shape[axis]]]
    if block < 0 or shape[axis] % block:
        raise InvalidProgramError(
            f"DequantizeLinear of weight {name!r} {shape}: block_size {block} does not divide "
            f"dimension {axis} ({shape[axis]}); the blob is corrupt (re-export it)")
    return [[d // block if i == axis else d for i, d in enumerate(shape)]]


def check_quantized_weights(model: onnx.ModelProto, weights: list | tuple) -> None:
    """Raises InvalidProgramError when a DequantizeLinear over a quantized
    named-data weight has a scale that is not a constant of the right shape."""
    quantized = {w.name: w for w in weights if w.dtype in _QUANTIZED}
    if not quantized:
        return
    constants = {t.name: list(t.dims) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
            continue
        if not node.input or node.input[0] not in quantized:
            continue
        entry = quantized[node.input[0]]
        shape = list(entry.shape)
        scale = node.input[1] if len(node.input) > 1 else ""
        if scale not in constants:
            raise InvalidProgramError(
                f"DequantizeLinear of weight {entry.name!r}: its scale {scale!r} is not a "
                "constant of the ONNX model; the blob is corrupt (re-export it)")
        allowed = _expected_scale(shape, _attr(node, "axis", 1), _attr(node, "block_size", 0),
                                  entry.name)
        if constants[scale] not in allowed:
            raise InvalidProgramError(
                f"DequantizeLinear of {entry.dtype} weight {entry.name!r} {shape}: scale "
                f"{scale!r} has shape {constants[scale]}, expected "
                f"{' or '.join(str(a) for a in allowed)}; the blob is corrupt (re-export it)")
