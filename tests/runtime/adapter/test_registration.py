"""Registration on import: the adapter registers TensorRTBackend into the
registry that executorch.runtime uses, or raises ImportError with the cause.

Registration is per process, so every case runs in a fresh interpreter with
EXECUTORCH_TENSORRT_ADAPTER pointing at a CMake build of native/.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "native"))
import adapter_build  # noqa: E402


@pytest.fixture(scope="module")
def built() -> adapter_build.Build:
    return adapter_build.default_build()


REGISTRY = """
from executorch.runtime import Runtime
def registered():
    return "TensorRTBackend" in Runtime.get().backend_registry.registered_backend_names
"""

# Imports _native without the package's import-time load (and executors), so
# the test drives load_adapter() itself.
DIRECT = REGISTRY + """
import os
os.environ["EXECUTORCH_TENSORRT_SKIP_REGISTRATION"] = "1"
from executorch_tensorrt.runtime.adapter import loader
del os.environ["EXECUTORCH_TENSORRT_SKIP_REGISTRATION"]
"""


def test_load_registers_and_is_idempotent(built):
    out = adapter_build.check(adapter_build.run_python(DIRECT + """
import threading
assert not registered(), "registered before the adapter was loaded"
libs = []
threads = [threading.Thread(target=lambda: libs.append(loader.load_adapter())) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
assert len(libs) == 8 and all(l is libs[0] for l in libs), libs
assert loader.load_adapter() is libs[0]          # and again, later
assert registered()
assert libs[0].etrt_registration_status() == 0
names = Runtime.get().backend_registry.registered_backend_names
assert names.count("TensorRTBackend") == 1, names
# No executors installed: registered but not available, and it says why.
assert not Runtime.get().backend_registry.is_available("TensorRTBackend")
assert "no executor installed" in loader.last_error(), loader.last_error()
print("MSG", libs[0].etrt_registration_message().decode())
""", adapter=built.adapter))
    assert f"MSG TensorRTBackend registered by {built.adapter}" in out


def test_import_package_registers(built):
    # The package's only import side effect is loading the adapter.
    adapter_build.check(adapter_build.run_python(REGISTRY + """
import executorch_tensorrt
from executorch_tensorrt.runtime.adapter import loader
assert registered(), "import executorch_tensorrt did not register TensorRTBackend"
assert loader.is_loaded()
import executorch_tensorrt  # again: nothing changes
assert Runtime.get().backend_registry.registered_backend_names.count("TensorRTBackend") == 1
""", adapter=built.adapter))


# A C++ host that embeds Python (the C++ runner on a machine whose PyTorch
# does not match the one executorch's Python extension links) has
# libexecutorch.so loaded but cannot import executorch.runtime. Emulated
# here by loading libexecutorch.so first and making that import fail.
BLOCK_RUNTIME = """
import ctypes, sys
from pathlib import Path
import executorch
if {preload}:
    lib = Path(list(executorch.__path__)[0]) / "lib" / "libexecutorch.so"
    ctypes.CDLL(str(lib))
sys.modules["executorch.runtime"] = None  # any import of it raises ImportError
"""


def test_preloaded_libexecutorch_needs_no_python_runtime(built):
    out = adapter_build.check(adapter_build.run_python(BLOCK_RUNTIME.format(preload=True) + """
import executorch_tensorrt
from executorch_tensorrt.runtime.adapter import loader
lib = loader.load_adapter()
assert lib.etrt_registration_status() == 0, lib.etrt_registration_message()
print("MSG", lib.etrt_registration_message().decode())
""", adapter=built.adapter))
    assert f"MSG TensorRTBackend registered by {built.adapter}" in out, out


def test_without_libexecutorch_the_python_runtime_is_required(built):
    # The guard above must not hide a broken executorch in a Python process.
    proc = adapter_build.run_python(BLOCK_RUNTIME.format(preload=False) + """
import executorch_tensorrt
""", adapter=built.adapter)
    assert proc.returncode != 0
    assert "executorch.runtime cannot be imported" in proc.stderr, proc.stderr


def test_second_copy_of_the_adapter_is_refused(built, tmp_path):
    # E.g. a development build next to an installed wheel: the first copy
    # keeps the name, the second reports who holds it.
    copy = tmp_path / "other" / adapter_build.ADAPTER_FILENAME
    copy.parent.mkdir()
    copy.write_bytes(built.adapter.read_bytes())
    out = adapter_build.check(adapter_build.run_python(REGISTRY + f"""
import ctypes
import executorch_tensorrt
second = ctypes.CDLL({str(copy)!r})
second.etrt_registration_message.restype = ctypes.c_char_p
print("STATUS", second.etrt_registration_status())
print("MSG", second.etrt_registration_message().decode())
""", adapter=built.adapter))
    assert "STATUS 0\n" not in out, out
    msg = out.split("MSG ", 1)[1]
    assert f"defined in {built.adapter}" in msg and str(copy) in msg, msg


def test_skip_registration(built):
    adapter_build.check(adapter_build.run_python(REGISTRY + """
import executorch_tensorrt
from executorch_tensorrt.runtime.adapter import loader
assert loader.registration_skipped()
assert not loader.is_loaded()
try:
    loader.load_adapter()
except ImportError as e:
    assert "EXECUTORCH_TENSORRT_SKIP_REGISTRATION" in str(e), e
else:
    raise AssertionError("load_adapter loaded the adapter although skipped")
assert not registered()
""", adapter=built.adapter, env={"EXECUTORCH_TENSORRT_SKIP_REGISTRATION": "1"}))


def test_foreign_holder_is_named(built):
    out = adapter_build.check(adapter_build.run_python(REGISTRY + f"""
import ctypes
foreign = ctypes.CDLL({str(built.foreign)!r})
assert foreign.foreign_backend_status() == 0
assert registered()
try:
    import executorch_tensorrt
except ImportError as e:
    print("ERR", e)
else:
    raise AssertionError("the import succeeded although a foreign library holds the name")
from executorch_tensorrt.runtime.adapter import loader
assert not loader.is_loaded()
""", adapter=built.adapter))
    msg = out.split("ERR ", 1)[1]
    assert str(built.foreign) in msg, msg
    assert "already held" in msg and "TensorRTBackend" in msg, msg


def test_full_registry_is_reported(built):
    out = adapter_build.check(adapter_build.run_python(REGISTRY + f"""
import ctypes
foreign = ctypes.CDLL({str(built.foreign)!r})
assert foreign.foreign_backend_status() == -1
print("ADDED", foreign.foreign_fill_registry())
try:
    import executorch_tensorrt
except ImportError as e:
    print("ERR", e)
else:
    raise AssertionError("registered into a full registry?")
""", adapter=built.adapter, env={"FOREIGN_BACKEND_SKIP_TRT": "1"}))
    assert int(out.split("ADDED ", 1)[1].split()[0]) > 0, out
    msg = out.split("ERR ", 1)[1]
    assert "registry is probably full" in msg, msg


def test_abi_guard_names_both_versions(built):
    out = adapter_build.check(adapter_build.run_python(REGISTRY + """
import executorch.version as v
built_version = v.__version__
v.__version__ = "0.0.1+other"
try:
    import executorch_tensorrt
except ImportError as e:
    print("ERR", e)
else:
    raise AssertionError("loaded an adapter built against another executorch")
assert not registered(), "the mismatched adapter registered itself"
print("BUILT", built_version)
""", adapter=built.adapter))
    msg = out.split("ERR ", 1)[1].split("\nBUILT")[0]
    built_version = out.split("BUILT ", 1)[1].strip()
    assert "0.0.1+other" in msg and built_version in msg, msg


def test_abi_guard_git_version(built):
    out = adapter_build.check(adapter_build.run_python("""
import executorch.version as v
v.git_version = "0" * 40
try:
    import executorch_tensorrt
except ImportError as e:
    print("ERR", e)
""", adapter=built.adapter))
    assert "0" * 40 in out and "ERR" in out, out


def test_missing_adapter(tmp_path):
    missing = tmp_path / "nope" / adapter_build.ADAPTER_FILENAME
    out = adapter_build.check(adapter_build.run_python("""
try:
    import executorch_tensorrt
except ImportError as e:
    print("ERR", e)
else:
    raise AssertionError("no error for a missing adapter")
""", adapter=missing))
    msg = out.split("ERR ", 1)[1]
    assert str(missing) in msg and "does not exist" in msg, msg


def test_unloadable_adapter(tmp_path):
    # A file that is there but is not a shared library: the loader's own
    # message must come through.
    bogus = tmp_path / adapter_build.ADAPTER_FILENAME
    bogus.write_bytes(b"etrt-build-info:executorch_version=%s;executorch_git_version=%s;"
                      % _running_versions() + b"\0not an ELF file")
    out = adapter_build.check(adapter_build.run_python("""
try:
    import executorch_tensorrt
except ImportError as e:
    print("ERR", e)
""", adapter=bogus))
    msg = out.split("ERR ", 1)[1]
    assert "could not be loaded" in msg and "invalid ELF header" in msg, msg


def _running_versions() -> tuple[bytes, bytes]:
    import executorch.version as v

    return str(v.__version__).encode(), str(v.git_version).encode()
