"""Runs a partition's TensorRT engine on an NVIDIA GPU.

No machine this project is tested on can execute a TensorRT engine, so this
stays thin: the CUDA driver is asked first, an engine from another TensorRT
or for another GPU is rebuilt from the embedded ONNX (engine_portability.py)
or refused with the real cause, and argument handling is shared with the
onnxruntime executor (arguments.py).
"""
from __future__ import annotations

import dataclasses
import math

import torch

from ..blob import Blob
from ..errors import (
    ArgumentError, EngineUnavailable, InvalidProgramError, RebuildImpossible,
    TensorRTNotInstalledError)
from ..tensorrt.flavor import collecting_logger, load_tensorrt
from . import executor_table as abi
from . import profiling
from .arguments import (
    SCALAR_TYPE_TO_TORCH, Binding, HostViews, check_args, checked_nbytes, resize_output,
    split_bindings)
from .cuda_probe import cuda_unavailable_reason
from .engine_portability import built_here, rebuilt_engine
from .executors import Executor
from .state import DeviceState, aliased_pairs, copy_device, cuda_positions, state_specs
from .tensorrt_profiling import attach_layer_profiler

__all__ = ["BoundContext", "EngineUnavailable", "TensorRTExecutor"]


def cuda_device_or_raise(device_id: int) -> torch.device:
    reason = cuda_unavailable_reason()
    if reason is not None:
        raise EngineUnavailable(reason)
    if not torch.cuda.is_available():
        raise EngineUnavailable(
            "this PyTorch build has no CUDA support (the TensorRT executor uses it for device "
            "buffers and streams); install a CUDA build of PyTorch")
    if device_id >= torch.cuda.device_count():
        raise EngineUnavailable(f"the engine is for CUDA device {device_id}, but only "
                                f"{torch.cuda.device_count()} device(s) exist")
    return torch.device("cuda", device_id)


def device_capability(device: torch.device) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return f"SM{major}{minor}"


def engine_for_this_gpu(blob: Blob, trt, device: torch.device) -> bytes:
    """The blob's engine, or one rebuilt from its ONNX for this TensorRT and GPU."""
    here = device_capability(device)
    if built_here(blob, trt, here):
        return blob.engine
    meta = blob.metadata
    built = meta.get("compute_capabilities")
    if built == "all":
        built = [k for k in trt.module.ComputeCapability.__members__ if k.startswith("SM")]
    was = (f"{meta.get('trt_flavor')} {meta.get('trt_version')} for "
           f"{', '.join(built) if isinstance(built, list) and built else 'its GPU'}")
    try:
        return rebuilt_engine(blob, trt, here)
    except RebuildImpossible as e:
        raise EngineUnavailable(
            f"the engine was built with {was}, and this GPU ({torch.cuda.get_device_name(device)})"
            f" is {here}, compute capability {here[2:-1]}.{here[-1]}, with {trt.flavor} "
            f"{trt.version} here; rebuilding it from the embedded ONNX failed: {e}") from None


def engine_binding(trt, engine, binding: Binding) -> Binding:
    """The blob's binding, checked against the engine's own tensor of that name
    (the blob's metadata and engine are both untrusted): direction, dtype and
    rank must agree; a dtype the blob left open is taken from the engine."""
    m = trt.module
    names = {engine.get_tensor_name(i) for i in range(engine.num_io_tensors)}
    if binding.name not in names:
        raise InvalidProgramError(f"the blob names binding {binding.name!r}, which the engine "
                                  f"does not have (it has {sorted(names)})")
    is_input = engine.get_tensor_mode(binding.name) == m.TensorIOMode.INPUT
    to_torch = {m.DataType.FLOAT: torch.float32, m.DataType.HALF: torch.float16,
                m.DataType.INT8: torch.int8, m.DataType.INT32: torch.int32,
                m.DataType.BOOL: torch.bool, m.DataType.UINT8: torch.uint8}
    for name, dtype in (("BF16", torch.bfloat16), ("INT64", torch.int64)):
        if hasattr(m.DataType, name):
            to_torch[getattr(m.DataType, name)] = dtype
    dtype = to_torch.get(engine.get_tensor_dtype(binding.name))
    shape = tuple(engine.get_tensor_shape(binding.name))
    if (is_input != binding.is_input or dtype is None
            or (binding.dtype is not None and dtype != binding.dtype)
            or (binding.shape is not None and len(shape) != len(binding.shape))):
        raise InvalidProgramError(
            f"the blob's binding {binding.name!r} ({'input' if binding.is_input else 'output'}, "
            f"{binding.dtype}, shape {binding.shape}) does not match the engine's tensor "
            f"({'input' if is_input else 'output'}, {engine.get_tensor_dtype(binding.name)}, "
            f"shape {list(shape)})")
    return dataclasses.replace(binding, dtype=dtype, shape=binding.shape or shape)


