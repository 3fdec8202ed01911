"""Native plans of the TensorRT executor (executor_table.h, ETRT_PLAN_CUDA_GRAPH).

After a call that BoundContext checked, bound and ran as a CUDA-graph replay
(runtime/cuda/graphs.py), the executor hands the adapter that graph exec with
everything around it: the argument signature it was bound for, the staging
buffers of host arguments, the two events, the engine's stream and the
caller's stream. The adapter then runs identical calls itself
(native/src/plans/cuda_graph_plan.cpp): no Python on the steady-state GPU path.

A plan is made only when the call can be replayed exactly: a graph replay (no
ping-pong state, no aliases, no per-layer profiling: those run plain
enqueues), every argument a tensor, and the caller's stream the legacy
default stream (the only one an ExecuTorch C++ caller has; with torch in the
process, its current stream at the call). The shared scratch area is the one
thing another delegate can replace outside this one's execute: the plan
carries its epoch.

Stateful partitions (KV caches updated in place, at fixed addresses): the
plan names the state's CUDA buffers and carries the executor's position
checks, which the adapter runs on the int64 host positions before every
launch (a refused call runs and writes nothing, in the executor's words);
positions in CUDA memory keep the call in Python (reading them needs a
synchronous copy the executor makes itself). A reset of the state moves its
epoch on, so the next call goes to the executor and re-plans.

GPU-only: ran on a GPU with a labelled stand-in for TensorRT's execution
context (tests/runtime/tensorrt/test_tensorrt_plan_gpu.py).
"""
from __future__ import annotations

import ctypes
import dataclasses
from typing import Sequence

from ..adapter import abi
from ..native_plan import make_signature, position_check_array, retire

__all__ = ["GraphCall", "CudaGraphPlan"]


@dataclasses.dataclass(frozen=True)
class GraphCall:
    """What BoundContext saw of a call it replayed as a graph."""
    graph_exec: int
    caller_stream: int
    ready_event: int  # recorded on the caller's stream, waited for by the engine's
    done_event: int  # recorded on the engine's stream, waited for by the caller's
    staged_inputs: tuple[tuple[int, int, int], ...]  # (argument index, device address, bytes)
    staged_outputs: tuple[tuple[int, int, int], ...]
    generation: int


def _copies(items) -> ctypes.Array:
    array = (abi.EtrtStagedCopy * len(items))()
    for c, (index, address, nbytes) in zip(array, items):
        c.arg_index, c.device, c.nbytes = index, address, nbytes
    return array


class CudaGraphPlan:
    """One etrt_native_plan of kind ETRT_PLAN_CUDA_GRAPH and the memory it
    points to; `key` (native_plan.signature_key) and `call` say what it was
    made for, so a caller alternating between plans reuses them."""

    def __init__(self, bound, call: GraphCall, args: Sequence[abi.EtrtArg], num_args: int,
                 key: tuple, context: int, launches: ctypes.c_uint64):
        self.key, self.call = key, call
        self._signature, self._shapes = make_signature(args, num_args)
        self._in, self._out = _copies(call.staged_inputs), _copies(call.staged_outputs)
        scratch = bound.scratch
        g = self.graph = abi.EtrtCudaGraphPlan()
        g.struct_size = ctypes.sizeof(g)
        g.device_index = bound.device
        g.context, g.graph_exec = context, call.graph_exec
        g.stream, g.caller_stream = bound.stream.handle, call.caller_stream
        g.ready_event, g.done_event = call.ready_event, call.done_event
        g.staged_inputs = ctypes.cast(self._in, ctypes.POINTER(abi.EtrtStagedCopy))
        g.num_staged_inputs = len(self._in)
        g.staged_outputs = ctypes.cast(self._out, ctypes.POINTER(abi.EtrtStagedCopy))
        g.num_staged_outputs = len(self._out)
        if scratch is not None:
            g.epoch = ctypes.pointer(scratch.epoch)
            g.epoch_at_plan = scratch.epoch.value
        g.launches = ctypes.pointer(launches)
        state = bound.state
        self._checks, self._whats = position_check_array(
            state.position_checks() if state is not None else [])
        self._states = _copies([(k, b.address, b.nbytes)
                                for k, b in enumerate(state.buffers if state is not None else ())])
        g.states = ctypes.cast(self._states, ctypes.POINTER(abi.EtrtStagedCopy))
        g.num_states = len(self._states)
        if state is not None:
            g.state_epoch = ctypes.pointer(state.epoch)
            g.state_epoch_at_plan = state.epoch.value
        self._keep = (bound, scratch, launches, state)  # what the handles belong to
        p = self.struct = abi.EtrtNativePlan()
        p.struct_size = ctypes.sizeof(p)
        p.kind = abi.ETRT_PLAN_CUDA_GRAPH
        p.num_args = num_args
        p.signature = ctypes.cast(self._signature, ctypes.POINTER(abi.EtrtArgSignature))
        p.cuda_graph = ctypes.pointer(g)
        p.position_checks = ctypes.cast(self._checks, ctypes.POINTER(abi.EtrtPositionCheck))
        p.num_position_checks = len(self._checks)

    def live(self, bound) -> bool:
        """Still names what `bound` holds: the same graph exec and generation,
        and (with a shared scratch area) the area it was captured over."""
        graph, state = bound.graph, bound.state
        return (graph is not None and graph.exec == self.call.graph_exec
                and graph.generation == self.call.generation
                and (bound.scratch is None or bound.scratch.epoch.value == self.graph.epoch_at_plan)
                and (state is None or state.epoch.value == self.graph.state_epoch_at_plan))

    def withdraw(self) -> None:
        """Tells the adapter not to run this plan again; keeps its memory readable."""
        self.struct.withdrawn = 1
        retire(self)
