"""The adapter's C++ blob check (native/src/blob_header.cpp) built for tests,
once per session, for both the blob tests (tests/blob) and the native header
tests (tests/native/test_blob_header.py). Registered as a plugin in conftest.

Fixtures:
- `blob_check_includes`: include flags, with the constants header generated
  from the format module exactly as the native build does;
- `cpp_check`: etrt_validate_blob through ctypes (None if accepted, else the
  reason);
- `sanitized_check`: the check and tests/native/blob_validate_main.cpp built
  with AddressSanitizer + UBSan; runs many blobs in one process and fails on
  any sanitizer report.
"""

from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NATIVE = REPO / "native"
CHECK_CPP = NATIVE / "src" / "blob_header.cpp"
DRIVER_CPP = REPO / "tests" / "native" / "blob_validate_main.cpp"
GENERATOR = NATIVE / "cmake" / "gen_blob_constants.py"
FORMAT_PY = REPO / "src" / "executorch_tensorrt" / "blob" / "format.py"
INCLUDES = ["-I", str(NATIVE / "include"), "-I", str(NATIVE / "src")]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]


def compiler() -> str:
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        pytest.fail("no C++ compiler (g++, c++ or clang++) on PATH: the blob check cannot be tested")
    return cxx


def run(args: list) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


def compile_cxx(args: list) -> None:
    """Compiles with the project's warning flags; fails the test with the log."""
    proc = run([compiler(), "-std=c++17", "-g", "-Wall", "-Wextra", "-Werror", *args])
    assert proc.returncode == 0, f"{' '.join(map(str, args))}\n{proc.stdout}\n{proc.stderr}"


def generate_constants(source: Path, out_dir: Path) -> subprocess.CompletedProcess:
    return run([sys.executable, GENERATOR, source, out_dir / "etrt_blob_constants.h"])


def run_sanitized(binary: Path, blobs: list[bytes]) -> list[str | None]:
    """Runs a sanitized driver over the blobs in one process; fails on any report."""
    stdin = b"".join(struct.pack("<Q", len(b)) + b for b in blobs)
    proc = subprocess.run([str(binary), "-"], input=stdin, capture_output=True, timeout=600)
    stderr = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 0 and "Sanitizer" not in stderr and "runtime error" not in stderr, (
        f"sanitized blob check failed (rc={proc.returncode}):\n{stderr[-4000:]}")
    lines = proc.stdout.decode("utf-8", "replace").splitlines()
    assert len(lines) == len(blobs), (len(lines), len(blobs))
    return [None if line == "0" else line[2:] for line in lines]


@pytest.fixture(scope="session")
def blob_check_includes(tmp_path_factory) -> list[str]:
    gen = tmp_path_factory.mktemp("blob_constants")
    proc = generate_constants(FORMAT_PY, gen)
    assert proc.returncode == 0, proc.stderr
    return [*INCLUDES, "-I", str(gen)]


@pytest.fixture(scope="session")
def cpp_check(blob_check_includes, tmp_path_factory):
    out = tmp_path_factory.mktemp("blob_cpp") / "libetrt_blob_check.so"
    compile_cxx(["-O1", "-shared", "-fPIC", *blob_check_includes, "-o", out, CHECK_CPP])
    fn = ctypes.CDLL(str(out)).etrt_validate_blob
    fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_uint64]
    fn.restype = ctypes.c_int32

    def check(data: bytes) -> str | None:
        err = ctypes.create_string_buffer(b"stale", 1024)  # an accepted blob must clear it
        rc = fn(ctypes.create_string_buffer(data, len(data)) if data else None, len(data), err,
                len(err))
        if rc == 0:
            assert err.value == b"", "an accepted blob left a message"
            return None
        assert err.value, "rejected without a reason"
        return err.value.decode("utf-8", "replace")

    check.fn = fn
    return check


@pytest.fixture(scope="session")
def sanitized_check(blob_check_includes, tmp_path_factory):
    out = tmp_path_factory.mktemp("blob_asan") / "blob_validate_main"
    compile_cxx(["-O1", *SANITIZE, *blob_check_includes, "-o", out, DRIVER_CPP, CHECK_CPP])
    return lambda blobs: run_sanitized(out, blobs)
