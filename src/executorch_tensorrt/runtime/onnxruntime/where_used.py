"""Cast where used: the fallback's fp16/bf16 weights read in their own dtype
and cast to fp32 on every call, for models whose fp32 copy would not fit
(upcast.py says when; an 8B bf16 LLM's fp32 copy is 32 GB).

The rewrite (`rewrite_graph`, called by upcast.upcast_to_fp32):
- each weight becomes a model input with no initializer, fed on every run
  (named_weights.OrtNamedWeights.fed, capi.OrtSession.run): onnxruntime
  neither folds its Cast into an fp32 copy nor re-lays it out, and never
  copies it, not even while the session is created;
- a Cast to fp32 goes before its first use; a table only gathered from (a
  token embedding) is gathered in its own dtype and only the rows cast; a
  MatMul weight whose cast passes CAST_BLOCK_BYTES is cast and multiplied in
  column blocks (Slice -> Cast -> MatMul per block, then Concat);
- each of those reads waits for the value computed just before it (`_gate`):
  onnxruntime's default order runs every node whose inputs are ready as soon
  as it can, so casts that read only model inputs would all run first and
  hold every fp32 weight at once (measured: 8 chained 64 MB casts peaked at
  512 MB; gated, 64 MB). The gate reshapes the weight to its own shape by a
  shape that depends on that value's data (Reshape aliases: no copy), so
  onnxruntime can neither run it early nor fold it.
The sessions run without onnxruntime's arena (named_weights.py), so each
call's casts go back to the system after their last use.
"""
from __future__ import annotations

import math
import os
from typing import Iterable

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ...errors import ArgumentError

REDUCED_WEIGHT_DTYPES = frozenset({"float16", "bfloat16"})  # blob dtype names
UPCAST_ENV = "EXECUTORCH_TENSORRT_ORT_UPCAST"
#: With UPCAST_ENV unset, a partition's fp16/bf16 named-data weights are upcast
#: once when their fp32 copy is at most this, and cast where used above it.
UPCAST_COPY_LIMIT = 1 << 30
#: A MatMul weight whose fp32 cast would pass this is cast and multiplied in
#: column blocks of at most this many fp32 bytes (an 8B-shaped LLM head:
#: 2.1 GB in fp32, so 17 blocks).
CAST_BLOCK_BYTES = 128 << 20
# Ops whose non-weight inputs are fp32 activations in an upcast graph: what a
# gate may read (IsNaN needs a float).
_FLOAT_MATH = frozenset({"MatMul", "Gemm", "Mul", "Add", "Sub", "Div", "Conv",
                         "ConvTranspose", "LayerNormalization", "SimplifiedLayerNormalization"})


def cast_where_used(weights: Iterable) -> frozenset[str]:
    """The names of the fp16/bf16 weights (runtime WeightBuffers) that the
    fallback casts where used instead of copying them upcast: all of them
    when their fp32 copy would exceed UPCAST_COPY_LIMIT, or as UPCAST_ENV
    says ("copy" / "where-used")."""
    reduced = [w for w in weights if w.dtype in REDUCED_WEIGHT_DTYPES]
    text = os.environ.get(UPCAST_ENV, "").strip().lower()
    if text not in ("", "copy", "where-used"):
        raise ArgumentError(f"{UPCAST_ENV}={text!r} is not an upcast choice: set 'copy' (an "
                            "fp32 copy of the fp16/bf16 weights, made once), 'where-used' (a "
                            "Cast before each use, on every call: no copy) or leave it unset "
                            f"(a copy when it is at most {UPCAST_COPY_LIMIT >> 20} MiB)")
    fp32_bytes = sum(math.prod(w.shape) * 4 for w in reduced)
    if text == "where-used" or (not text and fp32_bytes > UPCAST_COPY_LIMIT):
        return frozenset(w.name for w in reduced)
    return frozenset()


