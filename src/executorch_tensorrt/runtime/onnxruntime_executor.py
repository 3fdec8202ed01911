"""Runs a partition's embedded ONNX model with onnxruntime on the CPU.

Used only when the caller allows the fallback (EXECUTORCH_TENSORRT_FALLBACK=
onnxruntime or the load-time backend option "fallback"). Reduced-precision
partitions run in fp32 here (onnx_upcast.py). Arguments in CUDA memory
(device-resident programs) are staged through host memory with the CUDA
driver API, which it says once on stderr.
"""
from __future__ import annotations

import ctypes
import sys
import threading

import numpy as np
import onnxruntime
import torch

from ..blob import Blob
from ..errors import ArgumentError, InvalidProgramError
from . import executor_table as abi
from .arguments import (
    SCALAR_TYPE_TO_TORCH, HostViews, check_args, checked_nbytes, resize_output, split_bindings)
from .cuda_probe import cuda_unavailable_reason
from .executors import Executor
from .onnx_safety import self_contained_onnx
from .onnx_upcast import upcast_to_fp32


class CudaStaging:
    """Copies CUDA arguments to and from host memory (CUDA driver API, primary context)."""

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
        c = ctypes
        # PyDLL: the copies keep the GIL. A CDLL call releases it, which lets a
        # second thread enter ExecuTorch's Method.execute mid-call (see
        # backend_callbacks.py).
        self.cuda = cuda = c.PyDLL("libcuda.so.1")
        for name, args in (("cuDeviceGet", [c.POINTER(c.c_int), c.c_int]),
                           ("cuDevicePrimaryCtxRetain", [c.POINTER(c.c_void_p), c.c_int]),
                           ("cuCtxPushCurrent_v2", [c.c_void_p]),
                           ("cuCtxPopCurrent_v2", [c.POINTER(c.c_void_p)]),
                           ("cuMemcpyDtoH_v2", [c.c_void_p, c.c_uint64, c.c_size_t]),
                           ("cuMemcpyHtoD_v2", [c.c_uint64, c.c_void_p, c.c_size_t])):
            fn = getattr(cuda, name)
            fn.argtypes, fn.restype = args, c.c_int
        self.contexts: dict[int, ctypes.c_void_p] = {}

    def _call(self, fn, *args) -> None:
        status = fn(*args)
        if status != 0:
            raise ArgumentError(f"{fn.__name__} failed with CUresult {status} while staging a "
                                "device-resident argument through host memory")

    def _copy(self, index: int, fn, *args) -> None:
        ctx = self.contexts.get(index)
        if ctx is None:
            dev, ctx = ctypes.c_int(0), ctypes.c_void_p()
            self._call(self.cuda.cuDeviceGet, ctypes.byref(dev), index)
            self._call(self.cuda.cuDevicePrimaryCtxRetain, ctypes.byref(ctx), dev.value)
            self.contexts[index] = ctx
        self._call(self.cuda.cuCtxPushCurrent_v2, ctx)
        try:
            self._call(fn, *args)
        finally:
            self.cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))

    def to_host(self, arg: abi.EtrtArg, shape) -> torch.Tensor:
        host = torch.empty(shape, dtype=SCALAR_TYPE_TO_TORCH[arg.dtype])
        if host.nbytes:
            self._copy(arg.device_index, self.cuda.cuMemcpyDtoH_v2, host.data_ptr(), arg.data,
                       host.nbytes)
        return host

    def to_device(self, arg: abi.EtrtArg, host: torch.Tensor) -> None:
        if host.nbytes:
            self._copy(arg.device_index, self.cuda.cuMemcpyHtoD_v2, arg.data, host.data_ptr(),
                       host.nbytes)


_NP_DTYPES = {torch.float32: np.float32, torch.float16: np.float16, torch.int32: np.int32,
              torch.int64: np.int64, torch.int8: np.int8, torch.uint8: np.uint8,
              torch.bool: np.bool_}


def new_session(model: bytes):
    """The onnxruntime session for a checked, self-contained model (from bytes:
    no path to resolve anything against). The one place a session is made."""
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