class TensorRTExecutor(Executor):
    kind = "tensorrt"

    def __init__(self, blob: Blob):
        meta = blob.metadata
        self.inputs, self.outputs = split_bindings(meta)
        flavor = meta.get("trt_flavor")
        try:  # the flavour that built it, else any: engine_for_this_gpu rebuilds
            try:
                self.trt = load_tensorrt(flavor)
            except TensorRTNotInstalledError:
                self.trt = load_tensorrt()
        except TensorRTNotInstalledError as e:
            raise EngineUnavailable(f"the engine was built with {flavor or 'TensorRT'} "
                                    f"{meta.get('trt_version', '')}, and no TensorRT is "
                                    f"installed here to run or rebuild it: {e}")
        device = cuda_device_or_raise(int(meta.get("device_id", 0)))
        engine = engine_for_this_gpu(blob, self.trt, device)
        m = self.trt.module
        self.logger = collecting_logger(self.trt)
        self.runtime = m.Runtime(self.logger)
        self.engine = self.runtime.deserialize_cuda_engine(engine)
        if self.engine is None:
            raise EngineUnavailable("TensorRT could not deserialize the engine: "
                                    + ("; ".join(self.logger.messages[-3:]) or "no message"))
        n_state = 2 * len(blob.state)  # delegate-owned state: engine inputs/outputs (state.py)
        if self.engine.num_io_tensors != len(self.inputs) + len(self.outputs) + n_state:
            raise InvalidProgramError(
                f"the engine has {self.engine.num_io_tensors} input and output tensors, the "
                f"blob's io_bindings list {len(self.inputs) + len(self.outputs)} and its "
                f"states {n_state}")
        self.inputs = [engine_binding(self.trt, self.engine, b) for b in self.inputs]
        self.outputs = [engine_binding(self.trt, self.engine, b) for b in self.outputs]
        self.bound = BoundContext(self.engine.create_execution_context(), self.inputs,
                                  self.outputs, device)
        self.state = self.bound.state = (DeviceState(state_specs(blob, self.inputs), self.engine,
                                                     device) if blob.state else None)
        self.bound.aliases = aliased_pairs(blob, self.inputs, self.outputs)
        if profiling.nodes_requested():  # GPU-only, unverified (tensorrt_profiling.py)
            self.bound.layer_profiler = attach_layer_profiler(self.trt, self.bound.context)

    def execute(self, args, num_args: int | None = None) -> None:
        if self.bound is None:
            raise ArgumentError("this executor was closed (the delegate was destroyed)")
        self.bound.execute(args, len(args) if num_args is None else num_args)

    # No native plan yet (Executor.native_plan returns None), so every call
    # runs this Python code and can be preempted (docs/concurrency.md). Its
    # plan would be a CUDA graph captured here around the copies and
    # enqueueV3 for one set of argument addresses and shapes, replayed by the
    # adapter with cuGraphLaunch + cuStreamSynchronize through the driver API
    # (a new etrt_plan_kind carrying the graph exec, the stream and the
    # driver's function pointers): the next issue.

    def close(self) -> None:
        """Drops the context before the engine and the engine before the runtime
        (TensorRT's required order), while CUDA is still up."""
        self.bound = None
        self.engine = None
        self.runtime = None


