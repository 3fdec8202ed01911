"""write_blob: round trips, refusals, and the checks upstream TR01 parsers
(ExecuTorch's, Torch-TensorRT's) run on what it writes."""

from __future__ import annotations

import json
import random
import struct

import pytest
from blob_cases import GOOD_META, BlobError, binding, blob


# ----------------------------------------------------------------- round trips

ONNX = b"\x08\x07ONNX" * 33


@pytest.mark.parametrize("onnx", [None, ONNX, b""], ids=["no_onnx", "onnx", "empty_onnx"])
@pytest.mark.parametrize("n_bindings", [0, 1, 2000])
def test_round_trip(cpp_check, onnx, n_bindings):
    engine = bytes(random.Random(n_bindings).randrange(256) for _ in range(777))
    meta = {
        "io_bindings": [binding(f"t{i}", "float16", [1, -1, i], i % 2 == 0) for i in range(n_bindings)],
        "trt_flavor": "tensorrt_rtx",
        "trt_version": "1.7.1.116",
        "compute_capabilities": ["SM75", "SM80", "SM86", "SM89", "SM120", "SM121"],
        "profiles": [{"name": f"t{i}", "min": [1, 1, i], "opt": [1, 8, i], "max": [1, 64, i]}
                     for i in range(0, n_bindings, 2)],
        "note": "caf\u00e9",
    }
    data = blob.write_blob(engine, meta, onnx)
    b = blob.read_blob(data)
    assert b.engine == engine
    assert b.metadata == meta
    assert b.onnx == onnx
    assert [s.name for s in b.sections] == ([] if onnx is None else ["onnx"])
    assert b.schema_version == blob.SCHEMA_VERSION
    assert b.io_bindings == meta["io_bindings"]
    assert cpp_check(data) is None
    # the engine starts 16-byte aligned, right after the padded metadata
    assert b.engine_offset % 16 == 0 and b.metadata_offset == 32
    assert b.engine_offset == (32 + b.metadata_size + 15) // 16 * 16
    assert data[b.metadata_offset + b.metadata_size:b.engine_offset] == b"\0" * (
        b.engine_offset - b.metadata_offset - b.metadata_size)
    # writing what was read gives the same bytes
    assert blob.write_blob(b.engine, b.metadata, b.onnx) == data


def test_round_trip_more_sections(cpp_check):
    data = blob.write_blob(b"E" * 33, {"io_bindings": [binding()]}, ONNX,
                           sections={"calib": b"c" * 17, "timing_cache": b"t" * 100})
    b = blob.read_blob(data)
    assert [(s.name, s.data) for s in b.sections] == [
        ("onnx", ONNX), ("calib", b"c" * 17), ("timing_cache", b"t" * 100)]
    assert b.section("calib") == b"c" * 17 and b.section("nope") is None
    assert all(s.offset % 16 == 0 for s in b.sections)
    assert b.sections[0].offset >= b.engine_offset + b.engine_size
    assert len(data) == b.sections[-1].offset + b.sections[-1].size
    assert cpp_check(data) is None
    # a list of pairs keeps its order too
    data2 = blob.write_blob(b"E" * 33, {"io_bindings": [binding()]}, ONNX,
                            sections=[("calib", b"c" * 17), ("timing_cache", b"t" * 100)])
    assert data2 == data


def test_section_offsets_settle_across_digit_boundaries():
    # Metadata lengths where the section offsets gain a digit.
    for pad in range(0, 400, 7):
        meta = {"io_bindings": [], "pad": "p" * pad}
        for engine_len in (1, 16, 9_990, 99_990):
            data = blob.write_blob(b"E" * engine_len, meta, b"onnx", sections={"x": b"1"})
            b = blob.read_blob(data)
            assert b.onnx == b"onnx" and b.section("x") == b"1" and b.metadata == meta


# ----------------------------------------------------------------- write-side errors

