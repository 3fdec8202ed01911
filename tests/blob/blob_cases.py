"""Shared pieces of the blob tests: blob builders and the malformed/valid
cases. The C++ validator built for tests comes from tests/blob_check.py
(session fixtures, shared with tests/native/test_blob_header.py).
"""

from __future__ import annotations

import json
import struct

import executorch_tensorrt.blob as blob  # the installed package, like every suite
BlobError = blob.BlobError
FMT = blob.HEADER_FORMAT

U64_MAX = 2**64 - 1


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

# Malformed fixed header or regions: (id, blob, keywords that both readers'
# messages must contain).
HEADER_MALFORMED = [
    ("empty", b"", ["truncated"]),
    ("shorter_than_header", GOOD[:31], ["truncated"]),
    ("header_only", GOOD[:32], ["out of bounds"]),
    ("wrong_magic", with_header(GOOD, magic=b"TRT1"), ["magic"]),
    ("lowercase_magic", with_header(GOOD, magic=b"tr01"), ["magic"]),
    ("binary_magic", with_header(GOOD, magic=b"\0\xff\n'"), ["magic"]),
    ("metadata_offset_inside_header", with_header(GOOD, meta_off=16), ["overlap", "header"]),
    ("metadata_offset_zero", with_header(GOOD, meta_off=0), ["overlap", "header"]),
    ("engine_offset_misaligned", with_header(GOOD, eng_off=ENGINE_OFFSET + 8), ["aligned"]),
    ("engine_offset_odd", with_header(GOOD, eng_off=ENGINE_OFFSET - 1), ["aligned"]),
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
]
# Malformed metadata: read_blob refuses these; the C++ adapter, which checks
# only the fixed header and regions, need not.
METADATA_MALFORMED = [
    # TR02 (Torch-TensorRT's aliased outputs) is a valid header; the magic must agree
    # with the metadata: TR02 exactly when aliased_io is non-empty.
    ("tr02_without_aliased_io", with_header(GOOD, magic=b"TR02"), ["TR02", "aliased"]),
    ("tr01_with_aliased_io", meta_blob({**GOOD_META, "aliased_io": [
        {"output": "y", "input": "x", "kind": "user"}]}), ["TR01", "aliased"]),
    ("metadata_size_zero", with_header(GOOD, meta_size=0), ["metadata is empty"]),
    # An empty engine region is the reader's call: legal only with "engine": "none".
    ("engine_size_zero", with_header(GOOD, eng_size=0), ["engine", "empty", '"none"']),
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
    ("tr02_aliased_io", meta_blob({**GOOD_META, "aliased_io": [
        {"output": "y", "input": "x", "kind": "user"}]}, magic=b"TR02")),
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
                                           "note": "00"}], TAIL)),
    ("sections_empty_list", sections_blob([], b"")),
    ("schema_version_zero", with_header(GOOD, reserved=b"\0" * 8)),
    ("reserved_bytes_ignored", with_header(GOOD, reserved=b"\xff" * 8)),
]


def py_check(data: bytes) -> str | None:
    try:
        blob.read_blob(data)
    except BlobError as e:
        return str(e)
    return None


def assert_keywords(msg: str | None, keywords: list[str], who: str) -> None:
    assert msg is not None, f"{who} accepted a malformed blob"
    for k in keywords:
        assert k.lower() in msg.lower(), f"{who}: {msg!r} does not mention {k!r}"
