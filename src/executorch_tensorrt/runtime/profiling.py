"""Stage and node timings of one execute call, sent to ETDump (docs/profiling.md).

The adapter attaches ExecuTorch's event tracer to the thread that runs an
executor's execute (native/include/executorch_tensorrt/profiling.h); when the
caller did not enable ETDump there is none and `begin_call()` returns None, so
an unprofiled call pays one foreign call. Event names are the keys of the
delegate's debug_handle_map (aot/debug_handles.py), which is how Inspector
maps them back to the exported graph's nodes.

Timestamps are ExecuTorch ticks. On Linux the PAL's ticks are nanoseconds of
std::chrono::steady_clock (CLOCK_MONOTONIC, Python's time.monotonic_ns())
counted from the PAL's first use, so executors time with time.monotonic_ns()
and the recorder adds the constant offset to ticks, measured once through
etrt_current_ticks (the PAL of the libexecutorch.so the tracer uses).
"""
from __future__ import annotations

import ctypes
import os
import time
from typing import Optional

PROFILE_NODES_ENV = "EXECUTORCH_TENSORRT_PROFILE_NODES"
_STAGES = 1  # ETRT_PROFILE_STAGES

now = time.monotonic_ns

# Stage names per executor: also the debug_handle_map keys written at export.
ONNXRUNTIME_STAGES = ("check+bind", "run", "copy out")
TENSORRT_STAGES = ("bind", "enqueue", "copies", "wait")
STAGE_NAMES = ONNXRUNTIME_STAGES + TENSORRT_STAGES

_functions: Optional[tuple] = None


def _adapter_functions() -> tuple:
    """(etrt_profiling_flags, etrt_log_event, tick offset), called through
    PyDLL: the GIL stays held (runtime/callbacks.py says why executors must
    keep it). Without the adapter (executors used directly), profiling is off."""
    global _functions
    if _functions is None:
        from .adapter.loader import load_adapter

        try:
            loaded = load_adapter()
        except ImportError:  # executors used without the adapter: nobody traces
            _functions = (lambda: 0, None, 0)
            return _functions
        lib = ctypes.PyDLL(loaded._name)  # the same library, calls keep the GIL
        flags = lib.etrt_profiling_flags
        flags.restype, flags.argtypes = ctypes.c_uint32, []
        log = lib.etrt_log_event
        log.restype = ctypes.c_int32
        log.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint64]
        ticks = lib.etrt_current_ticks
        ticks.restype, ticks.argtypes = ctypes.c_uint64, []
        before = now()
        tick = ticks()
        offset = tick - (before + now()) // 2  # ticks = monotonic ns + offset
        _functions = (flags, log, offset)
    return _functions


def nodes_requested() -> bool:
    """Per-node profiling costs time (onnxruntime re-creates its session after
    every profiled call); it is on only when asked, at executor creation."""
    return os.environ.get(PROFILE_NODES_ENV, "") == "1"


class CallRecorder:
    """Sends one call's events to the tracer the adapter attached."""

    __slots__ = ("_log", "_offset")

    def __init__(self, log, offset: int) -> None:
        self._log = log
        self._offset = offset

    def event(self, name: str, start_ns: int, end_ns: int) -> None:
        """An event timed with now() (time.monotonic_ns)."""
        start = max(start_ns + self._offset, 0)
        self._log(name.encode("utf-8", errors="replace"), start,
                  max(end_ns + self._offset, start))


def begin_call() -> Optional[CallRecorder]:
    """A recorder if this execute call is traced (ETDump on), else None."""
    flags, log, offset = _adapter_functions()
    if not flags() & _STAGES:
        return None
    return CallRecorder(log, offset)
