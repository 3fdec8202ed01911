"""The typed metadata (blob/metadata.py): parsed once, written back byte for byte.

Round trip over every blob the suite's helpers build (the reader's valid
cases, the upstream-style blobs, the identity and named-data blobs, and one
that sets every typed field): to_json(from_json(x)) == x with the same key
order, and write_blob of the parsed object gives the same bytes. A bad field
in each dataclass raises the reader's BlobError with its message, and the two
optional fields for another part (index_range, equal_dims) are checked,
absent by default and never written when absent.
"""
from __future__ import annotations

import json
import struct

import pytest

from blob_cases import GOOD, GOOD_META, VALID, BlobError, binding
from upstream_blobs import executorch_style_blob, torch_tensorrt_style_blob

from executorch_tensorrt.blob import read_blob, write_blob
from executorch_tensorrt.blob.metadata import BlobMetadata
from executorch_tensorrt.blob.reader import _parse_int  # the reader's own JSON number rule

RICH = {
    "io_bindings": [binding("x", shape=[-1, 3], index_range=[0, 10], dtype="int64"),
                    binding("pos", "int64", [4]),
                    binding("y", shape=[-1, 3], is_input=False),
                    binding("cache_out", shape=[1, 4, 2], is_input=False),
                    binding("cache_in", shape=[1, 4, 2])],
    "aliased_io": [{"output": "cache_out", "input": "cache_in", "kind": "user"}],
    "hardware_compatible": False, "device_id": 0,
    "profiles": [{"name": "x", "min": [1, 3], "opt": [2, 3], "max": [4, 3]}],
    "optimization_profiles": [[{"name": "x", "min": [1, 3], "opt": [2, 3], "max": [4, 3]}],
                              [{"name": "x", "min": [5, 3], "opt": [6, 3], "max": [8, 3]}]],
    "trt_flavor": "tensorrt_rtx", "trt_version": "1.7.1.116", "compute_capabilities": ["SM89"],
    "build_seconds": 0.231, "precision": "fp16", "onnx_opset": 18,
    "state": [{"fqn": "k", "onnx_input": "s_in", "onnx_output": "s_out", "dtype": "float32",
               "shape": [1, 4, 2], "init": "zeros", "update": "in_place",
               "positions": {"input": "pos", "axis": 1}}],
    "onnx_node_sources": [{"node": "n0", "edge_nodes": ["a", "b"]}],
    "engine": "full", "weights_location": "named_data",
    "weights": [{"name": "W", "key": "etrt.w", "dtype": "float32", "shape": [2, 2], "nbytes": 16}],
    "equal_dims": [[[0, 0], [1, 0]]],
    "serialized_metadata": "gAR9lC4=",
}


def _metadata_json(data: bytes) -> dict:
    _, off, size, *_ = struct.unpack_from("<4sIIIQ8s", data, 0)
    obj = json.loads(data[off:off + size].decode(), parse_int=_parse_int)
    obj.pop("engine_sha256", None)
    obj.pop("sections", None)
    return obj


def _blobs() -> list[tuple[str, bytes]]:
    import helpers
    import named_data_programs as nd

    w, b = nd.weights()
    made = [("rich", write_blob(b"\x01" * 32, RICH)),
            ("executorch_style", executorch_style_blob(
                [{"name": "x", "dtype": "float32", "shape": [1], "is_input": True,
                  "is_shape_tensor": False}])),
            ("torch_tensorrt_style", torch_tensorrt_style_blob()),
            ("identity", helpers.identity_blob()),
            ("named_data", nd.named_blob(w, b))]
    return list(VALID) + made


@pytest.mark.parametrize("name,data", _blobs(), ids=[n for n, _ in _blobs()])
def test_round_trip_is_exact(name, data):
    parsed = read_blob(data)
    raw = _metadata_json(data)
    # same keys, same order, same values
    assert json.dumps(parsed.meta.to_json()) == json.dumps(raw)
    again = BlobMetadata.from_json(parsed.meta.to_json())
    assert again == parsed.meta
    if parsed.has_digests:  # written here: writing the typed object gives the same bytes
        others = [(s.name, s.data) for s in parsed.sections if s.name != "onnx"]
        assert write_blob(parsed.engine, parsed.meta, onnx=parsed.onnx,
                          sections=others or None) == data


def test_typed_fields_and_defaults():
    meta = read_blob(write_blob(b"\x01" * 32, RICH)).meta
    assert meta.io_bindings[0].index_range == (0, 10) and meta.io_bindings[1].index_range is None
    assert meta.equal_dims == (((0, 0), (1, 0)),)
    assert [len(p) for p in meta.engine_profiles] == [1, 1]
    assert meta.engine_profiles[1][0].max == (8, 3)
    assert meta.state[0].positions.axis == 1 and meta.state[0].in_place
    assert meta.state[0].nbytes == 32 and meta.build.compute_capabilities == ("SM89",)
    assert meta.build.build_seconds == 0.231 and read_blob(GOOD).meta.build.build_seconds is None
    assert meta.aliased_io[0].alias_kind == "user" and meta.weights[0].nbytes == 16
    assert dict(meta.extra) == {"onnx_opset": 18, "serialized_metadata": "gAR9lC4="}
    plain = read_blob(GOOD).meta
    assert (plain.engine_kind, plain.engine_profiles, plain.build.precision_or_default,
            plain.equal_dims, plain.io_bindings[0].index_range) == ("full", (), "fp32", None, None)
    assert "index_range" not in plain.to_json()["io_bindings"][0]
    assert "equal_dims" not in plain.to_json()


