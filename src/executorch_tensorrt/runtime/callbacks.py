"""The backend's callbacks, installed into the adapter's executor table on import.

init reads the blob and takes the first executor that can run it
(choose.create_executor); execute and destroy forward to it; native_plan
hands the adapter the executor's plan for the call just made, so identical
later calls run in C++ without entering Python (executor_table.h, "Native
plans"). Every callback
catches everything: an exception in a ctypes callback never reaches ExecuTorch,
so the cause is recorded (last_error) and the ExecuTorch Error code the
exception's class carries (errors.error_code) is returned.

Executors must hold the GIL for the whole execute callback. ExecuTorch's
Python Method.execute swaps std::cout's buffer for a Python one for the call
(pybind11's ostream redirect) and restores it on return; if an executor
releases the GIL, another thread enters Method.execute, the swaps interleave,
and std::cout is left pointing at a destroyed buffer: the process then dies
with SIGSEGV in std::ios_base::Init::~Init at exit. onnxruntime's Python run()
releases the GIL (runtime/onnxruntime/capi.py holds it), as do CDLL calls (CudaStaging
uses PyDLL) and many torch operations (the TensorRT executor's copies and
stream synchronization).
"""
from __future__ import annotations

import atexit
import ctypes
import itertools
import threading
import traceback

from ..blob import read_blob
from ..errors import ET_INTERNAL, ExecuTorchTensorRTError, error_code
from .adapter import abi
from . import state
from .adapter.loader import install_executor_table, set_last_error
from .choose import create_executor
from .executor import Executor
from .named_data import AdapterNamedData

__all__ = ["PythonExecutors", "install"]


def _record(what: str, error: BaseException) -> int:
    """Records the cause for last_error() and returns the error's ExecuTorch code;
    an exception this package did not anticipate keeps its traceback."""
    code = error_code(error)
    detail = str(error) or type(error).__name__
    if not isinstance(error, ExecuTorchTensorRTError) or code == ET_INTERNAL:
        detail = f"{type(error).__name__}: {detail}\n{traceback.format_exc()}"
    try:
        set_last_error(f"{what}: {detail}")
    except BaseException:  # noqa: BLE001 - never raise from a callback
        pass
    return code


class PythonExecutors:
    """Owns the executors by handle, and the ctypes table (which must outlive
    installation)."""

    def __init__(self) -> None:
        self.handles: dict[int, Executor] = {}
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.table = abi.make_table(self._is_available, self._init, self._execute,
                                               self._destroy, self._native_plan)

    def _is_available(self) -> int:
        return 1

    def _init(self, args_ptr, handle_ptr, nin_ptr, nout_ptr) -> int:
        try:
            args = args_ptr.contents
            blob = read_blob(args.blob_bytes())
            fallback = args.fallback.decode() if args.fallback else None
            named_data = AdapterNamedData(args) if args.has_named_data() else None
            executor = create_executor(blob, fallback, named_data, device=args.device_option())
            state.register(getattr(executor, "state", None),  # for reset_state(method)
                           args.method_name.decode() if args.method_name else None)
            with self.lock:
                handle = next(self.ids)
                self.handles[handle] = executor
            handle_ptr[0] = handle
            nin_ptr[0] = len(executor.inputs)
            nout_ptr[0] = len(executor.outputs)
            return 0
        except BaseException as e:  # noqa: BLE001
            return _record("TensorRTBackend init", e)

    def _execute(self, handle: int, args_ptr, num_args: int) -> int:
        try:
            executor = self.handles.get(handle)
            if executor is None:
                raise KeyError(f"no executor with handle {handle} (destroyed, or closed at exit)")
            executor.execute(args_ptr, num_args)
            return 0
        except BaseException as e:  # noqa: BLE001
            return _record("TensorRTBackend execute", e)

    def _native_plan(self, handle: int, plan_ptr) -> int:
        try:
            executor = self.handles.get(handle)
            plan = executor.native_plan() if executor is not None else None
            plan_ptr[0] = ctypes.pointer(plan) if plan is not None else None
            return 0
        except BaseException as e:  # noqa: BLE001
            return _record("TensorRTBackend native_plan", e)

    def _destroy(self, handle: int) -> None:
        try:
            with self.lock:
                executor = self.handles.pop(handle, None)
            if executor is not None:
                executor.close()
        except BaseException as e:  # noqa: BLE001
            _record("TensorRTBackend destroy", e)

    def live_executors(self) -> list[Executor]:
        """The executors of the delegates loaded now (benchmarks read their counters)."""
        with self.lock:
            return list(self.handles.values())

    def close_all(self) -> None:
        """Closes every executor (at interpreter exit: sessions and engines are
        released while Python and their libraries are still whole)."""
        with self.lock:
            executors, self.handles = list(self.handles.values()), {}
        for executor in executors:
            try:
                executor.withdraw_native_plan()  # outside destroy: the adapter may still hold it
                executor.close()
            except BaseException:  # noqa: BLE001 - exiting anyway
                pass


_executors: PythonExecutors | None = None


def install() -> PythonExecutors:
    """Installs the Python executors once per process."""
    global _executors
    if _executors is None:
        executors = PythonExecutors()
        install_executor_table(executors.table)
        atexit.register(executors.close_all)
        _executors = executors
    return _executors
