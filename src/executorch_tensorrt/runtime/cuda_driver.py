"""The few CUDA driver calls the per-call path makes itself (GPU-only; ran
on the H200 through the graph tests).

Called through ctypes.PyDLL, so the GIL stays held (backend_callbacks.py says
why executors keep it), and without torch's per-call Python: entering a torch
stream context to replay a graph on a given stream costs ~10 us on the H200,
a driver launch about a microsecond. These are also the calls a native plan
would make from C++ (docs/concurrency.md).
"""
from __future__ import annotations

import ctypes
import functools

__all__ = ["driver", "graph_launcher"]


@functools.lru_cache(maxsize=None)
def graph_launcher():
    """cuGraphLaunch(exec, stream) -> CUresult, or None without the driver."""
    try:
        launch = ctypes.PyDLL("libcuda.so.1").cuGraphLaunch
    except (OSError, AttributeError):
        return None
    launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    launch.restype = ctypes.c_int
    return launch


@functools.lru_cache(maxsize=None)
def driver() -> ctypes.PyDLL:
    """libcuda with the copies the state path makes (runtime/state.py): the
    blocking cuMemcpyDtoH_v2 and cuMemcpyDtoDAsync_v2 on a given stream. The
    TensorRT executor has made the device's primary context current (torch)."""
    lib = ctypes.PyDLL("libcuda.so.1")
    c = ctypes
    lib.cuMemcpyDtoH_v2.argtypes = [c.c_void_p, c.c_uint64, c.c_size_t]
    lib.cuMemcpyDtoDAsync_v2.argtypes = [c.c_uint64, c.c_uint64, c.c_size_t, c.c_void_p]
    lib.cuMemcpyDtoH_v2.restype = lib.cuMemcpyDtoDAsync_v2.restype = c.c_int
    return lib