class OnnxRuntimeExecutor(Executor):
    kind = "onnxruntime"

    def __init__(self, blob: Blob):
        model = self_contained_onnx(blob)  # refuses external data before anything reads it
        self.inputs, self.outputs = split_bindings(blob.metadata)
        if blob.metadata.get("precision", "fp32") != "fp32":
            model = upcast_to_fp32(model)  # see onnx_upcast.py: the CPU lacks fp16 kernels
        self.session = new_session(model)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        if len(self.input_names) != len(self.inputs) or len(self.output_names) != len(self.outputs):
            raise InvalidProgramError(
                f"the embedded ONNX model has {len(self.input_names)} inputs and "
                f"{len(self.output_names)} outputs; the blob's io_bindings list "
                f"{len(self.inputs)} and {len(self.outputs)}")
        self.views = HostViews()
        # Outputs of fixed shape can be written by onnxruntime straight into
        # ExecuTorch's memory (IOBinding); bindings are cached per set of
        # addresses and input shapes, which memory planning keeps stable.
        # check_args has verified dtype, shape and byte capacity on every call.
        self.np_dtypes = [_NP_DTYPES.get(b.dtype) for b in self.inputs + self.outputs]
        self.zero_copy = all(self.np_dtypes) and all(
            b.shape is not None and -1 not in b.shape for b in self.outputs)
        self.io_bindings: dict[tuple, onnxruntime.IOBinding] = {}

    def close(self) -> None:
        self.io_bindings.clear()
        self.session = None

    def _bound(self, args, shapes) -> onnxruntime.IOBinding | None:
        n = len(self.inputs) + len(self.outputs)
        if any(args[k].device_type != abi.ETRT_DEVICE_CPU for k in range(n)):
            return None
        key = (tuple(args[k].data for k in range(n)), tuple(shapes))
        binding = self.io_bindings.get(key)
        if binding is None:
            binding = self.session.io_binding()
            for i, shape in enumerate(shapes):
                binding.bind_input(self.input_names[i], "cpu", 0, self.np_dtypes[i], shape,
                                   args[i].data)
            for j, out in enumerate(self.outputs):
                arg = args[len(self.inputs) + j]
                resize_output(arg, out.shape, out)
                binding.bind_output(self.output_names[j], "cpu", 0,
                                    self.np_dtypes[len(self.inputs) + j], out.shape, arg.data)
            if len(self.io_bindings) > 16:
                self.io_bindings.clear()
            self.io_bindings[key] = binding
        return binding

    def _host(self, arg: abi.EtrtArg, shape) -> torch.Tensor:
        if arg.device_type == abi.ETRT_DEVICE_CPU:
            return self.views.view(arg, shape)
        checked_nbytes(arg, shape, "CUDA ")
        return CudaStaging.get().to_host(arg, shape)

    def execute(self, args, num_args: int | None = None) -> None:
        if self.session is None:
            raise ArgumentError("this executor was closed (the delegate was destroyed)")
        shapes = check_args(args, len(args) if num_args is None else num_args,
                            self.inputs, self.outputs)
        if self.zero_copy:
            binding = self._bound(args, shapes)
            if binding is not None:
                self.session.run_with_iobinding(binding)
                return
        feeds = {self.input_names[i]: self._host(args[i], shape).numpy()
                 for i, shape in enumerate(shapes)}
        results = self.session.run(self.output_names, feeds)
        for j, result in enumerate(results):
            arg = args[len(self.inputs) + j]
            result = np.asarray(result)
            resize_output(arg, tuple(result.shape), self.outputs[j])
            if arg.device_type == abi.ETRT_DEVICE_CPU:
                np.copyto(self.views.view(arg, tuple(result.shape)).numpy(), result,
                          casting="same_kind")
                continue
            checked_nbytes(arg, tuple(result.shape), "CUDA ")
            host = torch.empty(result.shape, dtype=SCALAR_TYPE_TO_TORCH[arg.dtype])
            np.copyto(host.numpy(), result, casting="same_kind")
            CudaStaging.get().to_device(arg, host)
