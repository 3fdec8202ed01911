"""An embedded ONNX model must not name a file: its tensors are inside it, or
in the program's named data through the one sentinel the blob vouches for.

ONNX tensors can keep their bytes outside the model (`data_location =
EXTERNAL`, `external_data` with a `location` path). onnx's helpers,
onnxruntime and TensorRT's parser resolve such paths relative to the process's
working directory when the model comes from bytes, so a crafted program could
read any file the process can (e.g. `./secret.txt` into an output). Every
consumer of a blob's ONNX (onnxruntime, the fp32 upcast, the engine rebuild)
takes it through `self_contained_onnx`, which refuses such a model before any
of them sees it.

The one exception: a top-level graph initializer listed in the blob's
"weights" whose external data is exactly `location = "etrt-named-data"`
(blob.format.NAMED_DATA_LOCATION: a sentinel, never a file; no offset, no
length, no other key), with the dtype and shape its "weights" entry records.
Its bytes come from the program's named data (named_data.py), which the
executors hand to onnxruntime and TensorRT by pointer, so nothing resolves
the location. Anything else external is refused, listed or not.
"""
from __future__ import annotations

from typing import Sequence

import onnx
from google.protobuf.message import DecodeError

from ..blob import Blob
from ..dtypes import DTYPES
from ..blob.format import NAMED_DATA_LOCATION, PACKED_WEIGHT_DTYPES
from ..blob.metadata import WeightEntry
from ..errors import InvalidProgramError
from .quantized_weights import check_quantized_weights

__all__ = ["ONNX_DTYPES", "self_contained_onnx", "check_self_contained"]

#: blob dtype name -> ONNX TensorProto data type (dtypes.py's rows, and the
#: packed weight dtypes of blob/format.py)
ONNX_DTYPES = {**{d.blob_name: d.onnx for d in DTYPES if d.blob_name and d.onnx is not None},
               **PACKED_WEIGHT_DTYPES}
_INLINE_FIELDS = ("raw_data", "float_data", "int32_data", "string_data", "int64_data",
                  "double_data", "uint64_data")


def _tensors(graph: onnx.GraphProto, where: str, top: bool = False):
    """(tensor, where, is a top-level initializer) for every tensor the graph
    and its subgraphs hold."""
    for t in graph.initializer:
        yield t, f"{where} initializer {t.name!r}", top
    for s in graph.sparse_initializer:
        yield s.values, f"{where} sparse initializer {s.values.name!r} (values)", False
        yield s.indices, f"{where} sparse initializer {s.values.name!r} (indices)", False
    for node in graph.node:
        at = f"{where} node {node.name or node.op_type!r}"
        for attr in node.attribute:
            label = f"{at} attribute {attr.name!r}"
            if attr.HasField("t"):
                yield attr.t, label, False
            if attr.HasField("sparse_tensor"):
                yield attr.sparse_tensor.values, label, False
                yield attr.sparse_tensor.indices, label, False
            for t in attr.tensors:
                yield t, label, False
            for s in attr.sparse_tensors:
                yield s.values, label, False
                yield s.indices, label, False
            if attr.HasField("g"):
                yield from _tensors(attr.g, f"{label} subgraph")
            for i, g in enumerate(attr.graphs):
                yield from _tensors(g, f"{label} subgraph {i}")


def _external_refusal(label: str, tensor: onnx.TensorProto, why: str) -> InvalidProgramError:
    location = next((e.value for e in tensor.external_data if e.key == "location"), None)
    return InvalidProgramError(
        f"the partition's embedded ONNX model keeps the data of {label} outside the model "
        f"(external data, location {location!r}){why}; a blob must carry every tensor inside "
        f"it or in the program's named data (location {NAMED_DATA_LOCATION!r}, listed in its "
        "\"weights\"), so it is refused. Re-export the program with executorch-tensorrt")


def _type_name(data_type: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(data_type)
    except ValueError:
        return f"data type {data_type}"


def _check_named_weight(tensor: onnx.TensorProto, label: str, entry: WeightEntry) -> None:
    """A listed weight: the sentinel and nothing else, with the recorded type."""
    entries = [(e.key, e.value) for e in tensor.external_data]
    if tensor.data_location != onnx.TensorProto.EXTERNAL or entries != [
            ("location", NAMED_DATA_LOCATION)]:
        raise _external_refusal(label, tensor, f", with external data {entries} where only "
                                f"[('location', {NAMED_DATA_LOCATION!r})] is accepted")
    inline = [f for f in _INLINE_FIELDS if getattr(tensor, f)]
    if inline:
        raise InvalidProgramError(f"{label} is a named-data weight but also carries data "
                                  f"inline ({', '.join(inline)}); the blob is corrupt")
    dtype = ONNX_DTYPES.get(entry.dtype)
    if tensor.data_type != dtype or list(tensor.dims) != list(entry.shape):
        raise InvalidProgramError(
            f"{label} is {_type_name(tensor.data_type)} {list(tensor.dims)} in the ONNX model, but the blob's \"weights\" entry says "
            f"{entry.dtype} {list(entry.shape)}; the blob is corrupt (re-export it)")


def check_self_contained(model: onnx.ModelProto, weights: Sequence[WeightEntry] = ()) -> None:
    """Raises InvalidProgramError if any tensor of the model (graph, subgraphs,
    functions) keeps its data outside the model, except the named-data
    weights listed in `weights` (blob "weights" entries), each of which must
    be a top-level initializer referencing exactly the sentinel location."""
    listed = {w.name: w for w in weights}
    found: set[str] = set()
    graphs = [(model.graph, "graph", True)]
    for f in model.functions:
        for node in f.node:  # functions hold nodes, not initializers
            wrapper = onnx.GraphProto(node=[node])
            graphs.append((wrapper, f"function {f.name!r}", False))
    for graph, where, top in graphs:
        for tensor, label, top_initializer in _tensors(graph, where, top):
            external = tensor.data_location == onnx.TensorProto.EXTERNAL or len(
                tensor.external_data)
            if top_initializer and tensor.name in listed:
                if tensor.name in found:
                    raise InvalidProgramError(f"{label} appears twice in the ONNX model")
                found.add(tensor.name)
                _check_named_weight(tensor, label, listed[tensor.name])
            elif external:
                sentinel = any(e.key == "location" and e.value == NAMED_DATA_LOCATION
                               for e in tensor.external_data)
                raise _external_refusal(label, tensor, (
                    " that the blob's \"weights\" does not list" if sentinel else ""))
    missing = [name for name in listed if name not in found]
    if missing:
        raise InvalidProgramError(
            f"the blob's \"weights\" lists {missing[:5]}{' ...' if len(missing) > 5 else ''}, "
            "which are not initializers of its ONNX model; the blob is corrupt (re-export it)")


def self_contained_onnx(blob: Blob) -> bytes:
    """The blob's ONNX bytes after check_self_contained (with the blob's
    named-data weights allowed); raises InvalidProgramError when there are
    none, they do not parse, or they reference external data."""
    if blob.onnx is None:
        raise InvalidProgramError("this blob carries no ONNX model (it was written by a tool "
                                  "that embeds only the engine)")
    try:
        model = onnx.load_model_from_string(blob.onnx)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise InvalidProgramError(f"the blob's embedded ONNX model does not parse: {e}") from None
    check_self_contained(model, blob.meta.weights or ())
    check_quantized_weights(model, blob.meta.weights or ())  # scales and blocks of int8/int4 weights
    return blob.onnx
