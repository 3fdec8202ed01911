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

__all__ = ["graph_launcher"]


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