class BoundContext:
    """Runs a TensorRT execution context on a partition's arguments: CUDA
    arguments are bound at their own addresses, host ones are staged through
    device buffers (and outputs copied back), all on one stream."""

    def __init__(self, context, inputs: list[Binding], outputs: list[Binding],
                 device: torch.device):
        self.context = context
        self.inputs, self.outputs = inputs, outputs
        self.device = device
        self.stream = torch.cuda.Stream(device)
        self.views = HostViews()
        self.staging: dict[str, torch.Tensor] = {}  # device buffers for host arguments
        self.layer_profiler = None  # set when per-layer profiling was asked for
        self.state: DeviceState | None = None  # delegate-owned state (state.py)
        self.aliases: list[tuple[int, int]] = []  # TR02: (output, input) written in place

    def _device_buffer(self, name: str, shape, dtype) -> torch.Tensor:
        buf = self.staging.get(name)
        numel = math.prod(shape)
        if buf is None or buf.numel() < numel or buf.dtype != dtype:
            buf = torch.empty(max(numel, 1), dtype=dtype, device=self.device)
            self.staging[name] = buf
        return buf[:numel].view(shape)

    def execute(self, args, num_args: int | None = None) -> None:
        # Stage events (ETDump on) are host timestamps: "bind" includes queueing
        # the input copies; the GPU work lands in "copies" when an output is
        # copied back to pageable host memory (that copy waits for the stream,
        # as the H200 showed), else in "wait".
        recorder = profiling.begin_call()
        t0 = profiling.now() if recorder else 0
        shapes = check_args(args, len(args) if num_args is None else num_args,
                            self.inputs, self.outputs)
        copies_back = []
        if self.state is not None:  # positions inside the cache before anything runs
            self.state.check_call(args, shapes, lambda k: cuda_positions(
                args[k], shapes[k][0]) if args[k].device_type == abi.ETRT_DEVICE_CUDA else None)
        bound_inputs: dict[int, int] = {}
        copies_aliased: list = []
        # CUDA inputs may come from work the caller queued on the device's
        # default stream; order the engine after it (outputs are complete on
        # return: the stream is synchronized below).
        self.stream.wait_stream(torch.cuda.default_stream(self.device))
        with torch.cuda.stream(self.stream):
            for i, (binding, shape) in enumerate(zip(self.inputs, shapes)):
                arg = args[i]
                self.context.set_input_shape(binding.name, shape)
                if arg.device_type == abi.ETRT_DEVICE_CUDA:
                    address = arg.data
                else:
                    staged = self._device_buffer(binding.name, shape,
                                                 SCALAR_TYPE_TO_TORCH[arg.dtype])
                    staged.copy_(self.views.view(arg, shape), non_blocking=True)
                    address = staged.data_ptr()
                self.context.set_tensor_address(binding.name, address)
                bound_inputs[i] = address
            aliased = dict(self.aliases)
            for j, binding in enumerate(self.outputs):
                arg = args[len(self.inputs) + j]
                shape = tuple(self.context.get_tensor_shape(binding.name))
                resize_output(arg, shape, binding)
                if arg.device_type == abi.ETRT_DEVICE_CUDA:
                    checked_nbytes(arg, shape, "CUDA ")  # TensorRT writes this many bytes
                    address = arg.data
                else:
                    staged = self._device_buffer(binding.name, shape,
                                                 SCALAR_TYPE_TO_TORCH[arg.dtype])
                    copies_back.append((staged, arg, shape))
                    address = staged.data_ptr()
                if j in aliased:  # TR02: written into the input; copied to `address` below
                    copies_aliased.append((bound_inputs[aliased[j]], address, shape, arg))
                    address = bound_inputs[aliased[j]]
                self.context.set_tensor_address(binding.name, address)
            if self.state is not None:
                self.state.bind(self.context)
            t1 = profiling.now() if recorder else 0
            if not self.context.execute_async_v3(self.stream.cuda_stream):
                raise RuntimeError("TensorRT failed to enqueue the engine; its log says why")
            t2 = profiling.now() if recorder else 0
            for src, dst, shape, arg in copies_aliased:
                if src != dst:
                    itemsize = SCALAR_TYPE_TO_TORCH[arg.dtype].itemsize
                    copy_device(dst, src, math.prod(shape) * itemsize, self.stream)
            for staged, arg, shape in copies_back:
                self.views.view(arg, shape).copy_(staged, non_blocking=True)
        t3 = profiling.now() if recorder else 0
        self.stream.synchronize()
        if self.state is not None:
            self.state.swap()
        if recorder:
            for name, start, end in (("bind", t0, t1), ("enqueue", t1, t2), ("copies", t2, t3),
                                     ("wait", t3, profiling.now())):
                recorder.event(name, start, end)
            if self.layer_profiler is not None:
                for name, start, end in self.layer_profiler.drain(t1):
                    recorder.event(name, start, end)
