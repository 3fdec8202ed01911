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
crafted .pte is refused with the weight named instead. An FP4 weight's scale
is itself dequantized (NVFP4's two levels): it must be the output of a
DequantizeLinear over a constant FP8 E4M3 tensor of the block-scale shape
[out, in / block] with a per-tensor scale.
"""
from __future__ import annotations

import onnx

from ..errors import InvalidProgramError

__all__ = ["check_quantized_weights"]

_QUANTIZED = ("int8", "int4", "uint8", "float8", "float4_e2m1")
_FP8 = onnx.TensorProto.FLOAT8E4M3FN


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
    types = {t.name: t.data_type for t in model.graph.initializer}
    producers = {out: node for node in model.graph.node for out in node.output}
    for node in model.graph.node:
        if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
            continue
        if not node.input or node.input[0] not in quantized:
            continue
        entry = quantized[node.input[0]]
        shape = list(entry.shape)
        scale = node.input[1] if len(node.input) > 1 else ""
        if entry.dtype == "float4_e2m1":
            _check_fp4_scales(node, entry, shape, scale, producers, constants, types)
            continue
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


def _check_fp4_scales(node: onnx.NodeProto, entry, shape: list[int], scale: str, producers: dict,
                      constants: dict[str, list[int]], types: dict[str, int]) -> None:
    """An FP4 weight's DequantizeLinear: block-wise, its scale the output of a
    DequantizeLinear over constant FP8 block scales with a per-tensor scale."""
    block = _attr(node, "block_size", 0)
    what = f"DequantizeLinear of float4_e2m1 weight {entry.name!r} {shape}"
    if block <= 0:
        raise InvalidProgramError(f"{what}: block_size {block}, but an FP4 weight is "
                                  "dequantized by blocks; the blob is corrupt (re-export it)")
    (expected,) = _expected_scale(shape, _attr(node, "axis", 1), block, entry.name)
    source = producers.get(scale)
    if source is None or source.op_type != "DequantizeLinear" or len(source.input) < 2:
        raise InvalidProgramError(f"{what}: its scale {scale!r} is not the output of a "
                                  "DequantizeLinear of FP8 block scales; the blob is corrupt "
                                  "(re-export it)")
    blocks, global_scale = source.input[0], source.input[1]
    if types.get(blocks) != _FP8 or constants.get(blocks) != expected:
        raise InvalidProgramError(
            f"{what}: its block scales {blocks!r} are "
            f"{'FLOAT8E4M3FN ' if types.get(blocks) == _FP8 else ''}"
            f"{constants.get(blocks, 'not a constant')}, expected a constant FLOAT8E4M3FN "
            f"{expected}; the blob is corrupt (re-export it)")
    if constants.get(global_scale) not in ([], [1]):
        raise InvalidProgramError(f"{what}: the scale of its block scales {global_scale!r} is "
                                  f"{constants.get(global_scale, 'not a constant')}, expected "
                                  "a per-tensor constant; the blob is corrupt (re-export it)")
