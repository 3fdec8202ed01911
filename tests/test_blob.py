"""The blob format: src/executorch_tensorrt/blob.py (writer and Python reader).

Every malformed case must be rejected with a message naming the fault; every
valid case must pass; a few thousand random mutations of valid blobs must
raise nothing but BlobError. The adapter's own check of the fixed header is
tested in tests/native/test_blob_header.py.
"""

from __future__ import annotations

import importlib.util
import json
import random
import struct
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BLOB_PY = REPO / "src" / "executorch_tensorrt" / "blob.py"


def _load_blob_module():
    # By path: the format module has no dependencies, and importing the
    # package would load the native adapter, which this test does not need.
    name = "_etrt_blob_under_test"
    spec = importlib.util.spec_from_file_location(name, BLOB_PY)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


blob = _load_blob_module()
BlobError = blob.BlobError
FMT = blob.HEADER_FORMAT

U64_MAX = 2**64 - 1


# ----------------------------------------------------------------- the reader


def py_check(data: bytes) -> str | None:
    try:
        blob.read_blob(data)
    except BlobError as e:
        return str(e)
    return None


# ----------------------------------------------------------------- blob builders

ENGINE = bytes(range(256)) * 2  # 512 bytes
META_REGION = 1024  # metadata padded with spaces (valid JSON whitespace) to this size
ENGINE_OFFSET = 32 + META_REGION  # 1056, a multiple of 16
ENGINE_END = ENGINE_OFFSET + len(ENGINE)  # 1568, a multiple of 16


def binding(name="x", dtype="float32", shape=(1, 3), is_input=True, **extra) -> dict:
    return {"name": name, "dtype": dtype, "shape": list(shape) if isinstance(shape, (list, tuple)) else shape, "is_input": is_input, **extra}


GOOD_META = {"io_bindings": [binding("x"), binding("y", is_input=False)]}


def pack(magic=b"TR01", meta_off=32, meta_size=0, eng_off=ENGINE_OFFSET, eng_size=len(ENGINE),
         reserved=b"\x01" + b"\0" * 7) -> bytes:
    return struct.pack(FMT, magic, meta_off, meta_size, eng_off, eng_size, reserved)


