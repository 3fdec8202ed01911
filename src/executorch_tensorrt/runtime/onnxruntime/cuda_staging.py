"""Host staging of device-resident arguments for the onnxruntime fallback,
which runs on the host: each CUDA argument is copied to host memory before
the call and each CUDA output back after it, with the CUDA driver
(runtime/cuda/) in the device's primary context. Said once on stderr.
"""
from __future__ import annotations

import sys
import threading

import numpy as np

from ...errors import ArgumentError
from ..adapter import abi
from ..arguments import SCALAR_TYPE_TO_NUMPY
from ..cuda.driver import CudaError, driver
from ..cuda.objects import make_current
from ..cuda.probe import cuda_unavailable_reason

__all__ = ["CudaStaging"]


class CudaStaging:
    """Copies CUDA arguments to and from host memory (runtime/cuda/, primary context)."""

    _instance: "CudaStaging | None" = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> "CudaStaging":
        with cls._lock:
            if cls._instance is None:
                reason = cuda_unavailable_reason()
                if reason is not None:
                    raise ArgumentError(
                        "this argument is in CUDA memory (a device-resident program); the "
                        "onnxruntime fallback runs on the host and copies it through host memory "
                        f"with CUDA, but CUDA is not usable here: {reason}")
                cls._instance = cls()
                print("[executorch_tensorrt] onnxruntime fallback: arguments in CUDA memory "
                      "(device-resident program) are copied through host memory on every call",
                      file=sys.stderr, flush=True)
            return cls._instance

    def __init__(self) -> None:
        self.cuda = driver()

    def _copy(self, index: int, fn, *args) -> None:
        try:
            make_current(index)  # the device's primary context, where its memory lives
        except CudaError as e:
            raise ArgumentError(f"{e} while staging a device-resident argument through host "
                                "memory") from None
        status = fn(*args)
        if status != 0:
            raise ArgumentError(f"{fn.__name__} failed with CUresult {status} while staging a "
                                "device-resident argument through host memory")

    def to_host(self, arg: abi.EtrtArg, shape) -> np.ndarray:
        host = np.empty(shape, dtype=SCALAR_TYPE_TO_NUMPY[arg.dtype])
        if host.nbytes:
            self._copy(arg.device_index, self.cuda.cuMemcpyDtoH_v2, host.ctypes.data, arg.data,
                       host.nbytes)
        return host

    def to_device(self, arg: abi.EtrtArg, host: np.ndarray) -> None:
        if host.nbytes:
            self._copy(arg.device_index, self.cuda.cuMemcpyHtoD_v2, arg.data, host.ctypes.data,
                       host.nbytes)
