"""TEST-ONLY, FAKE engine: the TensorRT executor of a C++ process over a
labelled stand-in for TensorRT's IExecutionContext, for the GPU machine (the
H200), where no TensorRT runs an engine.

Selected by EXECUTORCH_TENSORRT_TEST_STAND_IN=stand_in_engine (runtime/
testing.py; this folder on PYTHONPATH), never otherwise. Each partition with
two inputs and one output of one shape gets a TensorRTExecutor around a
BoundContext (CUDA graphs on, as create_context makes it) whose context binds
like TensorRT's and whose enqueue runs one real CUDA kernel, out = x + y, on
the stream it is given, reading and writing the bound addresses. Everything
else is real: ExecuTorch's Method::execute, the adapter, its CUDA-graph plan,
the executor's checks, staging, events and capture.

It says on stderr, once per call that reaches Python, `[stand-in] executor
entry N`: the C++ runner's log counts the Python entries. With
ETRT_RAW_LAUNCH_LIB (tools/gpu/raw_graph_launch.c built as a shared library)
it also times, right after the call that captured the graph, the same graph
exec launched from C (and, for host arguments, the copies alone and the
copies around the launch, as the plan makes them), in this process.
Needs torch (the stand-in's kernel); the runtime itself never imports it.
"""
from __future__ import annotations

import ctypes
import os
import sys

import numpy as np
import torch

from executorch_tensorrt.runtime.adapter import abi
from executorch_tensorrt.runtime.arguments import split_bindings
from executorch_tensorrt.runtime.cuda.device import chosen_device
from executorch_tensorrt.runtime.executor import native_plans_enabled
from executorch_tensorrt.runtime.tensorrt.context import BoundContext
from executorch_tensorrt.runtime.tensorrt.executor import TensorRTExecutor
from executorch_tensorrt.runtime.testing import executor_over_bound_context
from gpu_timing import best_us_per_call  # this folder (on PYTHONPATH with the stand-in)

RAW_ENV = "ETRT_RAW_LAUNCH_LIB"
RAW_CALLS = 20000


class AddContext:
    """FAKE IExecutionContext (labelled): out = x + y, one kernel per enqueue."""

    def __init__(self, inputs, output, shape) -> None:
        self.inputs, self.output, self.shape = inputs, output, tuple(shape)
        self.addresses: dict[str, int] = {}
        self._views = None

    def set_input_shape(self, name, shape) -> bool:
        return tuple(shape) == self.shape

    # Every method the runtime calls on TensorRT's context, with its arity
    # (tests/runtime/tensorrt/test_tensorrt_api.py): one profile, no scratch.
    def set_optimization_profile_async(self, profile_index, stream_handle) -> bool:
        return profile_index == 0

    def set_device_memory(self, memory, size) -> None:
        self.device_memory = memory

    def get_tensor_shape(self, name):
        return self.shape

    def set_tensor_address(self, name, address) -> bool:
        self.addresses[name] = address
        self._views = None
        return True

    def execute_async_v3(self, stream: int) -> bool:
        if self._views is None:  # made at the first (plain) enqueue, outside captures
            self._views = [self._view(self.addresses[n]) for n in (*self.inputs, self.output)]
        x, y, out = self._views
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            torch.add(x, y, out=out)
        return True

    def _view(self, address: int) -> torch.Tensor:
        shape = self.shape

        class Raw:
            __cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "version": 2,
                                        "data": (address, False), "strides": None}
        return torch.as_tensor(Raw(), device="cuda")


def raw_peers(executor: TensorRTExecutor, host: bool) -> None:
    """The peers of the plan, on its graph exec and stream, from C."""
    lib = ctypes.CDLL(os.environ[RAW_ENV])
    lib.raw_graph_launch.restype = lib.raw_host_io.restype = ctypes.c_int64
    lib.raw_graph_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
    bound = executor.bound
    exec_, stream = bound.graph.exec, bound.stream.handle
    launch_us = best_us_per_call(lambda n: lib.raw_graph_launch(exec_, stream, n), RAW_CALLS)
    lines = [f"raw cuGraphLaunch (C): {launch_us:.2f} us/call"]
    if host:  # pageable host buffers and device buffers of the call's sizes
        shape = bound.context.shape
        hx, hy, hout = (np.zeros(shape, np.float32) for _ in range(3))
        dx, dy, dout = (torch.zeros(shape, device="cuda") for _ in range(3))
        lib.raw_host_io.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_void_p] * 6 + [
            ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int]
        ptrs = (dx.data_ptr(), hx.ctypes.data, dy.data_ptr(), hy.ctypes.data,
                hout.ctypes.data, dout.data_ptr())
        for launch, what in ((0, "copies alone (2 HtoD, 1 DtoH, sync)"),
                             (1, "copies + cuGraphLaunch + sync (C)")):
            us = best_us_per_call(lambda n: lib.raw_host_io(exec_, stream, *ptrs, hx.nbytes, n, launch),
                        RAW_CALLS)
            lines.append(f"raw {what}: {us:.2f} us/call")
    for line in lines:
        print(f"[stand-in] {line}", file=sys.stderr, flush=True)


class CountedEntries:
    """The executor's execute, saying each entry on stderr."""

    def __init__(self, executor: TensorRTExecutor) -> None:
        self.executor, self.count, self._execute = executor, 0, executor.execute
        self.raw_done = False

    def __call__(self, args, num_args=None) -> None:
        self.count += 1
        print(f"[stand-in] executor entry {self.count}", file=sys.stderr, flush=True)
        self._execute(args, num_args)
        if (os.environ.get(RAW_ENV) and not self.raw_done
                and self.executor.bound.last_graph_call is not None):
            self.raw_done = True
            n = len(args) if num_args is None else num_args
            raw_peers(self.executor, host=any(args[k].device_type == abi.ETRT_DEVICE_CPU for k in range(n)))


def tensorrt_executor(blob, named_data, device):
    """choose.py's factory: the TensorRT executor over the stand-in."""
    inputs, outputs = split_bindings(blob.meta)
    shapes = {tuple(b.shape) for b in inputs + outputs}
    if len(inputs) != 2 or len(outputs) != 1 or len(shapes) != 1:
        raise ValueError("the stand-in engine runs partitions of two inputs and one output of "
                         f"one shape (out = x + y); this one has {len(inputs)} inputs, "
                         f"{len(outputs)} outputs, shapes {sorted(shapes)}")
    gpu = chosen_device(blob.meta, device)
    torch.cuda.set_device(gpu)
    context = AddContext([b.name for b in inputs], outputs[0].name, shapes.pop())
    bound = BoundContext(context, inputs, outputs, gpu, graphs=True)
    executor = executor_over_bound_context(bound)
    executor.publish_plans = native_plans_enabled()  # EXECUTORCH_TENSORRT_NATIVE_PLAN, as loaded
    executor.inputs, executor.outputs = inputs, outputs
    executor.execute = CountedEntries(executor)
    return executor