def meta_blob(meta, *, engine=ENGINE, tail=b"", region=META_REGION, **header) -> bytes:
    """A blob with the given metadata (dict, or raw JSON text/bytes) in a
    fixed-size metadata region, then the engine, then `tail`."""
    if isinstance(meta, dict):
        meta = json.dumps(meta, separators=(",", ":"))
    raw = meta.encode("utf-8") if isinstance(meta, str) else meta
    region = max(region, (len(raw) + 15) // 16 * 16)  # section cases stay within 1024
    fields = dict(meta_size=len(raw), eng_off=32 + region, eng_size=len(engine))
    fields.update(header)
    return pack(**fields) + raw + b" " * (region - len(raw)) + engine + tail


def with_header(data: bytes, **fields) -> bytes:
    magic, mo, ms, eo, es, res = struct.unpack_from(FMT, data)
    cur = dict(magic=magic, meta_off=mo, meta_size=ms, eng_off=eo, eng_size=es, reserved=res)
    cur.update(fields)
    return pack(**cur) + data[32:]


def sections_blob(entries: list, tail: bytes, meta_extra: dict | None = None) -> bytes:
    return meta_blob({**GOOD_META, **(meta_extra or {}), "sections": entries}, tail=tail)


GOOD = meta_blob(GOOD_META)
TAIL = b"\xab" * 64  # bytes after the engine: ENGINE_END .. ENGINE_END+64
SEC = ENGINE_END


def nested(depth: int) -> str:
    # The top-level object is level 1, so depth-1 arrays inside it.
    return '{"io_bindings":[],"x":' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


def many_keys(n: int) -> str:
    return "{" + ",".join(['"io_bindings":[]'] + [f'"k{i}":{i}' for i in range(n - 1)]) + "}"


def entry_text(entry: str) -> str:
    return '{"io_bindings":[' + entry + "]}"


# ----------------------------------------------------------------- malformed cases

# (id, blob, keywords that both readers' messages must contain)
MALFORMED = [
    # header
    ("empty", b"", ["truncated"]),
    ("shorter_than_header", GOOD[:31], ["truncated"]),
    ("header_only", GOOD[:32], ["out of bounds"]),
    ("wrong_magic", with_header(GOOD, magic=b"TRT1"), ["magic"]),
    ("lowercase_magic", with_header(GOOD, magic=b"tr01"), ["magic"]),
    ("binary_magic", with_header(GOOD, magic=b"\0\xff\n'"), ["magic"]),
    ("tr02_aliased_io", with_header(GOOD, magic=b"TR02"), ["magic", "TR02"]),
    ("metadata_offset_inside_header", with_header(GOOD, meta_off=16), ["overlap", "header"]),
    ("metadata_offset_zero", with_header(GOOD, meta_off=0), ["overlap", "header"]),
    ("engine_offset_misaligned", with_header(GOOD, eng_off=ENGINE_OFFSET + 8), ["aligned"]),
    ("engine_offset_odd", with_header(GOOD, eng_off=ENGINE_OFFSET - 1), ["aligned"]),
    ("engine_size_zero", with_header(GOOD, eng_size=0), ["engine", "empty"]),
    ("metadata_past_end", with_header(GOOD, meta_size=len(GOOD)), ["metadata region", "out of bounds"]),
    ("metadata_size_u32_max", with_header(GOOD, meta_size=2**32 - 1), ["metadata region", "out of bounds"]),
    ("metadata_offset_u32_max", with_header(GOOD, meta_off=2**32 - 1), ["metadata region", "out of bounds"]),
    ("engine_truncated", GOOD[:-1], ["engine region", "out of bounds"]),
    ("engine_size_past_end", with_header(GOOD, eng_size=len(ENGINE) + 16), ["engine region", "out of bounds"]),
    ("engine_size_u64_max", with_header(GOOD, eng_size=U64_MAX), ["engine region", "out of bounds"]),
    ("engine_size_wraps", with_header(GOOD, eng_size=2**64 - ENGINE_OFFSET), ["engine region", "out of bounds"]),
    ("engine_offset_u32_max_aligned", with_header(GOOD, eng_off=2**32 - 16), ["engine region", "out of bounds"]),
    ("metadata_overlaps_engine", with_header(GOOD, eng_off=64), ["overlap"]),
    ("engine_over_header_and_metadata", with_header(GOOD, eng_off=0), ["overlap"]),
    ("engine_at_16_over_metadata", with_header(GOOD, eng_off=16), ["overlap"]),
    ("metadata_after_engine",
     pack(meta_off=48 + 16, meta_size=18, eng_off=48, eng_size=16) + b"\0" * 16 + b"E" * 16
     + b'{"io_bindings":[]}', ["precede"]),
    ("metadata_size_zero", with_header(GOOD, meta_size=0), ["metadata is empty"]),
    # metadata bytes
    ("metadata_not_utf8", meta_blob(b'{"io_bindings":[],"x":"\xff"}'), ["UTF-8"]),
    ("metadata_overlong_utf8", meta_blob(b'{"io_bindings":[],"x":"\xc0\xaf"}'), ["UTF-8"]),
    ("metadata_utf8_surrogate", meta_blob(b'{"io_bindings":[],"x":"\xed\xa0\x80"}'), ["UTF-8"]),
    ("metadata_utf8_above_max", meta_blob(b'{"io_bindings":[],"x":"\xf4\x90\x80\x80"}'), ["UTF-8"]),
    ("metadata_utf8_cut", meta_blob(b'{"io_bindings":[],"x":"\xe2\x82"}'), ["UTF-8"]),
    ("metadata_bom", meta_blob(b'\xef\xbb\xbf{"io_bindings":[]}'), ["not valid JSON"]),
    ("json_cut", meta_blob('{"io_bindings":['), ["not valid JSON"]),
    ("json_unterminated_string", meta_blob('{"io_bindings":[],"x":"abc'), ["not valid JSON"]),
    ("json_extra_data", meta_blob('{"io_bindings":[]} x'), ["not valid JSON"]),
    ("json_two_values", meta_blob('{"io_bindings":[]}{}'), ["not valid JSON"]),
    ("json_trailing_comma", meta_blob('{"io_bindings":[],}'), ["not valid JSON"]),
    ("json_array_trailing_comma", meta_blob('{"io_bindings":[],"x":[1,]}'), ["not valid JSON"]),
    ("json_single_quotes", meta_blob("{'io_bindings':[]}"), ["not valid JSON"]),
    ("json_unquoted_key", meta_blob("{io_bindings:[]}"), ["not valid JSON"]),
    ("json_missing_colon", meta_blob('{"io_bindings" []}'), ["not valid JSON"]),
    ("json_nan", meta_blob('{"io_bindings":[],"x":NaN}'), ["not valid JSON"]),
    ("json_infinity", meta_blob('{"io_bindings":[],"x":Infinity}'), ["not valid JSON"]),
    ("json_minus_infinity", meta_blob('{"io_bindings":[],"x":-Infinity}'), ["not valid JSON"]),
    ("json_leading_zero", meta_blob('{"io_bindings":[],"x":01}'), ["not valid JSON"]),
    ("json_bare_minus", meta_blob('{"io_bindings":[],"x":-}'), ["not valid JSON"]),
    ("json_bad_fraction", meta_blob('{"io_bindings":[],"x":1.}'), ["not valid JSON"]),
    ("json_bad_exponent", meta_blob('{"io_bindings":[],"x":1e}'), ["not valid JSON"]),
    ("json_plus_number", meta_blob('{"io_bindings":[],"x":+1}'), ["not valid JSON"]),
    ("json_control_char_in_string", meta_blob('{"io_bindings":[],"x":"a\tb"}'), ["not valid JSON"]),
    ("json_bad_escape", meta_blob('{"io_bindings":[],"x":"\\x41"}'), ["not valid JSON"]),
    ("json_short_unicode_escape", meta_blob('{"io_bindings":[],"x":"\\u12"}'), ["not valid JSON"]),
    ("json_truncated_literal", meta_blob('{"io_bindings":[],"x":tru}'), ["not valid JSON"]),
    ("json_capital_literal", meta_blob('{"io_bindings":[],"x":True}'), ["not valid JSON"]),
    ("json_nul_byte", meta_blob(b'{"io_bindings":[]}\0'), ["not valid JSON"]),
    ("json_too_deep", meta_blob(nested(65)), ["deeper"]),
    ("json_only_whitespace", meta_blob("   "), ["not valid JSON"]),
    ("top_level_array", meta_blob("[]"), ["must be an object"]),
    ("top_level_string", meta_blob('"io_bindings"'), ["must be an object"]),
    ("top_level_number", meta_blob("42"), ["must be an object"]),
    ("top_level_null", meta_blob("null"), ["must be an object"]),
    ("duplicate_top_level_key", meta_blob('{"io_bindings":[],"a":1,"a":2}'), ["duplicate key"]),
    ("duplicate_io_bindings", meta_blob('{"io_bindings":[],"io_bindings":[]}'), ["duplicate key"]),
    ("duplicate_key_via_escape", meta_blob('{"io_bindings":[],"a":1,"\\u0061":2}'), ["duplicate key"]),
    ("duplicate_key_via_surrogates",
     meta_blob('{"io_bindings":[],"\U0001f600":1,"\\ud83d\\ude00":2}'), ["duplicate key"]),
    ("too_many_top_level_keys", meta_blob(many_keys(129)), ["more than 128 keys"]),
    # io_bindings
    ("no_io_bindings", meta_blob("{}"), ["io_bindings"]),
    ("io_bindings_misspelled", meta_blob('{"io_binding":[]}'), ["io_bindings"]),
    ("io_bindings_object", meta_blob('{"io_bindings":{}}'), ["io_bindings", "must be an array"]),
    ("io_bindings_null", meta_blob('{"io_bindings":null}'), ["io_bindings", "must be an array"]),
    ("binding_not_object", meta_blob('{"io_bindings":[1]}'), ["io_bindings[0]", "must be an object"]),
    ("binding_is_array", meta_blob('{"io_bindings":[["x"]]}'), ["io_bindings[0]", "must be an object"]),
    ("binding_lacks_name",
     meta_blob(entry_text('{"dtype":"float32","shape":[1],"is_input":true}')), ["lacks", "name"]),
    ("binding_lacks_dtype",
     meta_blob(entry_text('{"name":"x","shape":[1],"is_input":true}')), ["lacks", "dtype"]),
    ("binding_lacks_shape",
     meta_blob(entry_text('{"name":"x","dtype":"float32","is_input":true}')), ["lacks", "shape"]),
    ("binding_lacks_is_input",
     meta_blob(entry_text('{"name":"x","dtype":"float32","shape":[1]}')), ["lacks", "is_input"]),
    ("binding_second_incomplete",
     meta_blob({"io_bindings": [binding("a"), {"name": "b"}]}), ["io_bindings[1]", "lacks"]),
    ("binding_duplicate_key",
     meta_blob(entry_text('{"name":"x","name":"y","dtype":"float32","shape":[1],"is_input":true}')),
     ["duplicate key", "io_bindings[0]"]),
    ("binding_name_empty", meta_blob({"io_bindings": [binding("")]}), ["name", "non-empty string"]),
    ("binding_name_number", meta_blob({"io_bindings": [binding(7)]}), ["name", "non-empty string"]),
    ("binding_name_null", meta_blob({"io_bindings": [binding(None)]}), ["name", "non-empty string"]),
    ("binding_name_control_char", meta_blob({"io_bindings": [binding("a\nb")]}), ["control character"]),
    ("binding_name_escaped_nul", meta_blob(entry_text(
        '{"name":"a\\u0000","dtype":"float32","shape":[1],"is_input":true}')), ["control character"]),
    ("binding_dtype_unknown", meta_blob({"io_bindings": [binding(dtype="float33")]}), ["dtype"]),
    ("binding_dtype_case", meta_blob({"io_bindings": [binding(dtype="Float32")]}), ["dtype"]),
    ("binding_dtype_number", meta_blob({"io_bindings": [binding(dtype=6)]}), ["dtype"]),
    ("binding_dtype_null", meta_blob({"io_bindings": [binding(dtype=None)]}), ["dtype"]),
    ("binding_shape_not_array", meta_blob({"io_bindings": [binding() | {"shape": 3}]}), ["shape"]),
    ("binding_shape_float", meta_blob(entry_text(
        '{"name":"x","dtype":"float32","shape":[1.0],"is_input":true}')), ["shape"]),
    ("binding_shape_exponent", meta_blob(entry_text(
        '{"name":"x","dtype":"float32","shape":[1e2],"is_input":true}')), ["shape"]),
    ("binding_shape_below_minus_one", meta_blob({"io_bindings": [binding(shape=[2, -2])]}), ["shape"]),
    ("binding_shape_string", meta_blob({"io_bindings": [binding(shape=["1"])]}), ["shape"]),
    ("binding_shape_bool", meta_blob({"io_bindings": [binding(shape=[True])]}), ["shape"]),
    ("binding_shape_nested", meta_blob({"io_bindings": [binding(shape=[[1]])]}), ["shape"]),
    ("binding_shape_2_63", meta_blob({"io_bindings": [binding(shape=[2**63])]}), ["shape"]),
    ("binding_shape_2_64", meta_blob({"io_bindings": [binding(shape=[2**64])]}), ["shape"]),
    ("binding_shape_huge", meta_blob(entry_text(
        '{"name":"x","dtype":"float32","shape":[' + "9" * 80 + '],"is_input":true}')), ["shape"]),
    ("binding_is_input_string", meta_blob({"io_bindings": [binding(is_input="true")]}), ["is_input"]),
    ("binding_is_input_int", meta_blob({"io_bindings": [binding(is_input=1)]}), ["is_input"]),
    ("binding_is_input_null", meta_blob({"io_bindings": [binding(is_input=None)]}), ["is_input"]),
    ("binding_names_repeat",
     meta_blob({"io_bindings": [binding("x"), binding("y"), binding("x", is_input=False)]}),
     ["duplicate binding name"]),
    ("binding_names_repeat_via_escape", meta_blob(
        '{"io_bindings":[' + json.dumps(binding("ab")) + ","
        + json.dumps(binding("ab")).replace('"ab"', '"a\\u0062"') + "]}"),
     ["duplicate binding name"]),
    # scalar fields upstream parsers read
    ("aliased_io_entries", meta_blob({**GOOD_META, "aliased_io": [
        {"output": "y", "input": "x", "kind": "user"}]}), ["aliased_io"]),
    ("aliased_io_object", meta_blob({**GOOD_META, "aliased_io": {}}), ["aliased_io", "array"]),
    ("hardware_compatible_string", meta_blob({**GOOD_META, "hardware_compatible": "yes"}),
     ["hardware_compatible"]),
    ("hardware_compatible_int", meta_blob({**GOOD_META, "hardware_compatible": 1}),
     ["hardware_compatible"]),
    ("device_id_string", meta_blob({**GOOD_META, "device_id": "0"}), ["device_id"]),
    ("device_id_float", meta_blob({**GOOD_META, "device_id": 1.5}), ["device_id"]),
    ("device_id_too_big", meta_blob({**GOOD_META, "device_id": 2**31}), ["device_id"]),
    ("device_id_too_small", meta_blob({**GOOD_META, "device_id": -(2**31) - 1}), ["device_id"]),
    # extension sections
    ("sections_object", meta_blob({**GOOD_META, "sections": {}}), ["sections", "must be an array"]),
    ("sections_entry_not_object", sections_blob([5], TAIL), ["sections[0]", "must be an object"]),
    ("section_lacks_name", sections_blob([{"offset": SEC, "size": 1}], TAIL), ["sections[0].name"]),
    ("section_name_empty", sections_blob([{"name": "", "offset": SEC, "size": 1}], TAIL),
     ["sections[0].name"]),
    ("section_name_number", sections_blob([{"name": 1, "offset": SEC, "size": 1}], TAIL),
     ["sections[0].name"]),
    ("section_lacks_offset", sections_blob([{"name": "onnx", "size": 1}], TAIL), ["offset"]),
    ("section_offset_negative", sections_blob([{"name": "onnx", "offset": -16, "size": 1}], TAIL),
     ["offset", "non-negative"]),
    ("section_offset_float", sections_blob([{"name": "onnx", "offset": float(SEC), "size": 1}], TAIL),
     ["offset", "non-negative integer"]),
    ("section_offset_string", sections_blob([{"name": "onnx", "offset": str(SEC), "size": 1}], TAIL),
     ["offset"]),
    ("section_offset_bool", sections_blob([{"name": "onnx", "offset": True, "size": 1}], TAIL),
     ["offset"]),
    ("section_lacks_size", sections_blob([{"name": "onnx", "offset": SEC}], TAIL), ["size"]),
    ("section_size_negative", sections_blob([{"name": "onnx", "offset": SEC, "size": -1}], TAIL),
     ["size", "non-negative"]),
    ("section_duplicate_key",
     meta_blob('{"io_bindings":[],"sections":[{"name":"a","name":"b","offset":%d,"size":1}]}' % SEC,
               tail=TAIL), ["duplicate key", "sections[0]"]),
    ("section_misaligned", sections_blob([{"name": "onnx", "offset": SEC + 4, "size": 1}], TAIL),
     ["aligned"]),
    ("section_past_end", sections_blob([{"name": "onnx", "offset": SEC, "size": 65}], TAIL),
     ["out of bounds"]),
    ("section_offset_past_end", sections_blob([{"name": "onnx", "offset": SEC + 80, "size": 0}], TAIL),
     ["out of bounds"]),
    ("section_size_u64_max", sections_blob([{"name": "onnx", "offset": SEC, "size": U64_MAX}], TAIL),
     ["out of bounds"]),
    ("section_offset_wraps", sections_blob([{"name": "onnx", "offset": 2**64 - 16, "size": 32}], TAIL),
     ["out of bounds"]),
    ("section_offset_2_64", sections_blob([{"name": "onnx", "offset": 2**64, "size": 1}], TAIL),
     ["out of bounds"]),
    ("section_size_2_64", sections_blob([{"name": "onnx", "offset": SEC, "size": 2**64}], TAIL),
     ["out of bounds"]),
    ("section_offset_80_digits", meta_blob(
        '{"io_bindings":[],"sections":[{"name":"onnx","offset":1' + "0" * 79 + ',"size":1}]}',
        tail=TAIL), ["out of bounds"]),
    ("section_overlaps_engine", sections_blob([{"name": "onnx", "offset": SEC - 16, "size": 16}], TAIL),
     ["overlap", "engine"]),
    ("section_inside_metadata", sections_blob([{"name": "onnx", "offset": 64, "size": 16}], TAIL),
     ["overlap", "engine"]),
    ("section_over_header", sections_blob([{"name": "onnx", "offset": 0, "size": 16}], TAIL),
     ["overlap"]),
    ("sections_overlap", sections_blob([{"name": "onnx", "offset": SEC, "size": 32},
                                        {"name": "more", "offset": SEC + 16, "size": 16}], TAIL),
     ["overlap", "onnx"]),
    ("sections_out_of_order", sections_blob([{"name": "onnx", "offset": SEC + 32, "size": 16},
                                             {"name": "more", "offset": SEC, "size": 16}], TAIL),
     ["overlap"]),
    ("sections_duplicate_name", sections_blob([{"name": "onnx", "offset": SEC, "size": 16},
                                               {"name": "onnx", "offset": SEC + 16, "size": 16}], TAIL),
     ["duplicate section name"]),
]

# Blobs both readers must accept.
VALID = [
    ("good", GOOD),
    ("empty_io_bindings", meta_blob({"io_bindings": []})),
    ("depth_64", meta_blob(nested(64))),
    ("keys_128", meta_blob(many_keys(128))),
    ("trailing_bytes_after_engine", GOOD + b"\0" * 100),
    ("gap_between_metadata_and_engine", with_header(GOOD, eng_off=ENGINE_OFFSET - 16,
                                                     eng_size=len(ENGINE) + 16)),
    ("whitespace_everywhere", meta_blob(' \n{ "io_bindings" :\t[ { "name" : "x" , "dtype" : "" ,'
                                        ' "shape" : [ ] , "is_input" : false } ] }\r\n')),
    ("escaped_strings", meta_blob(entry_text(
        '{"name":"caf\\u00e9\\/\\"q\\"","dtype":"float32","shape":[-0,-1,2],"is_input":true}'))),
    ("raw_utf8_name", meta_blob({"io_bindings": [binding("caf\u00e9\U0001f600")]}, )),
    ("lone_surrogate_escape", meta_blob('{"io_bindings":[],"x":"\\ud800"}')),
    ("extra_binding_keys", meta_blob({"io_bindings": [binding("x", is_shape_tensor=False, extra={"a": [1]})]})),
    ("shape_max_i64", meta_blob({"io_bindings": [binding(shape=[2**63 - 1])]})),
    ("torch_dtype_names", meta_blob({"io_bindings": [binding("x", "torch.float32"),
                                                     binding("y", "torch.int64")]})),
    ("all_dtypes", meta_blob({"io_bindings": [binding(f"t{i}", d)
                                              for i, d in enumerate(sorted(blob.WRITE_DTYPES))]})),
    ("scalar_fields", meta_blob({**GOOD_META, "aliased_io": [], "hardware_compatible": True,
                                 "device_id": -(2**31), "serialized_metadata": "", "target_platform": ""})),
    ("big_numbers_elsewhere", meta_blob('{"io_bindings":[],"x":1e999,"y":' + "7" * 5000 + "}")),
    ("sections_zero_size", sections_blob([{"name": "onnx", "offset": SEC, "size": 0}], b"")),
    ("sections_with_gaps", sections_blob([{"name": "onnx", "offset": SEC + 16, "size": 5},
                                          {"name": "more", "offset": SEC + 48, "size": 16}], TAIL)),
    ("section_extra_keys", sections_blob([{"name": "onnx", "offset": SEC, "size": 64,
                                           "sha256": "00"}], TAIL)),
    ("sections_empty_list", sections_blob([], b"")),
    ("schema_version_zero", with_header(GOOD, reserved=b"\0" * 8)),
    ("reserved_bytes_ignored", with_header(GOOD, reserved=b"\xff" * 8)),
]


def _assert_keywords(msg: str | None, keywords: list[str], who: str) -> None:
    assert msg is not None, f"{who} accepted a malformed blob"
    for k in keywords:
        assert k.lower() in msg.lower(), f"{who}: {msg!r} does not mention {k!r}"


@pytest.mark.parametrize("data,keywords", [pytest.param(d, k, id=i) for i, d, k in MALFORMED])
def test_python_rejects(data, keywords):
    with pytest.raises(BlobError) as info:
        blob.read_blob(data)
    _assert_keywords(str(info.value), keywords, "read_blob")


@pytest.mark.parametrize("data", [pytest.param(d, id=i) for i, d in VALID])
def test_both_accept(data):
    assert py_check(data) is None, py_check(data)


def test_read_blob_accepts_buffers():
    for data in (GOOD, bytearray(GOOD), memoryview(GOOD)):
        assert blob.read_blob(data).engine == ENGINE
    # a non-byte memoryview is read as its bytes
    import array
    words = array.array("I")
    words.frombytes(GOOD + b"\0" * (-len(GOOD) % 4))
    assert blob.read_blob(memoryview(words)).engine == ENGINE
    with pytest.raises(BlobError, match="bytes-like"):
        blob.read_blob("TR01")


# ----------------------------------------------------------------- round trips

ONNX = b"\x08\x07ONNX" * 33


@pytest.mark.parametrize("onnx", [None, ONNX, b""], ids=["no_onnx", "onnx", "empty_onnx"])
@pytest.mark.parametrize("n_bindings", [0, 1, 2000])
def test_round_trip(onnx, n_bindings):
    engine = bytes(random.Random(n_bindings).randrange(256) for _ in range(777))
    meta = {
        "io_bindings": [binding(f"t{i}", "float16", [1, -1, i], i % 2 == 0) for i in range(n_bindings)],
        "trt_flavor": "tensorrt_rtx",
        "trt_version": "1.7.1.116",
        "compute_capabilities": [75, 80, 86, 89, 120, 121],
        "profiles": [{"x": {"min": [1, 1], "opt": [1, 8], "max": [1, 64]}}],
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
    # the engine starts 16-byte aligned, right after the padded metadata
    assert b.engine_offset % 16 == 0 and b.metadata_offset == 32
    assert b.engine_offset == (32 + b.metadata_size + 15) // 16 * 16
    assert data[b.metadata_offset + b.metadata_size:b.engine_offset] == b"\0" * (
        b.engine_offset - b.metadata_offset - b.metadata_size)
    # writing what was read gives the same bytes
    assert blob.write_blob(b.engine, b.metadata, b.onnx) == data


def test_round_trip_more_sections():
    data = blob.write_blob(b"E" * 33, {"io_bindings": [binding()]}, ONNX,
                           sections={"calib": b"c" * 17, "timing_cache": b"t" * 100})
    b = blob.read_blob(data)
    assert [(s.name, s.data) for s in b.sections] == [
        ("onnx", ONNX), ("calib", b"c" * 17), ("timing_cache", b"t" * 100)]
    assert b.section("calib") == b"c" * 17 and b.section("nope") is None
    assert all(s.offset % 16 == 0 for s in b.sections)
    assert b.sections[0].offset >= b.engine_offset + b.engine_size
    assert len(data) == b.sections[-1].offset + b.sections[-1].size
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
    ("aliased_io", dict(metadata={**GOOD_META, "aliased_io": [{"output": "y", "input": "x"}]}),
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
    ("device_id_mentioned_elsewhere", dict(metadata={**GOOD_META, "profiles": {"device_id": 3}}),
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
         "trt_version": "1.7", "profiles": [{"x": [[1], [2], [3]]}]},
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


def _executorch_style_blob(bindings: list[dict]) -> bytes:
    # As ExecuTorch's serialize_blob lays it out: reserved all zero, default
    # json.dumps (ASCII escapes), each binding with is_shape_tensor.
    text = json.dumps({"io_bindings": bindings}, separators=(",", ":")).encode()
    eo = (32 + len(text) + 15) // 16 * 16
    engine = b"engine!" * 3
    return (struct.pack("<4sIIIQ8s", b"TR01", 32, len(text), eo, len(engine), b"\0" * 8)
            + text + b"\0" * (eo - 32 - len(text)) + engine)


def _torch_tensorrt_style_blob() -> bytes:
    # As Torch-TensorRT's serialize_engine lays it out: dtype "" and shape []
    # when unknown, aliased_io [], then the scalar fields; reserved[0] = 1.
    meta = {"io_bindings": [{"name": "x", "dtype": "", "shape": [], "is_input": True},
                            {"name": "output0", "dtype": "", "shape": [], "is_input": False}],
            "aliased_io": [], "hardware_compatible": False, "device_id": 0,
            "serialized_metadata": "gAR9lC4=", "target_platform": "linux_x86_64"}
    text = json.dumps(meta, separators=(",", ":")).encode()
    eo = (32 + len(text) + 15) // 16 * 16
    engine = b"ftrt" * 10
    return (struct.pack("<4sIIIQ8s", b"TR01", 32, len(text), eo, len(engine), b"\x01" + b"\0" * 7)
            + text + b"\0" * (eo - 32 - len(text)) + engine)


def test_upstream_blobs_load_here():
    et = _executorch_style_blob([
        {"name": "input", "dtype": "float32", "shape": [1, 3, 224, 224], "is_input": True,
         "is_shape_tensor": False},
        {"name": "output_caf\u00e9", "dtype": "bfloat16", "shape": [1, -1], "is_input": False,
         "is_shape_tensor": False},
    ])
    tt = _torch_tensorrt_style_blob()
    for data, engine in ((et, b"engine!" * 3), (tt, b"ftrt" * 10),
                         (_executorch_style_blob([]), b"engine!" * 3)):
        b = blob.read_blob(data)
        assert b.engine == engine and b.onnx is None and b.sections == ()
        assert blob.read_blob(et).io_bindings[1]["name"] == "output_caf\u00e9"
    assert blob.read_blob(et).schema_version == 0
    assert blob.read_blob(tt).metadata["target_platform"] == "linux_x86_64"


# ----------------------------------------------------------------- fuzzing


def _seed_blobs() -> list[bytes]:
    return [
        GOOD,
        blob.write_blob(b"ENGINE" * 7, {"io_bindings": [binding("a"), binding("b", "int64", [-1])],
                                        "device_id": 0, "trt_version": "1.7"}, b"onnx-bytes" * 3,
                        sections={"x": b"y" * 20}),
        blob.write_blob(b"E", {"io_bindings": [], "profiles": [{"a": [[1, 2], [3, 4]]}]}),
        sections_blob([{"name": "onnx", "offset": SEC, "size": 16},
                       {"name": "more", "offset": SEC + 16, "size": 16}], TAIL),
        _torch_tensorrt_style_blob(),
        meta_blob(entry_text('{"name":"caf\\u00e9","dtype":"float32","shape":[1],"is_input":true}')),
    ]


_INTERESTING = [0, 1, 15, 16, 31, 32, 33, 48, 1024, 1056, 1568, 2**31, 2**32 - 16, 2**32 - 1,
                2**63, 2**64 - 16, 2**64 - 1]
_JSON_BYTES = b'{}[]",:-0123456789.eEtfnu\\ \x00\x7f\xff\xc3'


def _mutate(rng: random.Random, data: bytes) -> bytes:
    d = bytearray(data)
    kind = rng.randrange(8)
    if kind == 0 and d:  # flip bytes anywhere
        for _ in range(rng.randint(1, 4)):
            d[rng.randrange(len(d))] = rng.randrange(256)
    elif kind == 1:  # header field set to an interesting value
        field, width = rng.choice([(4, 4), (8, 4), (12, 4), (16, 8)])
        v = rng.choice(_INTERESTING) % (1 << (8 * width))
        if len(d) >= 32:
            d[field:field + width] = v.to_bytes(width, "little")
    elif kind == 2:  # truncate
        d = d[:rng.randrange(len(d) + 1)]
    elif kind == 3:  # extend
        d += bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))
    else:  # edit the metadata text and fix up the header so it still frames it
        if len(d) < 32:
            return bytes(d)
        _, mo, ms, eo, es, res = struct.unpack_from(FMT, d)
        if not (32 <= mo and mo + ms <= eo <= len(d)):
            return bytes(d)
        text = bytearray(d[mo:mo + ms])
        if not text:
            return bytes(d)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(text))
            op = rng.randrange(4)
            if op == 0:
                text[i] = rng.choice(_JSON_BYTES)
            elif op == 1:
                text.insert(i, rng.choice(_JSON_BYTES))
            elif op == 2 and len(text) > 1:
                del text[i]
            else:
                j = min(len(text), i + rng.randint(1, 12))
                text[i:i] = text[i:j]
        # keep the engine and anything after it where it was, if the text fits
        if mo + len(text) <= eo:
            text += b" " * (eo - mo - len(text)) if rng.random() < 0.5 else b""
            d = d[:mo] + text + b"\0" * (eo - mo - len(text)) + d[eo:]
            d[8:12] = len(text).to_bytes(4, "little")
        else:
            new_eo = (mo + len(text) + 15) // 16 * 16
            d = d[:mo] + text + b"\0" * (new_eo - mo - len(text)) + d[eo:]
            d[8:12] = len(text).to_bytes(4, "little")
            d[12:16] = new_eo.to_bytes(4, "little")
    return bytes(d)


