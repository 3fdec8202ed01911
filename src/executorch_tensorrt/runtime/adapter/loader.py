"""Loads the native adapter, which registers the ``TensorRTBackend`` backend.

``load_adapter()`` is what ``import executorch_tensorrt`` runs. It is
idempotent and thread-safe, and raises ``ImportError`` naming the real cause
when the adapter cannot serve this process: executorch missing, the adapter
file missing, the loader refusing it, an adapter built against a different
executorch, or the backend name held by another library.

``EXECUTORCH_TENSORRT_SKIP_REGISTRATION=1`` makes the package importable
without ever loading the adapter (for tooling that only wants metadata).
``EXECUTORCH_TENSORRT_ADAPTER=/path/to/libexecutorch_backend_tensorrt.so``
selects a development build instead of the one installed in the package.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
import threading
from pathlib import Path
from typing import Optional, Sequence

from . import abi

__all__ = [
    "ADAPTER_ENV",
    "SKIP_ENV",
    "ADAPTER_FILENAME",
    "adapter_path",
    "registration_skipped",
    "load_adapter",
    "is_loaded",
    "install_executor_table",
    "resize_tensor",
    "set_last_error",
    "last_error",
    "validate_blob",
]

ADAPTER_ENV = "EXECUTORCH_TENSORRT_ADAPTER"
SKIP_ENV = "EXECUTORCH_TENSORRT_SKIP_REGISTRATION"
ADAPTER_FILENAME = "libexecutorch_backend_tensorrt.so"
BACKEND_ID = "TensorRTBackend"
LIBEXECUTORCH_SONAME = "libexecutorch.so"

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
# Every table ever installed (and through it its CFUNCTYPE callbacks) stays
# alive: a delegate keeps calling the table it was initialized with even after
# another one is installed. Tables are installed a handful of times at most.
_installed_tables: list = []

_BUILD_INFO = re.compile(
    rb"etrt-build-info:executorch_version=([^;\x00]*);executorch_git_version=([^;\x00]*);"
)


def registration_skipped() -> bool:
    """True when EXECUTORCH_TENSORRT_SKIP_REGISTRATION asks not to load the adapter."""
    return os.environ.get(SKIP_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def adapter_path() -> Path:
    """The adapter this process would load."""
    override = os.environ.get(ADAPTER_ENV)
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[2] / "lib" / ADAPTER_FILENAME


def is_loaded() -> bool:
    return _lib is not None


def _executorch_pin() -> str:
    """The executorch requirement this distribution declares, for messages."""
    try:
        from importlib.metadata import requires

        for req in requires("executorch-tensorrt") or ():
            if re.match(r"^executorch\s*[=<>~!]", req):
                return req.split(";")[0].replace(" ", "")
    except Exception:  # not installed as a distribution (source checkout)
        pass
    return "executorch"


def _runtime_executorch_version() -> tuple[str, str]:
    try:
        from executorch import version as et_version
    except ImportError as e:
        raise ImportError(
            "executorch_tensorrt needs the executorch package, which is not installed "
            f"in this environment ({e}). Install it with: pip install '{_executorch_pin()}'"
        ) from e
    return str(et_version.__version__), str(et_version.git_version)


def _libexecutorch_loaded() -> bool:
    """True when this process already has libexecutorch.so (matched by its
    SONAME): a C++ application that embeds Python, or an earlier import of
    executorch.runtime."""
    try:
        ctypes.CDLL(LIBEXECUTORCH_SONAME, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return False
    return True


# ELF e_machine values of the architectures wheels are built for, and the
# names platform.machine() gives them.
_ELF_MACHINES = {62: "x86_64", 183: "aarch64", 3: "i686", 21: "ppc64le", 22: "s390x"}


def _elf_architecture(path: Path) -> Optional[str]:
    """The architecture an ELF file was built for, read from its header
    (None if it is not an ELF file). A library for another architecture is
    refused by name here rather than by the loader's terse message."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    order = "little" if head[5] == 1 else "big"
    machine = int.from_bytes(head[18:20], order)
    return _ELF_MACHINES.get(machine, f"ELF machine {machine}")


