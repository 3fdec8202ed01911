"""The CUDA driver calls the TensorRT path makes itself, through ctypes
(GPU-only; the calls below ran on a GPU through the graph tests when torch
made them, see docs/gpu-runtime.md).

The runtime does not import torch (docs/cpp.md: a C++ process embedding it
starts in a fraction of the time), so device buffers, streams, events and
graph captures are these few driver calls; TensorRT's Python API takes their
integer handles. Called through ctypes.PyDLL, so the GIL stays held
(runtime/callbacks.py says why executors keep it), and a call costs about a
microsecond. These are also the calls a native plan would make from C++
(docs/concurrency.md). objects.py wraps them in small owning classes.
"""
from __future__ import annotations

import ctypes
import functools

__all__ = ["CudaError", "check", "driver"]

_c = ctypes
_P = _c.POINTER
# name -> argtypes; every function returns a CUresult.
_SIGNATURES = {
    "cuInit": [_c.c_uint],
    "cuDriverGetVersion": [_P(_c.c_int)],
    "cuDeviceGet": [_P(_c.c_int), _c.c_int],
    "cuDeviceGetCount": [_P(_c.c_int)],
    "cuDeviceGetName": [_c.c_char_p, _c.c_int, _c.c_int],
    "cuDeviceGetAttribute": [_P(_c.c_int), _c.c_int, _c.c_int],
    "cuDevicePrimaryCtxRetain": [_P(_c.c_void_p), _c.c_int],
    "cuCtxGetCurrent": [_P(_c.c_void_p)],
    "cuCtxSetCurrent": [_c.c_void_p],
    "cuCtxSynchronize": [],
    "cuStreamCreate": [_P(_c.c_void_p), _c.c_uint],
    "cuStreamDestroy_v2": [_c.c_void_p],
    "cuStreamSynchronize": [_c.c_void_p],
    "cuStreamQuery": [_c.c_void_p],
    "cuStreamWaitEvent": [_c.c_void_p, _c.c_void_p, _c.c_uint],
    "cuEventCreate": [_P(_c.c_void_p), _c.c_uint],
    "cuEventRecord": [_c.c_void_p, _c.c_void_p],
    "cuEventDestroy_v2": [_c.c_void_p],
    "cuMemGetInfo_v2": [_P(_c.c_size_t), _P(_c.c_size_t)],
    "cuMemAlloc_v2": [_P(_c.c_uint64), _c.c_size_t],
    "cuMemFree_v2": [_c.c_uint64],
    "cuMemAllocAsync": [_P(_c.c_uint64), _c.c_size_t, _c.c_void_p],
    "cuMemFreeAsync": [_c.c_uint64, _c.c_void_p],
    "cuMemcpyHtoD_v2": [_c.c_uint64, _c.c_void_p, _c.c_size_t],
    "cuMemcpyDtoH_v2": [_c.c_void_p, _c.c_uint64, _c.c_size_t],
    "cuMemcpyHtoDAsync_v2": [_c.c_uint64, _c.c_void_p, _c.c_size_t, _c.c_void_p],
    "cuMemcpyDtoHAsync_v2": [_c.c_void_p, _c.c_uint64, _c.c_size_t, _c.c_void_p],
    "cuMemcpyDtoDAsync_v2": [_c.c_uint64, _c.c_uint64, _c.c_size_t, _c.c_void_p],
    "cuStreamBeginCapture_v2": [_c.c_void_p, _c.c_int],
    "cuStreamEndCapture": [_c.c_void_p, _P(_c.c_void_p)],
    "cuGraphInstantiateWithFlags": [_P(_c.c_void_p), _c.c_void_p, _c.c_ulonglong],
    "cuGraphLaunch": [_c.c_void_p, _c.c_void_p],
    "cuGraphExecDestroy": [_c.c_void_p],
    "cuGraphDestroy": [_c.c_void_p],
}
CUDA_ERROR_NOT_READY = 600
CUDA_ERROR_NOT_SUPPORTED = 801


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the CUresult."""


@functools.lru_cache(maxsize=None)
def driver() -> ctypes.PyDLL:
    """libcuda.so.1 with the signatures above (OSError without a driver)."""
    lib = ctypes.PyDLL("libcuda.so.1")
    for name, argtypes in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return lib


def check(status: int, what: str) -> None:
    """Raises CudaError unless `status` is CUDA_SUCCESS; `what` names the call's purpose."""
    if status != 0:
        raise CudaError(f"{what} failed (CUresult {status})")


def mem_get_info() -> tuple[int, int]:
    """(free, total) bytes of the current context's GPU (CudaError without one)."""
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    check(driver().cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
    return free.value, total.value
