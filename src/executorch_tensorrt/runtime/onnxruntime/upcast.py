"""fp16/bf16 ONNX -> fp32, for the onnxruntime fallback only.

onnxruntime's CPU provider lacks fp16/bf16 kernels for common ops (Gemm,
MatMul; bf16 Mul), so the fallback runs reduced-precision partitions and bf16
graphs in fp32, keeping the arguments' dtypes at the graph's edges: it shows
what the program computes, not the engine's rounding. TensorRT runs the
reduced-precision model as built.

The named-data weights go to fp32 one of two ways (`cast_where_used`):
- upcast once: an fp32 copy made when the session is built (named_weights.py),
  the fastest per call, at twice a bf16 model's weight memory;
- cast where used: the weight stays the named data's own reduced bytes, a
  graph input fed on every run (so onnxruntime neither constant-folds the
  Cast into an fp32 copy nor re-lays the weight out, and never copies it, not
  even while the session is created), and a Cast before its first use makes
  the fp32 values on every call, freed after their last use. Per call it costs the casts; in memory,
  the weights once plus the largest casts alive together. For models whose
  fp32 copy would not fit (an 8B bf16 LLM's is 32 GB).
"""
from __future__ import annotations

import math
import os
from typing import Iterable

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ...errors import ArgumentError

_REDUCED = {TensorProto.FLOAT16, TensorProto.BFLOAT16}
REDUCED_WEIGHT_DTYPES = frozenset({"float16", "bfloat16"})  # blob dtype names
UPCAST_ENV = "EXECUTORCH_TENSORRT_ORT_UPCAST"
#: With UPCAST_ENV unset, a partition's fp16/bf16 named-data weights are upcast
#: once when their fp32 copy is at most this, and cast where used above it.
UPCAST_COPY_LIMIT = 1 << 30
#: Under cast-where-used, a MatMul weight whose fp32 cast would pass this is
#: cast and multiplied in column blocks of at most this many fp32 bytes (an
#: 8B-shaped LLM head: 2.1 GB in fp32, so 17 blocks).
CAST_BLOCK_BYTES = 128 << 20


def cast_where_used(weights: Iterable) -> frozenset[str]:
    """The names of the fp16/bf16 weights (runtime WeightBuffers) that the
    fallback casts where used instead of copying them upcast (module
    docstring): all of them when their fp32 copy would exceed
    UPCAST_COPY_LIMIT, or as UPCAST_ENV says ("copy" / "where-used")."""
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


def _cast_where_used(graph: onnx.GraphProto, names: frozenset[str]) -> None:
    """Each weight in `names` becomes a graph input (its initializer goes),
    read through a Cast to fp32 placed before its first use; a table only
    gathered from (a token embedding) is gathered in its own dtype and the
    rows cast, so no fp32 copy of the whole table is made."""
    weights = [(t.name, t.data_type, list(t.dims)) for t in graph.initializer if t.name in names]
    kept = [t for t in graph.initializer if t.name not in names]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    first_use: dict[str, int] = {}
    users: dict[str, list[int]] = {}
    for i, node in enumerate(graph.node):
        for name in node.input:
            first_use.setdefault(name, i)
            users.setdefault(name, []).append(i)
    before: dict[int, list[onnx.NodeProto]] = {}  # node index -> casts placed before it
    after: dict[int, list[onnx.NodeProto]] = {}   # node index -> casts placed after it
    replaced: dict[int, list[onnx.NodeProto]] = {}  # node index -> the nodes instead
    for name, data_type, dims in weights:
        graph.input.append(onnx.helper.make_tensor_value_info(name, data_type, dims))
        uses = users.get(name, [])
        if uses and all(graph.node[i].op_type == "Gather" and graph.node[i].input[0] == name
                        and list(graph.node[i].input).count(name) == 1 for i in uses):
            for i in uses:
                node = graph.node[i]
                rows = node.output[0] + "__" + name + "_rows"
                after.setdefault(i, []).append(onnx.helper.make_node(
                    "Cast", [rows], [node.output[0]], to=TensorProto.FLOAT))
                node.output[0] = rows
            continue
        if uses and len(dims) == 2 and math.prod(dims) * 4 > CAST_BLOCK_BYTES and all(
                graph.node[i].op_type == "MatMul" and graph.node[i].input[0] != name and
                list(graph.node[i].input) == [
                    graph.node[i].input[0], name] for i in uses):
            for i in uses:
                replaced[i] = _matmul_in_column_blocks(graph, graph.node[i], name, dims)
            continue
        inner = name + "__fp32"
        _rename_uses(graph, name, inner)
        cast = onnx.helper.make_node("Cast", [name], [inner], to=TensorProto.FLOAT)
        before.setdefault(first_use.get(name, len(graph.node)), []).append(cast)
    nodes = []
    for i, node in enumerate(list(graph.node) + [None]):
        nodes.extend(before.get(i, ()))
        if node is not None:
            nodes.extend(replaced.get(i, [node]))
            nodes.extend(after.get(i, ()))
    del graph.node[:]
    graph.node.extend(nodes)


