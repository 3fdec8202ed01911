"""executorch_tensorrt: a TensorRT backend for ExecuTorch.

Importing this package loads the native adapter, which registers
"TensorRTBackend" with the ExecuTorch runtime that `executorch.runtime` uses,
and installs the Python executors; it also makes optimum-executorch's
`tensorrt` recipe appear when optimum's recipe registry is imported (without
importing optimum: optimum_hook.py). Set EXECUTORCH_TENSORRT_SKIP_REGISTRATION=1
to import without loading it (tooling that only reads metadata).
AOT names (export, TensorRTPartitioner, ...) are imported on first use.
"""
from __future__ import annotations

import logging as _logging

# torchao (imported by executorch) warns at import that its CUDA kernels do not
# load on a CPU machine, and torch's pytree logs a deprecation about one of
# torchao's enums; neither says anything about this package, so keep them quiet
# unless the application configured those loggers itself.
for _name in ("torchao", "torch.utils._pytree"):
    if _logging.getLogger(_name).level == _logging.NOTSET:
        _logging.getLogger(_name).setLevel(_logging.ERROR)

from . import optimum_hook as _optimum_hook  # noqa: E402
from .runtime.adapter import loader  # noqa: E402

__version__ = "0.1.0"


def register() -> None:
    """Loads the adapter (registering TensorRTBackend) and installs the
    executors; idempotent. `import executorch_tensorrt` calls it."""
    if loader.registration_skipped():
        return
    loader.load_adapter()
    from .runtime import callbacks as _backend_callbacks

    _backend_callbacks.install()


def _started_as_cli() -> bool:
    """True when this process is the `executorch-tensorrt` command (or
    `python -m executorch_tensorrt[.cli]`): the CLI registers when a command
    needs the runtime, so that --help and usage errors answer without torch."""
    import sys

    if not sys.argv:
        return False
    if sys.argv[0] == "-m":  # runpy is importing the package of the module to run
        argv = getattr(sys, "orig_argv", [])
        cli = ("executorch_tensorrt", "executorch_tensorrt.cli")
        return any(a == "-m" and b in cli for a, b in zip(argv, argv[1:]))
    return sys.argv[0].rsplit("/", 1)[-1] == "executorch-tensorrt"


if not _started_as_cli():
    register()
_optimum_hook.install()


def last_error() -> str:
    """The last cause the backend recorded on this thread (ExecuTorch itself
    reports only a code). Only failures inside TensorRTBackend: when ExecuTorch
    refuses inputs in set_inputs (its RuntimeError names set_inputs()), the
    backend never ran and this still holds an earlier call's cause, if any
    (docs/security.md, "last_error()")."""
    if loader.registration_skipped() or not loader.is_loaded():
        return ""
    return loader.last_error()


_LAZY = {
    "export": ("aot.export", "export"),
    "export_program": ("aot.export", "export_program"),
    "TensorRTPartitioner": ("aot.partition.partitioner", "TensorRTPartitioner"),
    "TensorRTBackend": ("aot.backend", "TensorRTBackend"),
    "TensorRTCompileSpec": ("aot.compile_spec", "TensorRTCompileSpec"),
    "reset_state": ("runtime.state", "reset_state"),
    "greedy_decode": ("llm.greedy_decode", "greedy_decode"),
    "prepare": ("deploy.prepare", "prepare"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'executorch_tensorrt' has no attribute {name!r}")


__all__ = ["export", "export_program", "TensorRTPartitioner", "TensorRTBackend",
           "TensorRTCompileSpec", "last_error", "prepare", "register", "__version__"]
