"""The named-data fields ("engine", "weights_location", "weights"): the
executors pass each weight's nbytes to onnxruntime and TensorRT as the extent
of memory to read, so read_blob refuses any entry whose size, dtype and shape
disagree, and an empty engine region unless the metadata says "none"."""

from __future__ import annotations

import pytest
from blob_cases import BlobError, binding, blob

BINDINGS = {"io_bindings": [binding("x", shape=[2, 4]), binding("y", shape=[2, 3], is_input=False)]}
W = {"name": "fc.weight", "key": "etrt.ab12", "dtype": "float32", "shape": [3, 4], "nbytes": 48}
GOOD = {**BINDINGS, "weights_location": "named_data", "weights": [W]}
ONNX = b"weightless-onnx" * 4


def named(*weights, **fields) -> dict:
    return {**BINDINGS, "weights_location": "named_data", "weights": list(weights), **fields}


BAD = [
    ("location_unknown", {**BINDINGS, "weights_location": "disk"}, ["'weights_location'"]),
    ("weights_without_location", {**BINDINGS, "weights": [W]}, ["'weights'", "inconsistent"]),
    ("weights_not_array", {**BINDINGS, "weights_location": "named_data", "weights": {}},
     ["'weights'", "not an array"]),
    ("weights_missing", {**BINDINGS, "weights_location": "named_data"}, ["'weights'"]),
    ("entry_extra_key", named({**W, "path": "/etc/passwd"}), ["weights[0]", "exactly"]),
    ("entry_missing_key", named({k: v for k, v in W.items() if k != "nbytes"}), ["weights[0]"]),
    ("name_empty", named({**W, "name": ""}), ["weights[0].name"]),
    ("name_control", named({**W, "name": "a\nb"}), ["weights[0].name"]),
    ("name_twice", named(W, {**W, "key": "other"}), ["duplicate weight name", "weights[1]"]),
    ("key_space", named({**W, "key": "a b"}), ["weights[0].key"]),
    ("key_empty", named({**W, "key": ""}), ["weights[0].key"]),
    ("key_too_long", named({**W, "key": "k" * 257}), ["weights[0].key", "256"]),
    ("key_not_string", named({**W, "key": 5}), ["weights[0].key"]),
    ("dtype_unknown", named({**W, "dtype": "float64"}), ["weights[0].dtype"]),
    ("dtype_unrecorded", named({**W, "dtype": ""}), ["weights[0].dtype"]),
    ("shape_negative", named({**W, "shape": [-1, 4]}), ["weights[0].shape"]),
    ("shape_float", named({**W, "shape": [3.0, 4]}), ["weights[0].shape"]),
    ("nbytes_too_big", named({**W, "nbytes": 4096}), ["weights[0].nbytes", "corrupt"]),
    ("nbytes_too_small", named({**W, "nbytes": 47}), ["weights[0].nbytes"]),
    ("nbytes_bool", named({**W, "shape": [1], "nbytes": True, "dtype": "uint8"}),
     ["weights[0].nbytes"]),
    ("nbytes_overflow", named({**W, "shape": [2**62, 2**62], "nbytes": 2**63 - 1}),
     ["weights[0].nbytes"]),
    ("engine_kind_unknown", {**GOOD, "engine": "lean"}, ["'engine'"]),
    ("stripped_inline", {**BINDINGS, "engine": "stripped"}, ["stripped", "named data"]),
    ("activation_empty", {**GOOD, "activation_bytes": []}, ["'activation_bytes'"]),
    ("activation_negative", {**GOOD, "activation_bytes": [-1]}, ["'activation_bytes'"]),
    ("activation_float", {**GOOD, "activation_bytes": [1.5]}, ["'activation_bytes'"]),
    ("activation_not_array", {**GOOD, "activation_bytes": 8}, ["'activation_bytes'"]),
]


@pytest.mark.parametrize("meta,words", [pytest.param(m, w, id=i) for i, m, w in BAD])
def test_refused_on_write_and_read(meta, words):
    with pytest.raises(BlobError) as info:
        blob.write_blob(b"E", meta, ONNX)
    for w in words:
        assert w in str(info.value), (w, str(info.value))
    # The reader refuses the same metadata written around the writer's checks.
    from blob_cases import meta_blob
    with pytest.raises(BlobError):
        blob.read_blob(meta_blob(meta))


def test_round_trip_and_accessors():
    weights = [W, {**W, "name": "fc.bias", "key": "etrt.cd34", "shape": [3], "nbytes": 12},
               {**W, "name": "scalar", "dtype": "bfloat16", "shape": [], "nbytes": 2}]
    for meta in (named(*weights), named(*weights, engine="stripped"), named()):
        b = blob.read_blob(blob.write_blob(b"E", meta, ONNX))
        assert b.metadata == meta and b.weights == meta["weights"]
    assert blob.read_blob(blob.write_blob(b"E", BINDINGS)).engine_kind == "full"
    assert blob.read_blob(blob.write_blob(b"E", BINDINGS)).weights == []


def test_engine_none_blob():
    b = blob.read_blob(blob.write_blob(b"", {**GOOD, "engine": "none"}, ONNX))
    assert b.engine == b"" and b.engine_size == 0 and b.engine_kind == "none"
    assert b.onnx == ONNX


@pytest.mark.parametrize("engine,meta,onnx,words", [
    (b"", GOOD, ONNX, ["engine is empty", '"none"']),
    (b"E", {**GOOD, "engine": "none"}, ONNX, ['"none"', "holds 1 bytes"]),
    (b"", {**GOOD, "engine": "none"}, None, ["no 'onnx' section"]),
])
def test_engine_none_must_agree(engine, meta, onnx, words):
    with pytest.raises(BlobError) as info:
        blob.write_blob(engine, meta, onnx)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_activation_bytes_round_trip():
    """The builder's activation memory per profile, recorded at export."""
    meta = {**GOOD, "activation_bytes": [8206848, 4096]}
    b = blob.read_blob(blob.write_blob(b"E", meta, ONNX))
    assert b.metadata == meta and b.meta.build.activation_bytes == (8206848, 4096)
    assert blob.read_blob(blob.write_blob(b"E", GOOD, ONNX)).meta.build.activation_bytes is None