class _Rewrite:
    """The nodes and small constants the rewrite adds to one graph."""

    def __init__(self, graph: onnx.GraphProto, names: frozenset[str]):
        self.graph = graph
        # What a gate must not wait for: the model's inputs and constants, and
        # the weights cast where used, read raw or through their whole Cast.
        self.external = ({i.name for i in graph.input} | {t.name for t in graph.initializer}
                         | names | {n + "__fp32" for n in names})
        self.zero = self.constant("where_used__zero", np.array(0, np.int64))
        self.shapes: dict[str, str] = {}  # weight -> its dims' constant, one per weight

    def constant(self, name: str, value: np.ndarray) -> str:
        self.graph.initializer.append(numpy_helper.from_array(value, name))
        self.external.add(name)
        return name

    def activation(self, node: onnx.NodeProto, weight: str) -> str | None:
        """A computed fp32 input of `node` a gate can wait for, if any."""
        if node.op_type not in _FLOAT_MATH:
            return None
        return next((i for i in node.input if i and i != weight and i not in self.external),
                    None)

    def gate(self, weight: str, dims: list[int], after: str | None, tag: str,
             nodes: list[onnx.NodeProto]) -> str:
        """`weight` read only once `after` exists (module docstring): appends
        the gate's nodes to `nodes` and returns the gated name."""
        if after is None:
            return weight
        if weight not in self.shapes:
            self.shapes[weight] = self.constant(f"{weight}__shape", np.array(dims, np.int64))
        shape = self.shapes[weight]
        low, nan, flag, zero, gated_shape, gated = (f"{tag}_{s}" for s in (
            "min", "nan", "flag", "zero", "gated_shape", "gated"))
        nodes += [onnx.helper.make_node("ReduceMin", [after], [low], keepdims=0),
                  onnx.helper.make_node("IsNaN", [low], [nan]),
                  onnx.helper.make_node("Cast", [nan], [flag], to=TensorProto.INT64),
                  onnx.helper.make_node("Mul", [flag, self.zero], [zero]),
                  onnx.helper.make_node("Add", [shape, zero], [gated_shape]),
                  onnx.helper.make_node("Reshape", [weight, gated_shape], [gated])]
        return gated

    def matmul_in_column_blocks(self, node: onnx.NodeProto, weight: str,
                                dims: list[int]) -> list[onnx.NodeProto]:
        """`node` = MatMul(a, weight) as Slice -> Cast -> MatMul per block of
        the weight's columns, then Concat on the last axis; each block's
        Slice waits for the previous block's product."""
        rows, cols = dims
        step = max(1, CAST_BLOCK_BYTES // (4 * max(rows, 1)))
        out = node.output[0]
        axes = self.constant(f"{out}__{weight}_axes", np.array([1], np.int64))
        nodes: list[onnx.NodeProto] = []
        parts: list[str] = []
        after = self.activation(node, weight)
        for j, start in enumerate(range(0, cols, step)):
            block = f"{out}__{weight}_block{j}"
            source = self.gate(weight, dims, after, block, nodes)
            first = self.constant(f"{block}_start", np.array([start], np.int64))
            end = self.constant(f"{block}_end", np.array([min(start + step, cols)], np.int64))
            nodes += [onnx.helper.make_node("Slice", [source, first, end, axes], [block]),
                      onnx.helper.make_node("Cast", [block], [block + "_fp32"],
                                            to=TensorProto.FLOAT),
                      onnx.helper.make_node("MatMul", [node.input[0], block + "_fp32"],
                                            [block + "_out"])]
            parts.append(block + "_out")
            after = block + "_out"
        nodes.append(onnx.helper.make_node("Concat", parts, [out], axis=-1))
        return nodes


def _rename_uses(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]


def _gathered_only(graph: onnx.GraphProto, uses: list[int], name: str) -> bool:
    return bool(uses) and all(
        graph.node[i].op_type == "Gather" and graph.node[i].input[0] == name
        and list(graph.node[i].input).count(name) == 1 for i in uses)


def _matmul_only(graph: onnx.GraphProto, uses: list[int], name: str) -> bool:
    return bool(uses) and all(
        graph.node[i].op_type == "MatMul" and graph.node[i].input[0] != name
        and list(graph.node[i].input)[1:] == [name] for i in uses)


def rewrite_graph(graph: onnx.GraphProto, names: frozenset[str]) -> None:
    """The weights in `names` (initializers) cast where used (module
    docstring); their initializers go, and they become the graph's last
    inputs."""
    weights = [(t.name, t.data_type, list(t.dims)) for t in graph.initializer if t.name in names]
    kept = [t for t in graph.initializer if t.name not in names]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    users: dict[str, list[int]] = {}
    for i, node in enumerate(graph.node):
        for name in node.input:
            users.setdefault(name, []).append(i)
    rewrite = _Rewrite(graph, frozenset(names))
    before: dict[int, list[onnx.NodeProto]] = {}  # node index -> nodes placed before it
    after: dict[int, list[onnx.NodeProto]] = {}   # node index -> nodes placed after it
    replaced: dict[int, list[onnx.NodeProto]] = {}  # node index -> the nodes instead
    for name, data_type, dims in weights:
        graph.input.append(onnx.helper.make_tensor_value_info(name, data_type, dims))
        uses = users.get(name, [])
        if _gathered_only(graph, uses, name):
            for i in uses:
                node = graph.node[i]
                rows = node.output[0] + "__" + name + "_rows"
                after.setdefault(i, []).append(onnx.helper.make_node(
                    "Cast", [rows], [node.output[0]], to=TensorProto.FLOAT))
                node.output[0] = rows
        elif len(dims) == 2 and math.prod(dims) * 4 > CAST_BLOCK_BYTES and \
                _matmul_only(graph, uses, name):
            for i in uses:
                replaced[i] = rewrite.matmul_in_column_blocks(graph.node[i], name, dims)
        else:
            first = uses[0] if uses else len(graph.node)
            nodes = before.setdefault(first, [])
            source = rewrite.gate(name, dims, rewrite.activation(graph.node[first], name)
                                  if uses else None, name + "__gate", nodes)
            inner = name + "__fp32"  # _Rewrite.external knows this name
            _rename_uses(graph, name, inner)
            nodes.append(onnx.helper.make_node("Cast", [source], [inner], to=TensorProto.FLOAT))
    ordered = []
    for i, node in enumerate(list(graph.node) + [None]):
        ordered.extend(before.get(i, ()))
        if node is not None:
            ordered.extend(replaced.get(i, [node]))
            ordered.extend(after.get(i, ()))
    del graph.node[:]
    graph.node.extend(ordered)
