"""The adapter's blob check (native/src/blob_header.cpp, etrt_validate_blob).

The adapter checks only the fixed TR01 header and that the metadata and
engine regions lie inside the blob; the Python reader (read_blob, tested in
tests/blob/) validates the metadata where it is used. Here:

- the constants come from the Python format module through
  native/cmake/gen_blob_constants.py;
- each header fault is rejected with a message naming it, and blobs with a
  sound header pass whatever their metadata holds;
- the C++ check never accepts what read_blob's header checks reject, and
  never rejects what read_blob accepts (differential, on random mutations);
- the same check, built with AddressSanitizer and UBSan, runs over valid,
  malformed and randomly mutated headers; any sanitizer report fails.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from executorch_tensorrt import blob
from executorch_tensorrt.blob import BlobError, read_blob, write_blob

from blob_check import SANITIZE, compile_cxx, generate_constants, run, run_sanitized

FMT = blob.HEADER_FORMAT


def py_check(data: bytes) -> str | None:
    try:
        read_blob(data)
    except BlobError as e:
        return str(e)
    return None


# ------------------------------------------------------------------ blobs

ENGINE = bytes(range(256)) * 2
GOOD = write_blob(ENGINE, {"io_bindings": [
    {"name": "x", "dtype": "float32", "shape": [1, 3], "is_input": True},
    {"name": "y", "dtype": "float32", "shape": [1, 3], "is_input": False}]}, b"onnx" * 9)
_, MO, MS, EO, ES, RES = struct.unpack_from(FMT, GOOD)


def header(data: bytes = GOOD, **fields) -> bytes:
    """data with some header fields replaced (magic, mo, ms, eo, es, reserved)."""
    values = dict(zip(("magic", "mo", "ms", "eo", "es", "reserved"), struct.unpack_from(FMT, data)))
    values.update(fields)
    return struct.pack(FMT, *values.values()) + data[struct.calcsize(FMT):]


HEADER_FAULTS = [
    ("empty", b"", ["truncated", "0 bytes"]),
    ("shorter_than_header", GOOD[:31], ["truncated", "31 bytes"]),
    ("bad_magic", header(magic=b"XR01"), ["magic", "XR01", "TR01"]),
    ("tr03_magic", header(magic=b"TR03"), ["magic", "TR03"]),
    ("binary_magic", header(magic=b"\0\xff'\\"), ["magic", "\\x00\\xff\\x27\\x5c"]),
    ("metadata_in_header", header(mo=0), ["metadata offset 0", "header"]),
    ("metadata_at_31", header(mo=31), ["metadata offset 31", "header"]),
    ("engine_unaligned", header(eo=EO + 1), ["engine offset", "aligned"]),
    ("metadata_past_end", header(ms=len(GOOD) - MO + 1), ["metadata region", "out of bounds"]),
    ("metadata_offset_huge", header(mo=2**32 - 1), ["metadata region", "out of bounds"]),
    ("engine_past_end", header(es=len(GOOD) - EO + 1), ["engine region", "out of bounds"]),
    ("engine_size_max", header(es=2**64 - 1), ["engine region", "out of bounds"]),
    ("engine_end_wraps", header(es=2**64 - EO), ["engine region", "out of bounds"]),
    ("engine_offset_huge", header(eo=2**32 - 16, es=16), ["engine region", "out of bounds"]),
    ("overlap", header(ms=EO - MO + 1), ["overlaps the engine"]),
    ("metadata_after_engine", header(mo=EO + ES, ms=1), ["must precede"]),
    ("engine_in_header", header(eo=16, es=16), ["must precede"]),
    ("metadata_empty", header(ms=0), ["metadata is empty"]),
]

# A sound header around metadata only read_blob can judge: the adapter passes these on.
METADATA_FAULTS = [
    ("json_syntax", header(GOOD[:MO] + b"{" * MS + GOOD[MO + MS:])),
    ("not_utf8", header(GOOD[:MO] + b"\xff" * MS + GOOD[MO + MS:])),
    ("section_past_end", GOOD[:len(GOOD) - 4]),
    # Legal only with "engine": "none" in the metadata.
    ("engine_empty", header(es=0)),
    # Torch-TensorRT's in-place blobs: legal only with aliased_io entries.
    ("tr02_magic", header(magic=b"TR02")),
]


@pytest.mark.parametrize("data,keywords", [pytest.param(d, k, id=i) for i, d, k in HEADER_FAULTS])
def test_header_faults_rejected(cpp_check, data, keywords):
    reason = cpp_check(data)
    assert reason is not None, "the adapter accepted a blob with a bad header"
    for k in keywords:
        assert k.lower() in reason.lower(), f"{reason!r} does not mention {k!r}"
    assert py_check(data) is not None, "read_blob accepted it: the two disagree on the header"


@pytest.mark.parametrize("data", [pytest.param(d, id=i) for i, d in METADATA_FAULTS])
def test_metadata_is_left_to_the_reader(cpp_check, data):
    assert cpp_check(data) is None
    assert py_check(data) is not None


def test_written_blobs_pass(cpp_check):
    for onnx in (None, b"", b"o" * 100):
        for n in (0, 1, 300):
            meta = {"io_bindings": [{"name": f"t{i}", "dtype": "float16", "shape": [1, -1],
                                     "is_input": i % 2 == 0} for i in range(n)]}
            data = write_blob(b"E" * (n + 1), meta, onnx)
            assert cpp_check(data) is None, (onnx, n)


# ------------------------------------------------------------------ constants

def test_generated_constants_are_the_python_ones(blob_check_includes, tmp_path):
    """A program compiled with the generated header prints the Python values."""
    src = tmp_path / "print.cpp"
    src.write_text('#include "etrt_blob_constants.h"\n#include <cstdio>\n'
                   "int main() { using namespace etrt::blob;\n"
                   '  std::printf("%s %llu %llu %llu %llu %llu %llu\\n", kMagic,\n'
                   "    (unsigned long long)kHeaderSize, (unsigned long long)kAlignment,\n"
                   "    (unsigned long long)kMetadataOffsetAt, (unsigned long long)kMetadataSizeAt,\n"
                   "    (unsigned long long)kEngineOffsetAt, (unsigned long long)kEngineSizeAt); }\n")
    compile_cxx([*blob_check_includes, "-o", tmp_path / "print", src])
    out = run([tmp_path / "print"]).stdout.split()
    offsets = [struct.calcsize(p) for p in ("<4s", "<4sI", "<4sII", "<4sIII")]
    assert out == [blob.MAGIC.decode(), str(blob.HEADER_SIZE), str(blob.ALIGNMENT),
                   *map(str, offsets)]


@pytest.mark.parametrize("text,message", [
    ('MAGIC = b"TR01"\nHEADER_FORMAT = "<4sIIQQ8s"\nALIGNMENT = 16\n', "no longer has TR01's fields"),
    ('MAGIC = b"TR01"\nHEADER_FORMAT = "<4sIIIQ8s"\n', "ALIGNMENT not defined"),
    ('MAGIC = b"TR1"\nHEADER_FORMAT = "<4sIIIQ8s"\nALIGNMENT = 16\n', "does not fill"),
    ('MAGIC = b"TR01"\nHEADER_FORMAT = "<4sIIIQ8s"\nALIGNMENT = 12\n', "power of two"),
    ('MAGIC = b"TR01"\nHEADER_FORMAT = "<4sIIIQ8s"\nHEADER_SIZE = 30\nALIGNMENT = 16\n',
     "HEADER_SIZE 30"),
])
def test_generator_refuses_what_the_check_cannot_use(tmp_path, text, message):
    source = tmp_path / "blob.py"
    source.write_text(text)
    proc = generate_constants(source, tmp_path)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


# ------------------------------------------------------------------ sanitizers and fuzzing

_INTERESTING = [0, 1, 15, 16, 31, 32, 33, 48, MO, MS, EO, ES, EO + ES, 2**31, 2**32 - 16,
                2**32 - 1, 2**63, 2**64 - 16, 2**64 - 1]
_FIELDS = [(4, 4), (8, 4), (12, 4), (16, 8)]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    d = bytearray(data)
    kind = rng.randrange(6)
    if kind <= 1 and len(d) >= 32:  # a header field set to an interesting value, or near one
        at, width = rng.choice(_FIELDS)
        v = rng.choice(_INTERESTING) + (rng.randint(-2, 2) if kind else 0)
        d[at:at + width] = (v % (1 << (8 * width))).to_bytes(width, "little")
    elif kind == 2 and d:  # flip header bytes
        for _ in range(rng.randint(1, 3)):
            d[rng.randrange(min(len(d), 32))] = rng.randrange(256)
    elif kind == 3:  # truncate
        d = d[:rng.randrange(len(d) + 1)]
    elif kind == 4:  # extend
        d += bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))
    else:  # flip any byte
        if d:
            d[rng.randrange(len(d))] = rng.randrange(256)
    return bytes(d)


def _with_minimal_metadata(data: bytes) -> bytes | None:
    """The blob with its metadata replaced by the smallest valid JSON, padded
    with spaces; None if the region is too small to hold it, or if the engine
    region is empty (legal only with metadata naming an ONNX section), or for
    TR02 (legal only with aliased_io entries)."""
    magic, mo, ms, _, es, _ = struct.unpack_from(FMT, data)
    text = b'{"io_bindings":[]}'
    if ms < len(text) or es == 0 or magic == b"TR02":
        return None
    return data[:mo] + text + b" " * (ms - len(text)) + data[mo + ms:]


def test_fuzz_sanitized_and_differential(cpp_check, sanitized_check):
    rng = random.Random(20261130)
    seeds = [GOOD, write_blob(b"E", {"io_bindings": []}),
             write_blob(b"x" * 17, {"io_bindings": [], "note": "é"}, b"o" * 3)]
    cases = [d for _, d, _ in HEADER_FAULTS] + [d for _, d in METADATA_FAULTS] + seeds
    for _ in range(6000):
        data = rng.choice(seeds)
        for _ in range(rng.choice([1, 1, 2, 3])):
            data = _mutate(rng, data)
        cases.append(data)
    asan_verdicts = sanitized_check(cases)
    problems, accepted = [], 0
    for data, asan in zip(cases, asan_verdicts):
        cpp, py = cpp_check(data), py_check(data)
        if (cpp is None) != (asan is None):
            problems.append(("sanitized and plain builds disagree", data[:48], cpp, asan))
        if py is None and cpp is not None:
            problems.append(("the adapter rejects what read_blob accepts", data[:48], cpp))
        if cpp is None:
            accepted += 1
            patched = _with_minimal_metadata(data)
            if patched is not None and py_check(patched) is not None:
                problems.append(("the adapter accepts a header read_blob rejects", data[:48],
                                 py_check(patched)))
    assert not problems, f"{len(problems)} problems, first: {problems[:3]}"
    assert 300 < accepted < len(cases) - 1000, accepted  # the mutations reach both verdicts


def test_sanitizer_reports_fail_the_run(tmp_path):
    """The harness above fails on a report: a driver with an out-of-bounds
    read, built and run the same way, must not pass."""
    src = tmp_path / "overread.cpp"
    src.write_text("#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n"
                   "int main(int argc, char**) { char* p = static_cast<char*>(std::malloc(8));\n"
                   "  std::memset(p, 0, 8); volatile char c = p[argc + 6]; (void)c;\n"
                   '  unsigned char len[8]; while (std::fread(len, 1, 8, stdin) == 8) {}\n'
                   '  std::printf("0\\n"); std::free(p); }\n')
    compile_cxx(["-O0", *SANITIZE, "-o", tmp_path / "overread", src])
    with pytest.raises(AssertionError, match="sanitized blob check failed"):
        run_sanitized(tmp_path / "overread", [GOOD])
