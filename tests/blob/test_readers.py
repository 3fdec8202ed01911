"""The blob readers: read_blob (Python, the whole format) and
etrt_validate_blob (C++, the fixed header and regions the adapter checks
before handing the bytes to Python).

Every header case runs through both readers, which must reject it with a
message naming the fault; every metadata case through read_blob; every valid
case must pass both.
"""

from __future__ import annotations

import ctypes
import struct

import pytest
from blob_check import INCLUDES, compile_cxx
from blob_cases import (
    ENGINE,
    GOOD,
    HEADER_MALFORMED,
    METADATA_MALFORMED,
    VALID,
    BlobError,
    assert_keywords,
    blob,
    py_check,
)
from upstream_blobs import executorch_style_blob, torch_tensorrt_style_blob


def test_header_constants_are_consistent():
    # HEADER_SIZE is a literal (the native build reads it with ast).
    assert struct.calcsize(blob.HEADER_FORMAT) == blob.HEADER_SIZE == 32
    assert blob.ALIGNMENT == 16 and blob.MAGIC == b"TR01"


@pytest.mark.parametrize("data,keywords", [pytest.param(d, k, id=i) for i, d, k in
                                            HEADER_MALFORMED + METADATA_MALFORMED])
def test_python_rejects(data, keywords):
    with pytest.raises(BlobError) as info:
        blob.read_blob(data)
    assert_keywords(str(info.value), keywords, "read_blob")


@pytest.mark.parametrize("data,keywords", [pytest.param(d, k, id=i) for i, d, k in HEADER_MALFORMED])
def test_cpp_rejects(cpp_check, data, keywords):
    # The adapter checks the fixed header and regions before Python sees the
    # bytes; the metadata schema is read_blob's alone.
    assert_keywords(cpp_check(data), keywords, "etrt_validate_blob")


@pytest.mark.parametrize("data", [pytest.param(d, id=i) for i, d in VALID])
def test_both_accept(cpp_check, data):
    assert py_check(data) is None, py_check(data)
    assert cpp_check(data) is None, cpp_check(data)


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


def test_upstream_blobs_load_here(cpp_check):
    et = executorch_style_blob([
        {"name": "input", "dtype": "float32", "shape": [1, 3, 224, 224], "is_input": True,
         "is_shape_tensor": False},
        {"name": "output_caf\u00e9", "dtype": "bfloat16", "shape": [1, -1], "is_input": False,
         "is_shape_tensor": False},
    ])
    tt = torch_tensorrt_style_blob()
    for data, engine in ((et, b"engine!" * 3), (tt, b"ftrt" * 10),
                         (executorch_style_blob([]), b"engine!" * 3)):
        b = blob.read_blob(data)
        assert b.engine == engine and b.onnx is None and b.sections == ()
        assert cpp_check(data) is None
    assert blob.read_blob(et).io_bindings[1]["name"] == "output_caf\u00e9"
    assert blob.read_blob(et).schema_version == 0
    assert blob.read_blob(tt).metadata["target_platform"] == "linux_x86_64"



# ----------------------------------------------------------------- C++ error buffer


def test_cpp_error_buffer_is_respected(cpp_check):
    fn = cpp_check.fn
    bad = GOOD[:10]
    buf = ctypes.create_string_buffer(b"\x5a" * 16, 16)
    assert fn(bad, len(bad), None, 0) != 0
    assert fn(bad, len(bad), buf, 0) != 0 and buf.raw == b"\x5a" * 16
    assert fn(bad, len(bad), buf, 1) != 0 and buf.raw == b"\0" + b"\x5a" * 15
    assert fn(bad, len(bad), buf, 6) != 0 and buf.raw == b"trunc\0" + b"\x5a" * 10
    assert fn(None, 0, buf, 16) != 0 and buf.value.startswith(b"truncated")
    big = ctypes.create_string_buffer(64)
    assert fn(None, 64, big, 64) != 0 and b"NULL" in big.value
    # a valid blob clears a previous message
    buf2 = ctypes.create_string_buffer(b"old message", 32)
    assert fn(GOOD, len(GOOD), buf2, 32) == 0 and buf2.value == b""


def test_cpp_declarations_match_public_header(tmp_path):
    # Compiling blob_header.cpp includes both declarations; a mismatch fails.
    src = tmp_path / "decl.cpp"
    src.write_text('#include "blob_header.h"\n#include <executorch_tensorrt/executor_table.h>\n'
                   "int32_t (*p)(const void*, uint64_t, char*, uint64_t) = &etrt_validate_blob;\n")
    compile_cxx(["-fsyntax-only", *INCLUDES, src])