def _structured_case(rng: random.Random) -> bytes:
    """Valid-looking metadata with a few values replaced by odd ones."""
    odd = [0, -1, -2, 1, 16, SEC, SEC + 8, SEC + 16, 2**31, -(2**31) - 1, 2**63, 2**64 - 1, 2**64,
           1.5, float(SEC), "", "x", "onnx", "float32", "torch.float32", "int4", "a\nb", True,
           False, None, [], {}, [1, -1], [-2], {"name": "x"}, [{"name": "y", "offset": SEC}]]

    def pick():
        return json.loads(json.dumps(rng.choice(odd)))  # a fresh copy

    meta: dict = {"io_bindings": [binding(n, is_input=rng.random() < 0.5)
                                  for n in rng.sample("abcd", rng.randrange(4))]}
    if rng.random() < 0.6:
        meta["sections"], off = [], SEC
        for n in rng.sample(["onnx", "more", "x"], rng.randrange(1, 3)):
            size = rng.choice([0, 1, 16, 20])
            meta["sections"].append({"name": n, "offset": off, "size": size})
            off = (off + size + 15) // 16 * 16
    for k in ("aliased_io", "hardware_compatible", "device_id"):
        if rng.random() < 0.2:
            meta[k] = pick()
    for _ in range(rng.randint(1, 3)):
        node = meta
        for _ in range(rng.randrange(4)):  # walk down to a random container
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys or not isinstance(node[k := rng.choice(keys)], (dict, list)):
                break
            node = node[k]
        if isinstance(node, dict):
            if node and rng.random() < 0.3:
                del node[rng.choice(list(node))]
            else:
                node[rng.choice(list(node) + ["name", "offset", "size", "z"])] = pick()
        elif node and rng.random() < 0.5:
            node[rng.randrange(len(node))] = pick()
        else:
            node.append(pick())
    text = json.dumps(meta, separators=(",", ":"))
    if rng.random() < 0.1:
        text = text.replace('"name":', '"name":"q","name":', 1)
    return meta_blob(text, tail=bytes(rng.randrange(256) for _ in range(rng.choice([0, 16, 64]))))


def test_fuzz_read_blob_raises_only_blob_error():
    """read_blob on random mutations: a verdict or BlobError, never another exception."""
    rng = random.Random(20240611)
    seeds = _seed_blobs()
    cases = [d for _, d, _ in MALFORMED] + [d for _, d in VALID] + seeds
    for _ in range(6000):
        data = rng.choice(seeds)
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            data = _mutate(rng, data)
        cases.append(data)
    cases += [_structured_case(rng) for _ in range(3000)]
    valid = sum(py_check(d) is None for d in cases)
    # the mutations reach both verdicts
    assert 100 < valid < len(cases) - 1000, valid
