"""Why CUDA is or is not usable here, asked of the CUDA driver itself.

Through driver.py's binding, loaded at run time, so CPU machines import
the package fine.
"""
from __future__ import annotations

import ctypes
import functools

from .driver import driver


@functools.lru_cache(maxsize=None)
def cuda_unavailable_reason() -> str | None:
    """None when the driver reports at least one GPU, else the cause."""
    try:
        cuda = driver()
    except OSError as e:
        return (f"no CUDA driver (libcuda.so.1 cannot be loaded: {e}); TensorRT engines need "
                "an NVIDIA GPU and its driver")
    status = cuda.cuInit(0)
    if status != 0:
        return (f"the CUDA driver failed to initialise (CUresult {status}); TensorRT engines "
                "need a working NVIDIA GPU")
    count = ctypes.c_int(0)
    status = cuda.cuDeviceGetCount(ctypes.byref(count))
    if status != 0 or count.value == 0:
        return "the CUDA driver reports no GPU; TensorRT engines need an NVIDIA GPU"
    return None
