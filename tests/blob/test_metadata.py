"""The metadata fields the runtime reads (profiles, precision, flavour, version,
compute capabilities) and the section digests: read_blob refuses a wrong
value with a BlobError naming the field, so the executors never see one."""

from __future__ import annotations

import hashlib
import json
import re
import struct

import pytest
from blob_cases import BlobError, binding, blob, meta_blob
from upstream_blobs import executorch_style_blob, torch_tensorrt_style_blob

DYN = {"io_bindings": [binding("x", shape=[-1, 3]), binding("w", shape=[2]),
                       binding("y", shape=[-1, 3], is_input=False)]}
PROFILE = {"name": "x", "min": [1, 3], "opt": [4, 3], "max": [8, 3]}


def with_meta(**fields) -> dict:
    return {**DYN, **fields}


# (id, metadata, words the message must contain)
BAD_FIELDS = [
    ("profiles_object", with_meta(profiles={"x": PROFILE}), ["'profiles'", "array"]),
    ("profile_not_object", with_meta(profiles=[[1, 2]]), ["profiles[0]", "object"]),
    ("profile_no_name", with_meta(profiles=[{k: v for k, v in PROFILE.items() if k != "name"}]),
     ["profiles[0].name", "no input"]),
    ("profile_names_output", with_meta(profiles=[{**PROFILE, "name": "y"}]),
     ["profiles[0].name", "no input"]),
    ("profile_names_nothing", with_meta(profiles=[{**PROFILE, "name": "z"}]), ["profiles[0].name"]),
    ("profile_name_not_string", with_meta(profiles=[{**PROFILE, "name": 3}]), ["profiles[0].name"]),
    ("profile_twice", with_meta(profiles=[PROFILE, PROFILE]), ["profiles[1]", "second"]),
    ("profile_lacks_opt", with_meta(profiles=[{k: v for k, v in PROFILE.items() if k != "opt"}]),
     ["profiles[0].opt"]),
    ("profile_min_string", with_meta(profiles=[{**PROFILE, "min": "1,3"}]), ["profiles[0].min"]),
    ("profile_max_wrong_rank", with_meta(profiles=[{**PROFILE, "max": [8]}]),
     ["profiles[0].max", "2 non-negative"]),
    ("profile_negative", with_meta(profiles=[{**PROFILE, "min": [-1, 3]}]), ["profiles[0].min"]),
    ("profile_float", with_meta(profiles=[{**PROFILE, "opt": [4.0, 3]}]), ["profiles[0].opt"]),
    ("profile_bool", with_meta(profiles=[{**PROFILE, "opt": [True, 3]}]), ["profiles[0].opt"]),
    ("profile_min_above_opt", with_meta(profiles=[{**PROFILE, "min": [5, 3]}]),
     ["profiles[0]", "min <= opt <= max"]),
    ("profile_opt_above_max", with_meta(profiles=[{**PROFILE, "opt": [9, 3]}]),
     ["min <= opt <= max"]),
    ("profile_static_dim_moves", with_meta(profiles=[{**PROFILE, "max": [8, 4]}]),
     ["dimension 1", "static"]),
    ("precision_unknown", with_meta(precision="int4"), ["'precision'"]),
    ("precision_not_string", with_meta(precision=32), ["'precision'"]),
    ("flavor_unknown", with_meta(trt_flavor="tensorrt_llm"), ["'trt_flavor'"]),
    ("flavor_not_string", with_meta(trt_flavor=["tensorrt"]), ["'trt_flavor'"]),
    ("version_number", with_meta(trt_version=10.3), ["'trt_version'"]),
    ("version_empty", with_meta(trt_version=""), ["'trt_version'"]),
    ("version_path", with_meta(trt_version="../../x"), ["'trt_version'"]),
    ("capabilities_ints", with_meta(compute_capabilities=[89]), ["'compute_capabilities'"]),
    ("capabilities_word", with_meta(compute_capabilities="any"), ["'compute_capabilities'"]),
    ("capabilities_bad_name", with_meta(compute_capabilities=["SM8x"]),
     ["'compute_capabilities'"]),
    ("device_id_float", with_meta(device_id=0.0), ["'device_id'"]),
]

GOOD_FIELDS = with_meta(profiles=[PROFILE], precision="bf16", trt_flavor="tensorrt",
                        trt_version="10.13.0.35", compute_capabilities=["SM89", "SM120"],
                        device_id=0)


@pytest.mark.parametrize("meta,words", [pytest.param(m, w, id=i) for i, m, w in BAD_FIELDS])
def test_read_refuses_bad_runtime_fields(meta, words):
    with pytest.raises(BlobError) as info:
        blob.read_blob(meta_blob(meta))
    for w in words:
        assert w in str(info.value), (w, str(info.value))
    with pytest.raises(BlobError):  # and the writer never writes one
        blob.write_blob(b"E", meta)


