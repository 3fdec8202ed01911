"""A TensorRT execution context bound to a partition's arguments, call after
call (docs/gpu-runtime.md).

GPU-only: ran on a GPU with a labelled stand-in for TensorRT's execution
context that runs real CUDA kernels on the stream it is given
(tests/runtime/tensorrt/test_tensorrt_*_gpu.py); TensorRT's own context never
ran (TensorRT-RTX refuses the data-centre GPUs the tests reach).

Per call, only what changed reaches TensorRT: input shapes and tensor
addresses are cached, and set_input_shape / set_tensor_address are called for
the ones that differ from the last call; output shapes are asked for only
after an input shape changed. Device-resident calls (every argument in CUDA
memory) are asynchronous: the engine runs after the caller's stream and the
caller's stream waits for it, through events, and the host is not
synchronized. Calls with host arguments stage them through device buffers and
synchronize before returning, as before.
"""
from __future__ import annotations

import ctypes
import math
import os
import weakref

from ...errors import ArgumentError
from ..adapter import abi
from .. import profiling
from ..arguments import SCALAR_TYPE_TO_NUMPY, Binding, check_args, checked_nbytes, resize_output
from ..cuda.driver import check, driver
from .cuda_graph_plan import GraphCall
from ..cuda.graphs import EnqueueGraph, cuda_graphs_enabled, enqueue
from ..cuda.objects import DeviceBuffer, Event, Stream, caller_stream, make_current
from .optimization_profiles import ProfileChoice
from ..cuda.copies import copy_device, cuda_positions, cuda_values
from .device_state import DeviceState

__all__ = ["SHARED_SCRATCH_ENV", "BoundContext", "SharedScratch", "create_context",
           "shared_scratch_enabled"]

SHARED_SCRATCH_ENV = "EXECUTORCH_TENSORRT_SHARED_SCRATCH"
_CUDA = abi.ETRT_DEVICE_CUDA


