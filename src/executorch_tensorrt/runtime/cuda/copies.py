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

__all__ = ["copy_device", "cuda_positions"]


def cuda_positions(arg: abi.EtrtArg, count: int) -> np.ndarray:
    """A host copy of `count` int64 positions held in CUDA memory (a few bytes)."""
    host = np.empty(count, dtype=np.int64)
    if count:
        status = driver().cuMemcpyDtoH_v2(host.ctypes.data, arg.data, host.nbytes)
        if status != 0:
            raise ArgumentError(f"copying the cache positions from CUDA memory failed "
                                f"(CUresult {status})")
    return host


def copy_device(dst: int, src: int, nbytes: int, stream: Stream) -> None:
    """A device-to-device copy queued on `stream` (TR02's aliased output slot)."""
    status = driver().cuMemcpyDtoDAsync_v2(dst, src, nbytes, stream.handle)
    if status != 0:
        raise ArgumentError(f"copying an aliased output on the device failed (CUresult {status})")