def check_architecture(path: Path, what: str) -> None:
    """Raises ImportError when `path` (an ELF library) is built for another
    architecture than this interpreter runs on."""
    here = platform.machine()
    arch = _elf_architecture(path)
    if arch is not None and arch != here:
        raise ImportError(
            f"{what} {path} is built for {arch}, but this Python runs on {here}. "
            f"Install the {here} wheels in this environment (pip install --force-reinstall "
            f"'{_executorch_pin()}' executorch-tensorrt), not a copy from another machine."
        )


def _libexecutorch_file() -> Optional[Path]:
    """The executorch wheel's libexecutorch.so, found without loading it."""
    try:
        import executorch
    except ImportError:
        return None
    for entry in getattr(executorch, "__path__", ()):
        candidate = Path(entry) / "lib" / LIBEXECUTORCH_SONAME
        if candidate.is_file():
            return candidate
    return None


def _built_against(path: Path) -> Optional[tuple[str, str]]:
    """Reads the executorch version the adapter was built against out of the
    file itself, without loading it (see kBuildInfoMarker in adapter.cpp)."""
    match = _BUILD_INFO.search(path.read_bytes())
    if match is None:
        return None
    return match.group(1).decode(), match.group(2).decode()


def _abi_mismatch(path: Path, built: tuple[str, str], running: tuple[str, str]) -> ImportError:
    return ImportError(
        f"the TensorRT adapter {path} was built against executorch {built[0]} "
        f"(git {built[1]}), but this process has executorch {running[0]} (git {running[1]}). "
        "ExecuTorch has no stable C++ ABI, so it will not be loaded. Install the matching "
        f"pair: pip install '{_executorch_pin()}' executorch-tensorrt, or rebuild the adapter "
        "against the installed executorch."
    )


