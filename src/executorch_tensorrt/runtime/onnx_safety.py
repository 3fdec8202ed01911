"""An embedded ONNX model must be self-contained: nothing in it may name a file.

ONNX tensors can keep their bytes outside the model (`data_location =
EXTERNAL`, `external_data` with a `location` path). onnx's helpers,
onnxruntime and TensorRT's parser resolve such paths relative to the process's
working directory when the model comes from bytes, so a crafted program could
read any file the process can (e.g. `./secret.txt` into an output). Every
consumer of a blob's ONNX (onnxruntime, the fp32 upcast, the engine rebuild)
takes it through `self_contained_onnx`, which refuses such a model before any
of them sees it.
"""
from __future__ import annotations

import onnx
from google.protobuf.message import DecodeError

from ..blob import Blob
from ..errors import InvalidProgramError

__all__ = ["self_contained_onnx", "check_self_contained"]


def _tensors(graph: onnx.GraphProto, where: str):
    """(tensor, where) for every tensor the graph and its subgraphs hold."""
    for t in graph.initializer:
        yield t, f"{where} initializer {t.name!r}"
    for s in graph.sparse_initializer:
        yield s.values, f"{where} sparse initializer {s.values.name!r} (values)"
        yield s.indices, f"{where} sparse initializer {s.values.name!r} (indices)"
    for node in graph.node:
        at = f"{where} node {node.name or node.op_type!r}"
        for attr in node.attribute:
            label = f"{at} attribute {attr.name!r}"
            if attr.HasField("t"):
                yield attr.t, label
            if attr.HasField("sparse_tensor"):
                yield attr.sparse_tensor.values, label
                yield attr.sparse_tensor.indices, label
            for t in attr.tensors:
                yield t, label
            for s in attr.sparse_tensors:
                yield s.values, label
                yield s.indices, label
            if attr.HasField("g"):
                yield from _tensors(attr.g, f"{label} subgraph")
            for i, g in enumerate(attr.graphs):
                yield from _tensors(g, f"{label} subgraph {i}")


def check_self_contained(model: onnx.ModelProto) -> None:
    """Raises InvalidProgramError if any tensor of the model (graph, subgraphs,
    functions) keeps its data outside the model."""
    graphs = [(model.graph, "graph")]
    for f in model.functions:
        for node in f.node:  # functions hold nodes, not initializers
            wrapper = onnx.GraphProto(node=[node])
            graphs.append((wrapper, f"function {f.name!r}"))
    for graph, where in graphs:
        for tensor, label in _tensors(graph, where):
            if tensor.data_location == onnx.TensorProto.EXTERNAL or len(tensor.external_data):
                location = next((e.value for e in tensor.external_data if e.key == "location"),
                                None)
                raise InvalidProgramError(
                    f"the partition's embedded ONNX model keeps the data of {label} outside "
                    f"the model (external data, location {location!r}); a blob must carry "
                    "every tensor inside it, so it is refused. Re-export the program with "
                    "executorch-tensorrt, which embeds all weights")


def self_contained_onnx(blob: Blob) -> bytes:
    """The blob's ONNX bytes after check_self_contained; raises InvalidProgramError
    when there are none, they do not parse, or they reference external data."""
    if blob.onnx is None:
        raise InvalidProgramError("this blob carries no ONNX model (it was written by a tool "
                                  "that embeds only the engine)")
    try:
        model = onnx.load_model_from_string(blob.onnx)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise InvalidProgramError(f"the blob's embedded ONNX model does not parse: {e}") from None
    check_self_contained(model)
    return blob.onnx