def shared_scratch_enabled() -> bool:
    return os.environ.get(SHARED_SCRATCH_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


class SharedScratch:
    """One activation area per GPU, shared by every context created with
    user-managed device memory and sized for the largest. Contexts that share
    it also share its stream: their kernels run one after another in stream
    order, so no two of them ever use the area at once, whatever thread or
    caller stream their calls come from. (ExecuTorch runs a method's
    partitions one after another anyway.)"""

    # Held by the contexts that use it: freed when the last of them goes.
    _per_device: "weakref.WeakValueDictionary[int, SharedScratch]" = weakref.WeakValueDictionary()

    def __init__(self, device: int) -> None:
        self.device = device
        self.stream = Stream(device)
        self.buffer: DeviceBuffer | None = None
        # Moves on whenever the area is replaced: a native plan captured over
        # the old one must not run (cuda_graph_plan.py; the adapter reads it).
        self.epoch = ctypes.c_uint64(0)

    @classmethod
    def for_device(cls, device: int) -> "SharedScratch":
        scratch = cls._per_device.get(device)
        if scratch is None:
            scratch = cls(device)
            cls._per_device[device] = scratch
        return scratch

    def reserve(self, nbytes: int) -> None:
        """Grows the area to at least `nbytes`. The old area is freed on this
        stream, so the allocator reuses it only for work queued after the
        kernels already queued here; contexts re-point on their next call."""
        if self.buffer is None or self.buffer.nbytes < nbytes:
            self.buffer = DeviceBuffer(max(nbytes, 1), self.device, self.stream)
            self.epoch.value += 1

    @property
    def address(self) -> int:
        return self.buffer.address

    @property
    def size(self) -> int:
        return self.buffer.nbytes


def _engine_memory_size(engine) -> int:
    size = getattr(engine, "device_memory_size_v2", None)  # TensorRT >= 10.1, TensorRT-RTX
    return int(size if size is not None else engine.device_memory_size)


def create_context(trt, engine, device: int, *, graphs: bool | None = None,
                   kernel_cache=None) -> "BoundContext":
    """An execution context for `engine`, bound by a BoundContext.

    With TensorRT-RTX (an engine with create_runtime_config), its own CUDA
    graph strategy is used instead of ours (its whole-graph capture also
    follows shape changes), and `kernel_cache` (cuda_kernel_cache.KernelCache),
    when given, keeps the kernels it compiles just in time. GPU-only, unverified:
    TensorRT-RTX never ran an engine on a reachable GPU."""
    m = trt.module
    graphs = cuda_graphs_enabled() if graphs is None else graphs
    strategies = getattr(m, "ExecutionContextAllocationStrategy", None)  # TensorRT >= 10
    if strategies is None:
        return BoundContext(engine.create_execution_context(), None, None, device, graphs=graphs)
    scratch = SharedScratch.for_device(device) if shared_scratch_enabled() else None
    strategy = strategies.USER_MANAGED if scratch is not None else strategies.STATIC
    own_graphs = graphs
    if hasattr(engine, "create_runtime_config"):
        config = engine.create_runtime_config()
        config.set_execution_context_allocation_strategy(strategy)
        if hasattr(config, "cuda_graph_strategy") and hasattr(m, "CudaGraphStrategy"):
            config.cuda_graph_strategy = (m.CudaGraphStrategy.WHOLE_GRAPH_CAPTURE if graphs
                                          else m.CudaGraphStrategy.DISABLED)
            own_graphs = False  # capturing TensorRT-RTX's own graph launch would nest graphs
        cache = kernel_cache.open(config) if kernel_cache is not None else None
        if cache is not None and hasattr(config, "set_runtime_cache"):
            config.set_runtime_cache(cache)
        context = engine.create_execution_context(config)
    else:
        config = None
        context = engine.create_execution_context(strategy)
    if context is None:
        raise RuntimeError("TensorRT could not create an execution context for the engine")
    if scratch is not None:
        scratch.reserve(_engine_memory_size(engine))
    bound = BoundContext(context, None, None, device, graphs=own_graphs, scratch=scratch)
    bound.runtime_config = config  # kept as long as the context
    return bound


class BoundContext:
    """Runs a TensorRT execution context on a partition's arguments: CUDA
    arguments are bound at their own addresses, host ones are staged through
    device buffers (and outputs copied back), on the context's stream."""

    def __init__(self, context, inputs: list[Binding] | None, outputs: list[Binding] | None,
                 device: int, *, graphs: bool | None = None,
                 scratch: SharedScratch | None = None):
        self.context = context
        self.device = device
        self.scratch = scratch
        # Contexts sharing a scratch area share its stream (SharedScratch says
        # why). Never the legacy default stream: TensorRT synchronizes extra
        # around it, and it cannot be captured into a graph.
        self.stream = scratch.stream if scratch is not None else Stream(device)
        self.staging: dict[str, DeviceBuffer] = {}  # device buffers for host arguments
        self.layer_timings = None  # set when per-layer timings were asked for
        # Delegate-owned state (device_state.py) and TR02 aliases (output -> input), set
        # by the executor. State binds its own tensors on every call: in-place
        # caches at fixed addresses (graphs replay them), functional states
        # alternating two buffers (plain enqueues); aliases copy after the
        # engine (plain enqueues).
        self.state: DeviceState | None = None
        self.aliases: dict[int, int] = {}  # output index -> input index
        # What eager would refuse (../input_checks.py), set by the executor:
        # device-resident index inputs are copied to the host to be checked.
        self.input_checks = None
        # Several optimization profiles: the one each call runs in (optimization_profiles.py).
        self.profiles: ProfileChoice | None = None
        graphs = cuda_graphs_enabled() if graphs is None else graphs
        self.graph = EnqueueGraph() if graphs else None
        self._ready = Event(device)  # recorded on the caller's stream
        self._done = Event(device)  # recorded on ours after the engine
        # Bumped by every change TensorRT is told of, never reset: a captured
        # graph is valid for one generation.
        self.generation = 0
        # The last call, when it ran as a graph replay that a native plan can
        # repeat (cuda_graph_plan.py), else None.
        self.last_graph_call: GraphCall | None = None
        self._staged: tuple[list, list] = ([], [])  # this call's staging copies (in, out)
        self.bind(inputs or [], outputs or [])

    def bind(self, inputs: list[Binding], outputs: list[Binding]) -> None:
        """Sets the partition's bindings (and forgets what was bound)."""
        self.inputs, self.outputs = inputs, outputs
        self._names = [b.name for b in inputs + outputs]
        self._out_shapes: list[tuple] = []  # the outputs' shapes for _shapes
        self._scratch_address = 0
        self._forget_bindings()

    def _forget_bindings(self) -> None:
        """Every shape and address is set again on the next call (new bindings,
        or a profile switch), and graphs captured before are stale (a new
        generation)."""
        self._shapes: list[tuple | None] = [None] * len(self.inputs)  # last set input shapes
        self._addresses: list[int | None] = [None] * len(self._names)  # last set addresses
        self.generation += 1

    def close(self) -> None:
        """Waits for this context's queued work (a device-resident call returns
        before it finishes), so that the context and its memory can go."""
        make_current(self.device)
        self.stream.synchronize()

    def _staging_address(self, name: str, nbytes: int) -> int:
        """The device address of the staging buffer of binding `name`, of at
        least `nbytes`; reallocated only to grow, so its address (bound in
        TensorRT) mostly stays. Allocated for use on our stream and freed
        there (a replaced one after the work already queued)."""
        buf = self.staging.get(name)
        if buf is None or buf.nbytes < nbytes:
            buf = self.staging[name] = DeviceBuffer(max(nbytes, 1), self.device, self.stream)
        return buf.address

    def _set_address(self, k: int, address: int) -> None:
        if address != self._addresses[k]:
            self._addresses[k] = None  # unknown until TensorRT accepted it
            if not self.context.set_tensor_address(self._names[k], address):
                raise ArgumentError(f"TensorRT refused the address of {self._names[k]!r}; "
                                    "its log says why")
            self._addresses[k] = address
            self.generation += 1

    def _set_shape(self, i: int, shape: tuple) -> None:
        self._shapes[i] = None
        if not self.context.set_input_shape(self._names[i], shape):
            raise ArgumentError(f"TensorRT refused shape {list(shape)} for input "
                                f"{self._names[i]!r} (outside the engine's optimization "
                                "profile?); its log says why")
        self._shapes[i] = shape
        self.generation += 1

    def execute(self, args, num_args: int | None = None) -> None:
        # Stage events (ETDump on) are host timestamps: "bind" includes queueing
        # the input copies; with host outputs the GPU work lands in "copies"
        # (the copy back into pageable host memory waits for the stream, as the
        # GPU runs showed), else in "wait". Device-resident calls do not wait: their
        # "wait" is the event that orders the caller's stream after the engine.
        recorder = profiling.begin_call()
        t0 = profiling.now() if recorder else 0
        self.last_graph_call = None
        self._staged = ([], [])
        call = check_args(args, len(args) if num_args is None else num_args,
                          self.inputs, self.outputs, checks=self.input_checks,
                          read_device=self._device_values)
        shapes = call.shapes
        make_current(self.device)  # ExecuTorch may call from any thread
        if self.state is not None:  # positions inside the cache before anything runs
            self.state.check_call(args, shapes, lambda k: cuda_positions(
                args[k], shapes[k][0]) if args[k].device_type == _CUDA else None)
        resident = True
        for k in range(len(self._names)):
            if args[k].device_type != _CUDA:
                resident = False
                break
        # The caller's stream: torch's current stream of the device when the
        # process uses torch's CUDA (a Python caller may have chosen one),
        # else the default stream; ExecuTorch's C++ callers have no other
        # (docs/gpu-runtime.md). CUDA inputs may come from work queued there.
        caller = caller_stream(self.device)
        self._ready.record(caller)
        self.stream.wait(self._ready)
        if resident:
            t1, t2, replayed = self._bind_and_launch(args, call, None, recorder)
            # Later work on the caller's stream (reading the outputs, the next
            # partition, the caller's own kernels) runs after the engine.
            self._done.record(self.stream.handle)
            check(driver().cuStreamWaitEvent(caller, self._done.handle, 0),
                  "ordering the caller's stream after the engine")
            t3 = t2
        else:
            copies_back: list = []  # the staging copies go on our stream
            t1, t2, replayed = self._bind_and_launch(args, call, copies_back, recorder)
            lib = driver()
            for address, arg, nbytes in copies_back:
                check(lib.cuMemcpyDtoHAsync_v2(arg.data, address, nbytes, self.stream.handle),
                      "copying an output back to host memory")
            t3 = profiling.now() if recorder else 0
            self.stream.synchronize()
        if replayed:
            self.last_graph_call = GraphCall(
                self.graph.exec, caller, self._ready.handle, self._done.handle,
                tuple(self._staged[0]), tuple(self._staged[1]), self.generation)
        if recorder:
            for name, start, end in (("bind", t0, t1), ("enqueue", t1, t2), ("copies", t2, t3),
                                     ("wait", t3, profiling.now())):
                recorder.event(name, start, end)
            if self.layer_timings is not None:
                for name, start, end in self.layer_timings.drain(t1):
                    recorder.event(name, start, end)

    def _device_values(self, arg: abi.EtrtArg, shape):
        make_current(self.device)
        return cuda_values(arg, shape, SCALAR_TYPE_TO_NUMPY[arg.dtype],
                           caller_stream(self.device))

    def _bind_and_launch(self, args, call, copies_back: list | None,
                         recorder) -> tuple[int, int]:
        """Tells TensorRT what changed, stages host inputs (on our stream),
        launches; returns the launch's start and end times. `call`: check_args'
        CheckedCall of these arguments."""
        n_in = len(self.inputs)
        shapes = call.shapes
        if self.profiles is not None and self.profiles.switch(
                self.context, self.profiles.index_for(shapes), self.stream.handle):
            self._forget_bindings()  # TensorRT wants shapes and addresses set again
        if self.state is not None:  # its shapes first: output shapes may depend on them
            self.state.bind(self.context)
        changed = False
        for i in range(n_in):
            if shapes[i] != self._shapes[i]:
                self._set_shape(i, shapes[i])
                changed = True
        if changed:
            self._out_shapes = [tuple(self.context.get_tensor_shape(b.name))
                                for b in self.outputs]
        if self.scratch is not None and self._scratch_address != self.scratch.address:
            try:  # TensorRT >= 10.1 and TensorRT-RTX; 10.0 has the property only
                self.context.set_device_memory(self.scratch.address, self.scratch.size)
            except (AttributeError, TypeError):
                self.context.device_memory = self.scratch.address
            self._scratch_address = self.scratch.address
            self.generation += 1
        for i in range(n_in):
            arg = args[i]
            if arg.device_type == _CUDA:
                self._set_address(i, arg.data)
            else:
                nbytes = call.nbytes[i]  # within the buffer: check_args
                staged = self._staging_address(self._names[i], nbytes)
                if nbytes:  # pageable memory: returns once the bytes are read
                    check(driver().cuMemcpyHtoDAsync_v2(staged, arg.data, nbytes,
                                                         self.stream.handle),
                          "copying a host input to CUDA memory")
                self._set_address(i, staged)
                self._staged[0].append((i, staged, nbytes))
        reflect: list[tuple[int, int, int]] = []  # TR02: (input address, output address, bytes)
        for j, binding in enumerate(self.outputs):
            k = n_in + j
            arg = args[k]
            shape = self._out_shapes[j]
            resize_output(arg, shape, binding)
            if arg.device_type == _CUDA:
                checked_nbytes(arg, shape, "CUDA ")  # TensorRT writes this many bytes
                address = arg.data
            else:
                nbytes = checked_nbytes(arg, shape)
                address = self._staging_address(binding.name, nbytes)
                if nbytes:
                    copies_back.append((address, arg, nbytes))
                self._staged[1].append((k, address, nbytes))
            if j in self.aliases:  # TR02: the engine writes into the input; copied out below
                source = self._addresses[self.aliases[j]]
                reflect.append((source, address,
                                math.prod(shape) * SCALAR_TYPE_TO_NUMPY[arg.dtype].itemsize))
                address = source
            self._set_address(k, address)
        t1 = profiling.now() if recorder else 0
        replayed = False
        if (self.graph is not None and self.layer_timings is None
                and (self.state is None or self.state.fixed_addresses) and not self.aliases):
            replayed = self.graph.launch(self.context, self.stream, self.generation)
        else:  # per-layer times need TensorRT's own enqueue
            enqueue(self.context, self.stream)
        for source, target, nbytes in reflect:
            if source != target:
                copy_device(target, source, nbytes, self.stream)
        if self.state is not None:
            self.state.advance()  # the next call reads what this one wrote (stream order)
        return t1, profiling.now() if recorder else 0, replayed
