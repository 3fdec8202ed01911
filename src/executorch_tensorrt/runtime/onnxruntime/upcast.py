"""fp16/bf16 ONNX -> fp32, for the onnxruntime fallback only.

onnxruntime's CPU provider lacks fp16/bf16 kernels for common ops (Gemm,
MatMul; bf16 Mul), so the fallback runs reduced-precision partitions and bf16
graphs in fp32, keeping the arguments' dtypes at the graph's edges: it shows
what the program computes, not the engine's rounding. TensorRT runs the
reduced-precision model as built.

The named-data weights go to fp32 one of two ways (where_used.cast_where_used
chooses):
- upcast once: an fp32 copy made when the session is built (named_weights.py),
  the fastest per call, at twice a bf16 model's weight memory;
- cast where used (where_used.py): the weight stays the named data's own
  reduced bytes and is cast on every call, just before its use; per call it
  costs the casts, in memory the weights once plus one use's casts. For
  models whose fp32 copy would not fit (an 8B bf16 LLM's is 32 GB).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from .where_used import rewrite_graph

_REDUCED = {TensorProto.FLOAT16, TensorProto.BFLOAT16}


def _upcast_tensor(t: TensorProto, keep: frozenset[str] = frozenset()) -> None:
    if t.name in keep:
        return  # cast where used (where_used.py)
    if t.data_type in _REDUCED and t.data_location == TensorProto.EXTERNAL:
        # A named-data weight (onnx_safety.py admitted only those): its bytes
        # are upcast where they are fed (named_weights.py), never loaded here.
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
        rewrite_graph(model.graph, where_used)
    return model.SerializeToString()
