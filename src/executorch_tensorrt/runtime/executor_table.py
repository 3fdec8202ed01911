"""The Python executors, installed into the adapter's executor table on import.

init picks the TensorRT executor; when the engine cannot run here and the
caller allowed it, the onnxruntime executor runs the embedded ONNX instead.
Every callback catches everything: an exception in a ctypes callback never
reaches ExecuTorch, so the cause is recorded (last_error, stderr) and an
ExecuTorch Error code returned.
"""
from __future__ import annotations

import itertools
import os
import sys
import threading
import traceback

from ..blob import BlobError, read_blob
from . import abi
from ._native import install_executor_table, set_last_error
from .arguments import ArgumentError
from .tensorrt_executor import EngineUnavailable, TensorRTExecutor

FALLBACK_ENV = "EXECUTORCH_TENSORRT_FALLBACK"
FALLBACK_ONNXRUNTIME = "onnxruntime"

# ExecuTorch Error codes (runtime/core/error.h).
ERR_INTERNAL = 0x01
ERR_INVALID_ARGUMENT = 0x12
ERR_INVALID_PROGRAM = 0x23
ERR_DELEGATE_INVALID_COMPATIBILITY = 0x30


def fallback_requested(option: str | None) -> str | None:
    """The fallback the caller allowed: the load-time option wins over the env."""
    value = option if option else os.environ.get(FALLBACK_ENV, "")
    value = value.strip().lower()
    if value in ("", "0", "none", "off"):
        return None
    if value != FALLBACK_ONNXRUNTIME:
        source = "the load-time option" if option else FALLBACK_ENV
        raise ValueError(f"unknown fallback {value!r} (from {source}); "
                         f"the only fallback is {FALLBACK_ONNXRUNTIME!r}")
    return value


def create_executor(blob, fallback_option: str | None):
    try:
        return TensorRTExecutor(blob)
    except EngineUnavailable as e:
        cause = str(e)
    fallback = fallback_requested(fallback_option)
    if fallback is None:
        raise EngineUnavailable(
            f"the TensorRT engine cannot run here: {cause}. To run this partition's embedded "
            f"ONNX model on the CPU with onnxruntime instead, set {FALLBACK_ENV}="
            f"{FALLBACK_ONNXRUNTIME} (or pass the load-time backend option "
            f"fallback={FALLBACK_ONNXRUNTIME}).")
    from .onnxruntime_executor import OnnxRuntimeExecutor

    executor = OnnxRuntimeExecutor(blob)
    _note_fallback_once(cause)
    return executor


_noted: set[str] = set()


def _note_fallback_once(cause: str) -> None:
    if cause not in _noted:
        _noted.add(cause)
        print(f"[executorch_tensorrt] running TensorRT partitions with onnxruntime on the CPU "
              f"({FALLBACK_ENV}={FALLBACK_ONNXRUNTIME}) because {cause}", file=sys.stderr)


class PythonExecutors:
    """Owns the handles and the ctypes table (which must outlive installation)."""

    def __init__(self) -> None:
        self.handles: dict[int, object] = {}
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.table = abi.make_table(self._is_available, self._init, self._execute,
                                    self._destroy)

    @staticmethod
    def _fail(code: int, what: str, error: BaseException) -> int:
        detail = str(error) or type(error).__name__
        if not isinstance(error, (EngineUnavailable, ArgumentError, BlobError, ValueError)):
            detail = f"{type(error).__name__}: {detail}\n{traceback.format_exc()}"
        try:
            set_last_error(f"{what}: {detail}")
        except Exception:  # noqa: BLE001 - never raise from a callback
            pass
        return code

    def _is_available(self) -> int:
        return 1

    def _init(self, args_ptr, handle_ptr, nin_ptr, nout_ptr) -> int:
        try:
            args = args_ptr.contents
            blob = read_blob(args.blob_bytes())
            fallback = args.fallback.decode() if args.fallback else None
            executor = create_executor(blob, fallback)
            with self.lock:
                handle = next(self.ids)
                self.handles[handle] = executor
            handle_ptr[0] = handle
            nin_ptr[0] = len(executor.inputs)
            nout_ptr[0] = len(executor.outputs)
            return 0
        except BlobError as e:
            return self._fail(ERR_INVALID_PROGRAM, "invalid TensorRT blob", e)
        except EngineUnavailable as e:
            return self._fail(ERR_DELEGATE_INVALID_COMPATIBILITY, "TensorRTBackend init", e)
        except BaseException as e:  # noqa: BLE001
            return self._fail(ERR_INTERNAL, "TensorRTBackend init", e)

    def _execute(self, handle: int, args_ptr, num_args: int) -> int:
        try:
            executor = self.handles[handle]
            executor.execute(args_ptr)
            return 0
        except ArgumentError as e:
            return self._fail(ERR_INVALID_ARGUMENT, "TensorRTBackend execute", e)
        except BaseException as e:  # noqa: BLE001
            return self._fail(ERR_INTERNAL, "TensorRTBackend execute", e)

    def _destroy(self, handle: int) -> None:
        with self.lock:
            self.handles.pop(handle, None)


_executors: PythonExecutors | None = None


def install() -> PythonExecutors:
    """Installs the Python executors once per process."""
    global _executors
    if _executors is None:
        executors = PythonExecutors()
        install_executor_table(executors.table)
        _executors = executors
    return _executors
