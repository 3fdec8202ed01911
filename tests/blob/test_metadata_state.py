"""The "state" entries (delegate-owned KV caches) and Torch-TensorRT's
"aliased_io": every field checked, sizes bounded, on write and on read."""
from __future__ import annotations

import struct

import pytest
from blob_cases import BlobError, binding, blob

BINDINGS = {"io_bindings": [binding("tokens", dtype="int64", shape=[1, -1]),
                            binding("pos", dtype="int64", shape=[-1]),
                            binding("logits", shape=[1, -1, 8], is_input=False)]}
S = {"fqn": "k_cache", "onnx_input": "state_in.k", "onnx_output": "state_out.k",
     "dtype": "float32", "shape": [1, 2, 16, 4], "init": "zeros", "update": "in_place",
     "positions": {"input": "pos", "axis": 2}}
ONNX = b"onnx" * 4


def with_state(*states, **extra) -> dict:
    return {**BINDINGS, "state": list(states), **extra}


BAD = [
    ("not_array", {**BINDINGS, "state": {}}, ["'state'", "array"]),
    ("missing_key", with_state({k: v for k, v in S.items() if k != "init"}), ["state[0]", "init"]),
    ("unknown_key", with_state({**S, "path": "/x"}), ["state[0]", "unknown"]),
    ("fqn_empty", with_state({**S, "fqn": ""}), ["state[0].fqn"]),
    ("input_is_binding", with_state({**S, "onnx_input": "pos"}), ["io_binding"]),
    ("output_twice", with_state(S, {**S, "fqn": "v", "onnx_input": "state_in.v"}),
     ["state[1].onnx_output", "already used"]),
    ("dtype_unknown", with_state({**S, "dtype": "float64"}), ["state[0].dtype"]),
    ("dtype_unrecorded", with_state({**S, "dtype": ""}), ["state[0].dtype"]),
    ("shape_dynamic", with_state({**S, "shape": [1, -1, 16, 4]}), ["state[0].shape", "static"]),
    ("shape_rank_9", with_state({**S, "shape": [1] * 9, "positions": {"input": "pos", "axis": 2}}),
     ["state[0].shape"]),
    ("too_big", with_state({**S, "shape": [1 << 20, 1 << 20, 16, 4]}), ["bytes", "limit"]),
    ("init_unknown", with_state({**S, "init": "ones"}), ["state[0].init"]),
    ("init_section_missing", with_state({**S, "init": "section:state_init.0"}),
     ["state_init.0", "does not have"]),
    ("update_unknown", with_state({**S, "update": "append"}), ["state[0].update"]),
    ("positions_not_input", with_state({**S, "positions": {"input": "logits", "axis": 2}}),
     ["positions.input"]),
    ("positions_float", with_state({**S, "positions": {"input": "tokens", "axis": 2}}),
     ["1-D int64"]),
    ("positions_axis_batch", with_state({**S, "positions": {"input": "pos", "axis": 0}}),
     ["positions.axis"]),
    ("positions_axis_past_rank", with_state({**S, "positions": {"input": "pos", "axis": 4}}),
     ["positions.axis"]),
    ("positions_extra", with_state({**S, "positions": {"input": "pos", "axis": 2, "x": 1}}),
     ["positions"]),
    ("alias_unknown_output", {**BINDINGS, "aliased_io": [{"output": "z", "input": "pos"}]},
     ["aliased_io[0].output"]),
    ("alias_input_is_output", {**BINDINGS, "aliased_io": [{"output": "logits",
                                                          "input": "logits"}]},
     ["aliased_io[0].input"]),
    ("alias_kind_unknown", {**BINDINGS, "aliased_io": [{"output": "logits", "input": "tokens",
                                                       "kind": "swap"}]}, ["kind"]),
    ("alias_user_shapes", {**BINDINGS, "aliased_io": [{"output": "logits", "input": "pos",
                                                      "kind": "user"}]}, ["equal shapes"]),
]


@pytest.mark.parametrize("meta,words", [pytest.param(m, w, id=i) for i, m, w in BAD])
def test_refused_on_write_and_read(meta, words):
    with pytest.raises(BlobError) as info:
        blob.write_blob(b"E", meta, ONNX)
    for w in words:
        assert w in str(info.value), (w, str(info.value))
    from blob_cases import meta_blob
    with pytest.raises(BlobError):
        blob.read_blob(meta_blob(meta, magic=b"TR02" if meta.get("aliased_io") else b"TR01"))


def test_round_trip_with_initial_value_section():
    init = struct.pack("<128f", *range(128))
    meta = with_state({**S, "init": "section:state_init.0"}, S | {
        "fqn": "v", "onnx_input": "state_in.v", "onnx_output": "state_out.v"})
    b = blob.read_blob(blob.write_blob(b"E", meta, ONNX, sections={"state_init.0": init}))
    assert b.state == meta["state"] and b.section("state_init.0") == init
    with pytest.raises(BlobError, match="holds 12 bytes"):
        blob.write_blob(b"E", meta, ONNX, sections={"state_init.0": init[:12]})


def test_aliased_io_writes_tr02():
    meta = {"io_bindings": [binding("cache", shape=[1, 2, 8, 4]), binding("pos", "int64", [1]),
                            binding("cache_out", shape=[1, 2, 8, 4], is_input=False)],
            "aliased_io": [{"output": "cache_out", "input": "cache", "kind": "kv_cache_update"}]}
    data = blob.write_blob(b"E", meta, ONNX)
    assert data[:4] == b"TR02" and blob.read_blob(data).aliased_io == meta["aliased_io"]
    assert blob.write_blob(b"E", BINDINGS, ONNX)[:4] == b"TR01"


def test_fp8_cache_entry_is_one_buffer_rewritten_in_place():
    """An fp8 KV cache (aot/state/fp8_cache.py): dtype "float8", one byte per
    element, one buffer bound at both ends with no aliasing layer."""
    meta = with_state({**S, "dtype": "float8", "update": "rewrite_in_place"}, S | {
        "fqn": "v", "onnx_input": "state_in.v", "onnx_output": "state_out.v"})
    b = blob.read_blob(blob.write_blob(b"E", meta, ONNX))
    assert b.state == meta["state"]
    fp8, fp32 = b.meta.state
    assert fp8.nbytes == 1 * 2 * 16 * 4 and fp8.in_place and fp8.rewritten
    assert fp32.in_place and not fp32.rewritten