BAD_WRITES = [
    ("empty_engine", dict(engine=b"", metadata=GOOD_META), "engine is empty"),
    ("engine_not_bytes", dict(engine="E", metadata=GOOD_META), "engine must be bytes"),
    ("metadata_not_dict", dict(metadata=[]), "metadata must be a dict"),
    ("no_io_bindings", dict(metadata={"x": 1}), "io_bindings"),
    ("bindings_not_list", dict(metadata={"io_bindings": "x"}), "must be an array"),
    ("binding_incomplete", dict(metadata={"io_bindings": [{"name": "x"}]}), "lacks"),
    ("binding_name_empty", dict(metadata={"io_bindings": [binding("")]}), "non-empty string"),
    ("binding_dtype_torch_name", dict(metadata={"io_bindings": [binding(dtype="torch.float32")]}),
     "dtype"),
    ("binding_shape_float", dict(metadata={"io_bindings": [binding(shape=[1.5])]}), "shape"),
    ("binding_is_input_int", dict(metadata={"io_bindings": [binding(is_input=1)]}), "is_input"),
    ("binding_names_repeat", dict(metadata={"io_bindings": [binding(), binding()]}),
     "duplicate binding name"),
    ("sections_key_reserved", dict(metadata={**GOOD_META, "sections": []}), "written by write_blob"),
    ("aliased_io", dict(metadata={**GOOD_META, "aliased_io": [{"output": "y", "input": "z"}]}),
     "aliased_io"),
    ("device_id_string", dict(metadata={**GOOD_META, "device_id": "0"}), "device_id"),
    ("non_string_key", dict(metadata={**GOOD_META, "x": {1: 2}}), "not a string"),
    ("nan", dict(metadata={**GOOD_META, "x": float("nan")}), "JSON cannot carry"),
    ("set_value", dict(metadata={**GOOD_META, "x": {1}}), "JSON cannot carry"),
    ("too_deep", dict(metadata={**GOOD_META, "x": json.loads("[" * 64 + "]" * 64)}), "deeper"),
    ("lone_surrogate", dict(metadata={**GOOD_META, "x": "\ud800"}), "not valid Unicode"),
    ("section_name_empty", dict(sections={"": b"x"}), "section name"),
    ("section_name_repeats_onnx", dict(onnx=b"o", sections={"onnx": b"x"}), "duplicate section name"),
    ("section_data_not_bytes", dict(sections={"x": "text"}), "must be bytes"),
    ("device_id_mentioned_elsewhere", dict(metadata={**GOOD_META, "extra": {"device_id": 3}}),
     "device_id"),
    ("hardware_compatible_mentioned_elsewhere",
     dict(metadata={**GOOD_META, "extra": {"hardware_compatible": 1}}), "hardware_compatible"),
]


@pytest.mark.parametrize("kwargs,message", [pytest.param(k, m, id=i) for i, k, m in BAD_WRITES])
def test_write_rejects(kwargs, message):
    args = {"engine": b"E" * 16, "metadata": GOOD_META, **kwargs}
    with pytest.raises(BlobError, match=message):
        blob.write_blob(**args)


def test_write_accepts_shared_subobjects_and_tuples():
    shape = [1, 2]
    meta = {"io_bindings": [binding("a", shape=shape), binding("b", shape=shape)],
            "dims": (1, 2), "device_id": 0, "hardware_compatible": False}
    b = blob.read_blob(blob.write_blob(b"E", meta))
    assert b.metadata["dims"] == [1, 2] and b.metadata["device_id"] == 0
    cyclic: dict = {"io_bindings": []}
    cyclic["self"] = cyclic
    with pytest.raises(BlobError, match="cycle"):
        blob.write_blob(b"E", cyclic)


# ----------------------------------------------------------------- upstream parsers
#
# What ExecuTorch's upstream TensorRT delegate (pytorch/executorch,
# backends/nvidia/tensorrt/{runtime/TensorRTBlobHeader.h, serialization.py})
# and Torch-TensorRT's ExecuTorch runtime (pytorch/TensorRT,
# cpp/include/torch_tensorrt/executorch/TensorRTBlobHeader.h and its parser,
# py/torch_tensorrt/executorch/serialization.py) check, restated here from
# docs/blob-format.md. A blob written here must pass all of it.


