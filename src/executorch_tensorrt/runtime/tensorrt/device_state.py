"""The TensorRT executor's partition state: ExecutorState (runtime/state.py)
held in CUDA buffers, bound on the execution context before each enqueue.

GPU-only (tests/runtime/tensorrt/test_tensorrt_state_gpu.py runs it with a
labelled stand-in); only the TensorRT executor uses it.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ...errors import InvalidProgramError
from ..cuda.driver import check, driver
from ..cuda.objects import DeviceBuffer, make_current
from ..state import ExecutorState, StateSpec, initial_value

__all__ = ["DeviceState"]


class DeviceState(ExecutorState):
    """The TensorRT executor's states: CUDA buffers allocated once at init. An
    "in_place" state binds one pointer as the engine's input and its aliased
    output (TensorRT's KV_CACHE_UPDATE layer writes in place, checked with
    engine.get_aliased_input_tensor); "functional" ones alternate two buffers.
    GPU-only: no machine here runs it (docs/llm.md)."""

    def __init__(self, specs: list[StateSpec], engine, device: int):
        self.device = device
        super().__init__(specs)  # host buffers: the initial values
        initial = self.buffers
        self.buffers = [DeviceBuffer(b.nbytes, device) for b in initial]
        self.spares = [None if s is None else DeviceBuffer(b.nbytes, device)
                       for s, b in zip(self.spares, initial)]
        for buf, host in zip(self.buffers, initial):
            _upload(buf, host)
        # Moved on by every reset: a native plan made before it is not run
        # again (cuda_graph_plan.py; the adapter reads it).
        self.epoch = ctypes.c_uint64(0)
        names = {engine.get_tensor_name(i) for i in range(engine.num_io_tensors)}
        for spec in specs:
            for name in (spec.onnx_input, spec.onnx_output):
                if name not in names:
                    raise InvalidProgramError(f"state {spec.fqn!r}: the engine has no tensor "
                                              f"{name!r}; the blob is inconsistent")
            aliased = getattr(engine, "get_aliased_input_tensor", None)
            if spec.in_place and not spec.rewritten and aliased is not None and \
                    aliased(spec.onnx_output) != spec.onnx_input:
                raise InvalidProgramError(
                    f"state {spec.fqn!r} is updated in place, but the engine's output "
                    f"{spec.onnx_output!r} aliases {aliased(spec.onnx_output)!r}, not "
                    f"{spec.onnx_input!r}; re-export the program")

    @property
    def fixed_addresses(self) -> bool:
        """Every state updated in place: the engine reads and writes each at one
        address on every call, so a captured graph stays valid across calls
        (ping-pong states alternate two and run plain enqueues)."""
        return all(spare is None for spare in self.spares)

    def reset(self) -> None:
        with self._lock:
            self.epoch.value += 1  # before the new values: no plan runs over them
            make_current(self.device)
            check(driver().cuCtxSynchronize(), "waiting for the calls that use the state")
            for k, spec in enumerate(self.specs):
                _upload(self.current(k), initial_value(spec))

    def value(self, fqn: str) -> np.ndarray:
        """A host copy of the state's current value (waits for queued calls)."""
        for k, spec in enumerate(self.specs):
            if spec.fqn == fqn:
                buf = self.current(k)
                make_current(self.device)
                check(driver().cuCtxSynchronize(), "waiting for the calls that use the state")
                host = np.empty(spec.shape, dtype=spec.dtype)
                if host.nbytes:
                    check(driver().cuMemcpyDtoH_v2(host.ctypes.data, buf.address, host.nbytes),
                          f"copying state {fqn!r} from CUDA memory")
                return host
        raise KeyError(f"no state {fqn!r}; states: {[s.fqn for s in self.specs]}")

    def bind(self, context) -> None:
        """Sets the state tensors' addresses on the execution context (before enqueue)."""
        for k, spec in enumerate(self.specs):
            context.set_input_shape(spec.onnx_input, spec.shape)
            context.set_tensor_address(spec.onnx_input, self.current(k).address)
            context.set_tensor_address(spec.onnx_output, self.writes_to(k).address)


def _upload(buf: DeviceBuffer, host: np.ndarray) -> None:
    """A blocking copy of a state's value into its device buffer (init, reset)."""
    if host.nbytes:
        check(driver().cuMemcpyHtoD_v2(buf.address, host.ctypes.data, host.nbytes),
              "copying a state's initial value to CUDA memory")
