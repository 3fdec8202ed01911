"""Devices, streams, events and device buffers for the TensorRT path, over
the CUDA driver (driver.py) instead of torch.cuda (docs/cpp.md says why).

GPU-only: the GPU tests (tests/runtime/tensorrt/test_tensorrt_*_gpu.py) exercise it
with a labelled stand-in for TensorRT's execution context.

Everything runs in each device's primary context, the one the CUDA runtime
(and so TensorRT, and torch when the process has it) uses; `make_current`
sets it on the calling thread, since ExecuTorch may call from any thread.
"""
from __future__ import annotations

import ctypes
import sys
import threading

from .driver import CUDA_ERROR_NOT_READY, CUDA_ERROR_NOT_SUPPORTED, check, driver

__all__ = ["DeviceBuffer", "Event", "Stream", "caller_stream", "device_capability",
           "device_count", "device_name", "make_current"]

_STREAM_NON_BLOCKING = 1  # no implicit sync with the legacy default stream: events order it
_EVENT_DISABLE_TIMING = 2
_ATTR_CC_MAJOR, _ATTR_CC_MINOR = 75, 76

_contexts: dict[int, int] = {}  # device index -> its retained primary context
_contexts_lock = threading.Lock()


def _primary_context(index: int) -> int:
    ctx = _contexts.get(index)
    if ctx is None:
        with _contexts_lock:
            lib = driver()
            check(lib.cuInit(0), "initialising the CUDA driver")
            dev, handle = ctypes.c_int(0), ctypes.c_void_p()
            check(lib.cuDeviceGet(ctypes.byref(dev), index), f"opening CUDA device {index}")
            check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(handle), dev.value),
                  f"retaining CUDA device {index}'s primary context")
            ctx = _contexts.setdefault(index, handle.value)  # retained for the process
    return ctx


def primary_context(index: int) -> int:
    """Device `index`'s retained primary context (a CUcontext handle)."""
    return _primary_context(index)


def make_current(index: int) -> None:
    """Makes device `index`'s primary context current on this thread."""
    ctx = _primary_context(index)
    lib = driver()
    current = ctypes.c_void_p()
    if lib.cuCtxGetCurrent(ctypes.byref(current)) != 0 or current.value != ctx:
        check(lib.cuCtxSetCurrent(ctx), f"making CUDA device {index} current")


def device_count() -> int:
    lib = driver()
    check(lib.cuInit(0), "initialising the CUDA driver")
    count = ctypes.c_int(0)
    check(lib.cuDeviceGetCount(ctypes.byref(count)), "counting CUDA devices")
    return count.value


def device_name(index: int) -> str:
    _primary_context(index)  # initialises the driver, checks the index
    name = ctypes.create_string_buffer(256)
    check(driver().cuDeviceGetName(name, len(name), index), f"naming CUDA device {index}")
    return name.value.decode(errors="replace")


def device_capability(index: int) -> tuple[int, int]:
    _primary_context(index)
    values = []
    for attribute in (_ATTR_CC_MAJOR, _ATTR_CC_MINOR):
        value = ctypes.c_int(0)
        check(driver().cuDeviceGetAttribute(ctypes.byref(value), attribute, index),
              f"reading CUDA device {index}'s compute capability")
        values.append(value.value)
    return values[0], values[1]


def caller_stream(index: int) -> int:
    """The stream a call's CUDA arguments come from: torch's current stream
    when this process already uses torch's CUDA (a Python caller may have
    chosen one), else the default stream (0), the only one ExecuTorch's C++
    callers have. torch is looked up, never imported."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return torch.cuda.current_stream(index).cuda_stream
    return 0


class Stream:
    """A CUDA stream of one device (non-blocking: ordered by events only)."""

    __slots__ = ("handle", "device", "__weakref__")

    def __init__(self, device: int) -> None:
        self.handle, self.device = None, device
        make_current(device)
        handle = ctypes.c_void_p()
        check(driver().cuStreamCreate(ctypes.byref(handle), _STREAM_NON_BLOCKING),
              "creating a CUDA stream")
        self.handle = handle.value

    def synchronize(self) -> None:
        check(driver().cuStreamSynchronize(self.handle), "waiting for a CUDA stream")

    def query(self) -> bool:
        """True when everything queued on the stream has finished."""
        status = driver().cuStreamQuery(self.handle)
        if status == CUDA_ERROR_NOT_READY:
            return False
        check(status, "querying a CUDA stream")
        return True

    def wait(self, event: "Event") -> None:
        """Work queued here later runs after `event`."""
        check(driver().cuStreamWaitEvent(self.handle, event.handle, 0),
              "ordering a CUDA stream after an event")

    def __del__(self) -> None:
        try:  # the driver releases it once its queued work is done
            if self.handle:
                driver().cuStreamDestroy_v2(self.handle)
        except Exception:  # noqa: BLE001 - finalizers must not raise (interpreter exit)
            pass
        # A buffer still pointing here (both garbage in one cycle, finalized in
        # any order) must see that the stream is gone, not free on a dead handle.
        self.handle = None


class Event:
    """A CUDA event of one device (no timing), recorded on a stream handle."""

    __slots__ = ("handle",)

    def __init__(self, device: int) -> None:
        self.handle = None
        make_current(device)
        handle = ctypes.c_void_p()
        check(driver().cuEventCreate(ctypes.byref(handle), _EVENT_DISABLE_TIMING),
              "creating a CUDA event")
        self.handle = handle.value

    def record(self, stream: int) -> None:
        check(driver().cuEventRecord(self.handle, stream), "recording a CUDA event")

    def __del__(self) -> None:
        try:
            if self.handle:
                driver().cuEventDestroy_v2(self.handle)
        except Exception:  # noqa: BLE001 - finalizers must not raise
            pass


class DeviceBuffer:
    """`nbytes` of device memory. With a stream it is stream-ordered, as
    torch's allocator was: allocated for use on that stream and, when
    dropped, freed there, after the work already queued on it. Without one,
    it is allocated at once and freed after the device is idle (state
    buffers, used by one context's stream for the executor's life)."""

    __slots__ = ("address", "nbytes", "device", "stream", "_ordered")

    def __init__(self, nbytes: int, device: int, stream: Stream | None = None) -> None:
        self.address, self.nbytes, self.device, self.stream = 0, nbytes, device, stream
        self._ordered = False
        make_current(device)
        lib, address = driver(), ctypes.c_uint64(0)
        if stream is not None:
            status = lib.cuMemAllocAsync(ctypes.byref(address), max(nbytes, 1), stream.handle)
            self._ordered = status != CUDA_ERROR_NOT_SUPPORTED  # no memory pools: plain alloc
            if self._ordered:
                check(status, f"allocating {nbytes} bytes of CUDA memory")
        if not self._ordered:
            check(lib.cuMemAlloc_v2(ctypes.byref(address), max(nbytes, 1)),
                  f"allocating {nbytes} bytes of CUDA memory")
        self.address = address.value

    def __del__(self) -> None:
        if not self.address:
            return
        try:
            make_current(self.device)
            lib = driver()
            if self._ordered and self.stream.handle:
                lib.cuMemFreeAsync(self.address, self.stream.handle)
            else:  # also stream-ordered memory whose stream was finalized first
                lib.cuCtxSynchronize()  # queued work may still use it
                lib.cuMemFree_v2(self.address)
        except Exception:  # noqa: BLE001 - finalizers must not raise (interpreter exit)
            pass
        self.address = 0