def _header(data: bytes):
    return struct.unpack_from("<4sIIIQ8s", data)


def executorch_upstream_checks(data: bytes) -> None:
    assert len(data) >= 32
    magic, mo, ms, eo, es, _ = _header(data)
    assert magic == b"TR01"
    assert eo + es <= len(data)  # engine located by the header alone
    assert mo + ms <= len(data)
    meta = json.loads(data[mo:mo + ms].decode("utf-8"))
    for b in meta.get("io_bindings", []):  # its from_dict indexes these four keys
        b["name"], b["dtype"], b["shape"], b["is_input"]


def _top_level_key_value(text: str, key: str) -> int | None:
    """Offset of the value of a top-level key in compact JSON, by decoding."""
    dec = json.JSONDecoder()
    i = 1
    while text[i] != "}":
        k, i = dec.raw_decode(text, i)
        assert text[i] == ":"
        if k == key:
            return i + 1
        _, i = dec.raw_decode(text, i + 1)
        if text[i] == ",":
            i += 1
    return None


def torch_tensorrt_checks(data: bytes) -> None:
    magic, mo, ms, eo, es, _ = _header(data)
    assert magic == b"TR01"
    assert mo >= 32 and eo % 16 == 0
    assert mo + ms <= len(data) and eo + es <= len(data)
    assert mo <= eo and mo + ms <= eo  # metadata before the engine
    text = data[mo:mo + ms].decode("utf-8")
    # Older parser: the first '"io_bindings"' in the text is the key, and the
    # array is the next '[' after it.
    assert text.startswith('{"io_bindings":[')
    at = _top_level_key_value(text, "io_bindings")
    assert text[at] == "["
    bindings, end = json.JSONDecoder().raw_decode(text, at)
    names = set()
    for b in bindings:
        # The name as their string reader decodes it: a backslash is dropped
        # and the character after it kept.
        raw = json.dumps(b["name"], ensure_ascii=False)[1:-1]
        assert '"' + raw + '"' in text
        decoded, i = [], 0
        while i < len(raw):
            if raw[i] == "\\":
                i += 1
            decoded.append(raw[i])
            i += 1
        assert "".join(decoded) == b["name"] != ""
        assert isinstance(b["is_input"], bool)
        assert b["name"] not in names
        names.add(b["name"])
    meta = json.loads(text)
    # Older parser: first mention of the scalar keys after io_bindings is the key.
    for key, kind in (("hardware_compatible", bool), ("device_id", int)):
        first = text.find(f'"{key}"', end)
        if key in meta:
            assert isinstance(meta[key], kind)
            assert text[first + len(key) + 2] == ":" and _top_level_key_value(text, key) == \
                first + len(key) + 3
        else:
            assert first == -1
    assert meta.get("aliased_io", []) == []


@pytest.mark.parametrize("onnx", [None, ONNX])
def test_written_blobs_pass_upstream_checks(onnx):
    metas = [
        {"io_bindings": []},
        {"io_bindings": [binding("x"), binding("out\"q\\", is_input=False)]},
        {"io_bindings": [binding("x")], "device_id": 1, "hardware_compatible": True,
         "trt_version": "1.7", "profiles": [{"name": "x", "min": [1, 3], "opt": [1, 3],
                                            "max": [1, 3]}]},
        {"io_bindings": [binding("caf\u00e9")], "aliased_io": [], "trt_flavor": "tensorrt_rtx"},
    ]
    for meta in metas:
        data = blob.write_blob(b"\x7fENGINE" * 9, meta, onnx)
        executorch_upstream_checks(data)
        torch_tensorrt_checks(data)
        _, mo, ms, eo, es, reserved = _header(data)
        assert data[eo:eo + es] == b"\x7fENGINE" * 9
        assert reserved == b"\x01" + b"\0" * 7
        text = data[mo:mo + ms].decode("utf-8")
        assert text == json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
        assert list(json.loads(text))[0] == "io_bindings"
