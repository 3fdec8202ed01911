"""Small device copies the TensorRT executor's state handling queues or
blocks on: reading cache positions held in CUDA memory to check them, and
the device-to-device copy that fills a TR02 aliased output slot.

CUDA-generic (over the driver, not TensorRT), hence here; GPU-only.
"""
from __future__ import annotations

import numpy as np

from ...errors import ArgumentError
from ..adapter import abi
from .driver import driver
from .objects import Stream

__all__ = ["copy_device", "cuda_positions", "cuda_values"]


def cuda_positions(arg: abi.EtrtArg, count: int) -> np.ndarray:
    """A host copy of `count` int64 positions held in CUDA memory (a few bytes)."""
    host = np.empty(count, dtype=np.int64)
    if count:
        status = driver().cuMemcpyDtoH_v2(host.ctypes.data, arg.data, host.nbytes)
        if status != 0:
            raise ArgumentError(f"copying the cache positions from CUDA memory failed "
                                f"(CUresult {status})")
    return host


def cuda_values(arg: abi.EtrtArg, shape, dtype: np.dtype, after_stream: int) -> np.ndarray:
    """A host copy of a (small) CUDA input, as its bytes lie, read once the
    work queued on `after_stream` (the caller's, which may write it) is done:
    the value checks of input_checks.py for device-resident index inputs."""
    host = np.empty(shape, dtype=dtype)
    if host.nbytes:
        lib = driver()
        status = lib.cuStreamSynchronize(after_stream)
        if status == 0:
            status = lib.cuMemcpyDtoH_v2(host.ctypes.data, arg.data, host.nbytes)
        if status != 0:
            raise ArgumentError(f"copying an index input from CUDA memory to check its values "
                                f"failed (CUresult {status})")
    return host


def copy_device(dst: int, src: int, nbytes: int, stream: Stream) -> None:
    """A device-to-device copy queued on `stream` (TR02's aliased output slot)."""
    status = driver().cuMemcpyDtoDAsync_v2(dst, src, nbytes, stream.handle)
    if status != 0:
        raise ArgumentError(f"copying an aliased output on the device failed (CUresult {status})")