def test_built_in_python_writes_like_the_dict():
    """A BlobMetadata made with the constructors (as the AOT side does) writes
    the same bytes as its JSON form, and is checked like it."""
    from executorch_tensorrt.blob.metadata import Binding

    meta = BlobMetadata((Binding("x", "float32", (1, 3), True),
                         Binding("y", "float32", (1, 3), False)), device_id=0)
    assert write_blob(b"\x01" * 16, meta) == write_blob(
        b"\x01" * 16, {**GOOD_META, "device_id": 0})
    bad = BlobMetadata((Binding("x", "int32", (1, 3), True, index_range=(3, 3)),))
    with pytest.raises(BlobError, match=r"io_bindings\[0\]\.index_range must be"):
        write_blob(b"\x01" * 16, bad)


def _with(**changes) -> dict:
    meta = json.loads(json.dumps(RICH))
    for path, value in changes.items():
        *parents, last = path.split("__")
        target = meta
        for p in parents:
            target = target[int(p)] if p.isdigit() else target[p]
        target[int(last) if last.isdigit() else last] = value
    return meta


# One bad field per dataclass, with the message the schema has always given.
BAD = [
    ("Binding", _with(io_bindings__0__shape=[-2]), r"io_bindings\[0\]\.shape must be an array "
     r"of integers >= -1"),
    ("Binding.is_input", _with(io_bindings__1__is_input=1), r"io_bindings\[1\]\.is_input must be"),
    ("AliasedIO", _with(aliased_io__0__kind="other"), r"aliased_io\[0\]\.kind must be one of"),
    ("Profile", _with(profiles__0__opt=[9, 3]), r"profiles\[0\] \(input 'x'\) dimension 0: min "
     r"1, opt 9, max 4 are not ordered"),
    ("optimization_profiles", _with(optimization_profiles__1__0__min=[6, 3]),
     r"optimization_profiles leave input 'x' dimension 0 sizes 5\.\.5 in no profile"),
    ("BuildFacts", _with(precision="fp64"), r"'precision' must be one of"),
    ("BuildFacts.cc", _with(compute_capabilities=["89"]), r"'compute_capabilities' must be"),
    ("BuildFacts.build_seconds", _with(build_seconds=-1), r"'build_seconds' must be a number"),
    ("BuildFacts.build_seconds_bool", _with(build_seconds=True),
     r"'build_seconds' must be a number"),
    ("StateEntry", _with(state__0__init="ones"), r"state\[0\]\.init must be \"zeros\" or"),
    ("StatePositions", _with(state__0__positions__axis=0), r"state\[0\]\.positions\.axis must be"),
    ("NodeSource", _with(onnx_node_sources__0__node=""), r"onnx_node_sources\[0\]\.node must be"),
    ("WeightEntry", _with(weights__0__nbytes=15), r"weights\[0\]\.nbytes 15 is not the size"),
    ("device_id", _with(device_id=2**31), r"'device_id' must be a 32-bit integer"),
    ("index_range.order", _with(io_bindings__0__index_range=[5, 5]),
     r"io_bindings\[0\]\.index_range must be \[lo, hi\]"),
    ("index_range.float_input", _with(io_bindings__0__dtype="float32"),
     r"index_range is set on a 'float32' input"),
    ("index_range.output", _with(io_bindings__2__index_range=[0, 1]),
     r"io_bindings\[2\]\.index_range is set on an output"),
    ("equal_dims.size", _with(equal_dims=[[[0, 0]]]), r"equal_dims\[0\] must be an array of at "
     r"least 2"),
    ("equal_dims.index", _with(equal_dims=[[[0, 0], [9, 0]]]), r"equal_dims\[0\]\[1\] names "
     r"input 9, the partition has 3 inputs"),
    ("equal_dims.dim", _with(equal_dims=[[[0, 0], [1, 1]]]), r"names dimension 1 of input 1 "
     r"\('pos'\), which has rank 1"),
    ("equal_dims.static", _with(equal_dims=[[[0, 1], [1, 0]]]), r"groups static dimensions of "
     r"different sizes \[3, 4\]"),
]


@pytest.mark.parametrize("what,meta,message", BAD, ids=[b[0] for b in BAD])
def test_bad_field_same_error_everywhere(what, meta, message):
    """from_json, write_blob and read_blob (of a blob written before the
    check) all refuse it with one message."""
    with pytest.raises(BlobError, match=message) as direct:
        BlobMetadata.from_json(meta)
    with pytest.raises(BlobError) as written:
        write_blob(b"\x01" * 32, meta)
    assert str(written.value) == str(direct.value)
    from blob_cases import meta_blob
    with pytest.raises(BlobError) as read:
        read_blob(meta_blob(meta, region=4096))
    assert str(read.value) == str(direct.value)