def test_good_runtime_fields_round_trip():
    for meta in (GOOD_FIELDS, with_meta(compute_capabilities="all"), with_meta(profiles=[])):
        assert blob.read_blob(blob.write_blob(b"E", meta)).metadata == meta
        assert blob.read_blob(meta_blob(meta)).metadata == meta


def test_profile_for_scalar_input():
    meta = {"io_bindings": [binding("s", shape=[])],
            "profiles": [{"name": "s", "min": [], "opt": [], "max": []}]}
    assert blob.read_blob(blob.write_blob(b"E", meta)).metadata == meta


# ----------------------------------------------------------------- digests

ENGINE = bytes(range(256)) * 8
ONNX = b"onnx-model" * 50
CALIB = b"calibration" * 7


def written() -> bytes:
    return blob.write_blob(ENGINE, GOOD_FIELDS, ONNX, sections={"calib": CALIB})


def test_writer_records_digests():
    b = blob.read_blob(written())
    assert b.has_digests
    assert b.engine_sha256 == hashlib.sha256(ENGINE).hexdigest()
    assert [(s.name, s.sha256) for s in b.sections] == [
        ("onnx", hashlib.sha256(ONNX).hexdigest()), ("calib", hashlib.sha256(CALIB).hexdigest())]
    assert "engine_sha256" not in b.metadata  # the writer's own key, like "sections"


@pytest.mark.parametrize("region", ["engine", "onnx", "calib"])
@pytest.mark.parametrize("where", ["first", "last"])
def test_flipped_byte_is_named(region, where):
    data = bytearray(written())
    b = blob.read_blob(bytes(data))
    off, n = ((b.engine_offset, b.engine_size) if region == "engine" else
              next((s.offset, s.size) for s in b.sections if s.name == region))
    data[off if where == "first" else off + n - 1] ^= 0x01
    with pytest.raises(BlobError) as info:
        blob.read_blob(bytes(data))
    msg = str(info.value)
    assert ("the engine" if region == "engine" else f"section {region!r}") in msg
    assert "corrupt" in msg and "re-export" in msg and f"[{off}, {off + n})" in msg
    # tools that show a damaged blob can still read its metadata
    assert blob.read_blob(bytes(data), check_digests=False).metadata == GOOD_FIELDS


def _rewrite_meta(data: bytes, edit) -> bytes:
    """The blob with its metadata JSON edited in place (same engine offset)."""
    magic, mo, ms, eo, es, res = struct.unpack_from(blob.HEADER_FORMAT, data)
    text = edit(data[mo:mo + ms].decode())
    raw = text.encode()
    assert mo + len(raw) <= eo
    head = struct.pack(blob.HEADER_FORMAT, magic, mo, len(raw), eo, es, res)
    return head + raw + b"\0" * (eo - mo - len(raw)) + data[eo:]


@pytest.mark.parametrize("edit,words", [
    (lambda t: t.replace('"engine_sha256"', '"engine_sha257"'), ["some of its regions"]),
    (lambda t: t.replace('"sha256":', '"sha257":', 1), ["some of its regions"]),
    (lambda t: t.replace('"engine_sha256":"', '"engine_sha256":"A'), ["engine_sha256", "64"]),
    (lambda t: t.replace('"sha256":"', '"sha256":"0', 1), ["sections[0].sha256", "64"]),
    (lambda t: re.sub('"sha256":"[0-9a-f]*"', '"sha256":7', t, count=1), ["sections[0].sha256"]),
])
def test_damaged_digest_fields(edit, words):
    data = _rewrite_meta(written(), edit)
    with pytest.raises(BlobError) as info:
        blob.read_blob(data)
    for w in words:
        assert w in str(info.value)


def test_digest_swapped_between_sections_is_caught():
    ok = written()
    b = blob.read_blob(ok)
    onnx_d, calib_d = (s.sha256 for s in b.sections)
    swapped = _rewrite_meta(ok, lambda t: t.replace(onnx_d, "#").replace(calib_d, onnx_d)
                            .replace("#", calib_d))
    with pytest.raises(BlobError, match="section 'onnx'"):
        blob.read_blob(swapped)


def test_blobs_without_digests_still_load():
    for data in (torch_tensorrt_style_blob(), executorch_style_blob([]),
                 meta_blob(GOOD_FIELDS)):
        b = blob.read_blob(data)
        assert not b.has_digests and all(s.sha256 is None for s in b.sections)


def test_writer_refuses_digest_key():
    with pytest.raises(BlobError, match="written by write_blob"):
        blob.write_blob(b"E", {**DYN, "engine_sha256": "0" * 64})


def test_metadata_text_keeps_upstream_order():
    data = written()
    _, mo, ms, *_ = struct.unpack_from(blob.HEADER_FORMAT, data)
    keys = list(json.loads(data[mo:mo + ms]))
    assert keys[0] == "io_bindings" and keys[-2:] == ["engine_sha256", "sections"]