def _declare(lib: ctypes.CDLL) -> None:
    """argtypes/restype for every exported function."""
    c = ctypes
    sigs = {
        "etrt_install_executor_table": (c.c_int32, [c.POINTER(abi.EtrtExecutorTable)]),
        "etrt_resize_tensor": (
            c.c_int32,
            [c.POINTER(abi.EtrtArg), c.c_int32, c.POINTER(c.c_int64)],
        ),
        "etrt_set_last_error": (None, [c.c_char_p]),
        "etrt_last_error": (c.c_char_p, []),
        "etrt_registration_status": (c.c_int32, []),
        "etrt_registration_message": (c.c_char_p, []),
        "etrt_validate_blob": (
            c.c_int32,
            [c.c_void_p, c.c_uint64, c.c_char_p, c.c_uint64],
        ),
        "etrt_built_executorch_version": (c.c_char_p, []),
        "etrt_built_executorch_git_version": (c.c_char_p, []),
        "etrt_executor_abi_version": (c.c_uint32, []),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def load_adapter() -> ctypes.CDLL:
    """Loads the adapter once per process (registering TensorRTBackend) and
    returns it. Raises ImportError with the cause if that is not possible."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        if registration_skipped():
            raise ImportError(
                f"the TensorRT adapter is not loaded because {SKIP_ENV} is set; "
                "unset it to run TensorRT programs"
            )
        running = _runtime_executorch_version()
        et_lib = _libexecutorch_file()
        if et_lib is not None:
            check_architecture(et_lib, "executorch's runtime library")
        if not _libexecutorch_loaded():
            # Loads executorch's Python extension and libexecutorch.so, whose
            # SONAME then satisfies the adapter's dependency wherever it lives.
            # A C++ host that embeds this interpreter has libexecutorch.so
            # already and may not be able to load the extension at all (it
            # links the libtorch executorch was built with), so it is skipped.
            try:
                import executorch.runtime  # noqa: F401
            except ImportError as e:
                raise ImportError(
                    f"executorch is installed but executorch.runtime cannot be imported: {e}. "
                    f"Reinstall it: pip install --force-reinstall '{_executorch_pin()}'"
                ) from e

        path = adapter_path()
        if not path.is_file():
            if os.environ.get(ADAPTER_ENV):
                how = f"{ADAPTER_ENV} points at {path}, which does not exist; fix or unset it"
            else:
                how = (
                    "the installation is incomplete. Reinstall the wheel "
                    "(pip install --force-reinstall executorch-tensorrt), or in a source "
                    "checkout build it with `cmake -S native -B build/native && "
                    "cmake --build build/native` and set "
                    f"{ADAPTER_ENV}=$PWD/build/native/lib/{ADAPTER_FILENAME}"
                )
            raise ImportError(f"the TensorRT adapter {path} is missing: {how}")

        check_architecture(path, "the TensorRT adapter")
        built = _built_against(path)
        if built is None:
            raise ImportError(
                f"{path} is not an executorch_tensorrt adapter (it carries no build "
                "information); rebuild or reinstall executorch-tensorrt"
            )
        if built != running:
            raise _abi_mismatch(path, built, running)

        try:
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            raise ImportError(f"the TensorRT adapter {path} could not be loaded: {e}") from e
        _declare(lib)

        # The file said one thing; make sure the loaded code agrees.
        loaded = (
            lib.etrt_built_executorch_version().decode(),
            lib.etrt_built_executorch_git_version().decode(),
        )
        if loaded != running:
            raise _abi_mismatch(path, loaded, running)
        if lib.etrt_executor_abi_version() != abi.ETRT_EXECUTOR_ABI_VERSION:
            raise ImportError(
                f"the TensorRT adapter {path} implements executor ABI "
                f"{lib.etrt_executor_abi_version()} but this Python package speaks "
                f"{abi.ETRT_EXECUTOR_ABI_VERSION}; reinstall executorch-tensorrt"
            )
        status = lib.etrt_registration_status()
        if status != 0:
            raise ImportError(
                f"{BACKEND_ID} could not be registered (error {status:#x}): "
                f"{lib.etrt_registration_message().decode(errors='replace')}"
            )
        _lib = lib
        return lib


# ---- thin wrappers over the exported functions ----


def install_executor_table(table: Optional[abi.EtrtExecutorTable]) -> None:
    """Installs the executors (None uninstalls). Keeps the table alive."""
    lib = load_adapter()
    ptr = ctypes.byref(table) if table is not None else None
    code = lib.etrt_install_executor_table(ptr)
    if code != 0:
        raise RuntimeError(
            f"installing the executor table failed (error {code:#x}): {last_error()}"
        )
    if table is not None:
        _installed_tables.append(table)


def resize_tensor(arg, sizes: Sequence[int]) -> int:
    """Resizes an output (an ``EtrtArg`` or pointer to one, as passed to an
    executor's execute) and updates its nbytes/ndim/sizes. Returns 0 or the
    ExecuTorch Error code, with the cause in ``last_error()``."""
    n = len(sizes)
    arr = (ctypes.c_int64 * n)(*sizes)
    if isinstance(arg, abi.EtrtArg):
        arg = ctypes.pointer(arg)
    return load_adapter().etrt_resize_tensor(arg, n, arr)


def set_last_error(message: str) -> None:
    load_adapter().etrt_set_last_error(message.encode("utf-8", errors="replace"))


def last_error() -> str:
    return load_adapter().etrt_last_error().decode("utf-8", errors="replace")


def validate_blob(blob: bytes) -> Optional[str]:
    """None if the blob's TR01 header and regions are sound (what the adapter
    checks in init), else the reason. The metadata is read_blob's to validate."""
    err = ctypes.create_string_buffer(1024)
    buf = ctypes.create_string_buffer(bytes(blob), len(blob))
    code = load_adapter().etrt_validate_blob(buf, len(blob), err, len(err))
    return None if code == 0 else (err.value.decode("utf-8", errors="replace") or f"error {code}")