def _matmul_in_column_blocks(graph: onnx.GraphProto, node: onnx.NodeProto, name: str,
                             dims: list[int]) -> list[onnx.NodeProto]:
    """`node` = MatMul(a, name) as Slice -> Cast -> MatMul per block of the
    weight's columns, then Concat on the last axis: only one block's casts
    are alive at a time (onnxruntime's arena is off for these sessions)."""
    rows, cols = dims
    step = max(1, CAST_BLOCK_BYTES // (4 * max(rows, 1)))
    out = node.output[0]
    axes = f"{out}__{name}_axes"
    graph.initializer.append(numpy_helper.from_array(np.array([1], np.int64), axes))
    nodes, parts = [], []
    for j, start in enumerate(range(0, cols, step)):
        block = f"{out}__{name}_block{j}"
        bounds = [numpy_helper.from_array(np.array([v], np.int64), f"{block}_{what}")
                  for what, v in (("start", start), ("end", min(start + step, cols)))]
        graph.initializer.extend(bounds)
        nodes += [onnx.helper.make_node("Slice", [name, bounds[0].name, bounds[1].name, axes],
                                        [block]),
                  onnx.helper.make_node("Cast", [block], [block + "_fp32"], to=TensorProto.FLOAT),
                  onnx.helper.make_node("MatMul", [node.input[0], block + "_fp32"],
                                        [block + "_out"])]
        parts.append(block + "_out")
    nodes.append(onnx.helper.make_node("Concat", parts, [out], axis=-1))
    return nodes


def _upcast_tensor(t: TensorProto, keep: frozenset[str] = frozenset()) -> None:
    if t.name in keep:
        return  # cast where used (_cast_where_used)
    if t.data_type in _REDUCED and t.data_location == TensorProto.EXTERNAL:
        # A named-data weight (onnx_safety.py admitted only those): its bytes
        # are upcast where they are fed (ort_named_weights.py), never loaded here.
        t.data_type = TensorProto.FLOAT
        return
    if t.data_type in _REDUCED:
        array = numpy_helper.to_array(t).astype(np.float32)
        t.CopyFrom(numpy_helper.from_array(array, t.name))


def _upcast_graph(graph: onnx.GraphProto, keep: frozenset[str] = frozenset()) -> None:
    for t in graph.initializer:
        _upcast_tensor(t, keep)
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        if v.type.tensor_type.elem_type in _REDUCED:
            v.type.tensor_type.elem_type = TensorProto.FLOAT
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                _upcast_tensor(attr.t)
            elif attr.type == onnx.AttributeProto.GRAPH:
                _upcast_graph(attr.g)
            elif node.op_type == "Cast" and attr.name == "to" and attr.i in _REDUCED:
                attr.i = TensorProto.FLOAT


def is_reduced_precision(model: onnx.ModelProto) -> bool:
    return any(t.data_type in _REDUCED for t in model.graph.initializer) or any(
        a.name == "to" and a.i in _REDUCED for n in model.graph.node
        if n.op_type == "Cast" for a in n.attribute)


def has_bfloat16(model_bytes: bytes) -> bool:
    """Whether a bf16 tensor appears anywhere: onnxruntime's CPU provider has
    no bf16 Mul/MatMul, so such a graph computes in fp32 on the fallback."""
    model = onnx.load_model_from_string(model_bytes)
    values = list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info)
    return any(t.data_type == TensorProto.BFLOAT16 for t in model.graph.initializer) or any(
        v.type.tensor_type.elem_type == TensorProto.BFLOAT16 for v in values) or any(
        a.name == "to" and a.i == TensorProto.BFLOAT16 for n in model.graph.node
        if n.op_type == "Cast" for a in n.attribute)


def _rename_uses(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]


def _keep_io_types(graph: onnx.GraphProto, inputs: list[int | None],
                   outputs: list[int | None]) -> None:
    """The first graph inputs/outputs take the element types the caller passes
    (`None`: as upcast): a Cast to fp32 after each such input, from fp32
    before each such output, so only the compute is fp32."""
    initializers = {t.name for t in graph.initializer}
    fed = [v for v in graph.input if v.name not in initializers]
    casts = []
    for v, want in zip(fed, inputs):
        if want is None or want == v.type.tensor_type.elem_type:
            continue
        inner = v.name + "__fp32"
        _rename_uses(graph, v.name, inner)
        casts.append(onnx.helper.make_node("Cast", [v.name], [inner], to=v.type.tensor_type.elem_type))
        v.type.tensor_type.elem_type = want
    tail = []
    for v, want in zip(graph.output, outputs):
        if want is None or want == v.type.tensor_type.elem_type:
            continue
        inner = v.name + "__fp32"
        for node in graph.node:
            node.output[:] = [inner if name == v.name else name for name in node.output]
        _rename_uses(graph, v.name, inner)
        tail.append(onnx.helper.make_node("Cast", [inner], [v.name], to=want))
        v.type.tensor_type.elem_type = want
    nodes = casts + list(graph.node) + tail
    del graph.node[:]
    graph.node.extend(nodes)


def upcast_to_fp32(model_bytes: bytes, inputs: list[int | None] | None = None,
                   outputs: list[int | None] | None = None,
                   where_used: frozenset[str] = frozenset()) -> bytes:
    """The model computing in fp32. `inputs`/`outputs`: element types the first
    graph inputs/outputs keep (what ExecuTorch passes there, e.g. bf16 logits);
    the rest (the delegate's own state among them) become fp32. `where_used`:
    the named-data weights cast where used (cast_where_used), appended after
    the graph's own inputs."""
    model = onnx.load_model_from_string(model_bytes)
    _upcast_graph(model.graph, where_used)
    if inputs or outputs:
        _keep_io_types(model.graph, inputs or [], outputs or [])
    if where_used:
        _cast_where_used(model.graph, where_used)
    return model.SerializeToString()
