"""State a partition owns between calls (KV caches), for the executors.

ExecuTorch never passes a delegate-owned buffer (docs/llm.md): the executor
allocates it at init from the blob's "state" entries, feeds it to the engine
as an extra input and takes the new value from an extra output, without a
copy. "in_place" states (the ONNX updates them with TensorScatter) bind one
buffer as both the input and the output; "functional" ones alternate between
two buffers (ping-pong). Before each call the write positions of every cache
with a "positions" entry are checked against the cache, so a bad
cache_position is an error naming the value and the limit, never a write
outside the cache.

`reset_state(method)` re-initializes the states of live executors.
"""
from __future__ import annotations

import ctypes
import math
import threading
import weakref
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..blob import Blob
from ..errors import ArgumentError, InvalidProgramError
from .adapter import abi
from .arguments import BLOB_DTYPE_TO_NUMPY, SCALAR_TYPE_TO_NUMPY, Binding, dtype_name
from .cuda.driver import check, driver
from .cuda.objects import DeviceBuffer, Stream, make_current

SECTION_INIT_PREFIX = "section:"


@dataclass(frozen=True)
class StateSpec:
    fqn: str
    onnx_input: str
    onnx_output: str
    dtype: np.dtype
    shape: tuple[int, ...]
    in_place: bool
    init: bytes | None                    # None: zeros
    positions_input: int | None = None    # index of the user input holding the positions
    positions_axis: int | None = None

    @property
    def capacity(self) -> int:
        """Entries along the written axis (max_cache_len for a KV cache)."""
        return self.shape[self.positions_axis] if self.positions_axis is not None else 0


def state_specs(blob: Blob, inputs: Sequence[Binding]) -> list[StateSpec]:
    """The blob's states (already schema-checked by read_blob)."""
    names = [b.name for b in inputs]
    specs = []
    for e in blob.state:
        dtype = BLOB_DTYPE_TO_NUMPY.get(e["dtype"])
        if dtype is None:
            raise InvalidProgramError(f"state {e['fqn']!r} has dtype {e['dtype']!r}, which "
                                      "this runtime has no tensor type for")
        init = None
        if e["init"] != "zeros":
            init = blob.section(e["init"][len(SECTION_INIT_PREFIX):])
        pos = e.get("positions")
        specs.append(StateSpec(e["fqn"], e["onnx_input"], e["onnx_output"], dtype,
                               tuple(e["shape"]), e.get("update") == "in_place", init,
                               names.index(pos["input"]) if pos else None,
                               pos["axis"] if pos else None))
    return specs


def _initial(spec: StateSpec) -> np.ndarray:
    if spec.init is None:
        return np.zeros(spec.shape, dtype=spec.dtype)
    # bytearray: a writable copy the array owns
    return np.frombuffer(bytearray(spec.init), dtype=spec.dtype).reshape(spec.shape)


def read_positions(arg: abi.EtrtArg, count: int, staged: np.ndarray | None = None) -> list[int]:
    """The int64 write positions an argument holds (host memory, or `staged`)."""
    if staged is not None:
        return staged.reshape(-1).tolist()
    if arg.device_type != abi.ETRT_DEVICE_CPU:
        raise ArgumentError("the cache positions are in CUDA memory and could not be read to "
                            "check them")
    if count == 0:
        return []
    return list((ctypes.c_int64 * count).from_address(arg.data))


def describe_cache(spec: StateSpec) -> str:
    """How the position errors name a cache (native plans quote it too)."""
    return f"state {spec.fqn!r} (axis {spec.positions_axis} holds {spec.capacity} positions)"


def check_positions(spec: StateSpec, positions: Sequence[int]) -> None:
    """Raises ArgumentError unless every write of `spec` lands inside it (and, for
    an in-place TensorScatter update, the positions are contiguous)."""
    cap, n = spec.capacity, len(positions)
    what = describe_cache(spec)
    if n > cap:
        raise ArgumentError(f"a sequence of {n} tokens is longer than the cache: {what}; "
                            f"split the prompt or export with a larger cache")
    if n == 0:
        return
    first = positions[0]
    for i, p in enumerate(positions):
        if not 0 <= p < cap:
            raise ArgumentError(f"cache position {p} (index {i} of the positions input) is "
                                f"outside the cache: {what}, valid positions are 0..{cap - 1}; "
                                "reset the state (executorch_tensorrt.reset_state) or shorten "
                                "the sequence")
        if spec.in_place and p != first + i:
            raise ArgumentError(f"cache positions must be contiguous (the cache is updated in "
                                f"place from position {first}), got {list(positions)[:8]} for "
                                f"{what}")


class ExecutorState:
    """Host-memory states for one executor; `buffers[k]` is state k's current value."""

    def __init__(self, specs: list[StateSpec]):
        self.specs = specs
        self.buffers = [_initial(s) for s in specs]
        # functional states: the buffer the next call writes (ping-pong)
        self.spares = [None if s.in_place else np.empty_like(b)
                       for s, b in zip(specs, self.buffers)]
        self.calls = 0
        self.method: str | None = None
        self._lock = threading.Lock()
        # Runs of a native plan since the executor last looked (the adapter adds
        # 1 per run): when odd, each functional state's value is in its spare.
        self.plan_swaps = ctypes.c_uint64(0)

    def current(self, k: int) -> np.ndarray:
        """State k's current value, wherever the plans' ping-pong left it."""
        spare = self.spares[k]
        return spare if spare is not None and self.plan_swaps.value & 1 else self.buffers[k]

    def sync_plan_swaps(self) -> None:
        """Takes the plans' ping-pong into `buffers` (only while no plan can run:
        inside the executor's execute, the adapter having forgotten its plan)."""
        if self.plan_swaps.value & 1:
            for k, spare in enumerate(self.spares):
                if spare is not None:
                    self.buffers[k], self.spares[k] = spare, self.buffers[k]
        self.plan_swaps.value = 0

    def check_call(self, args, shapes: Sequence[Sequence[int]], staged=None) -> None:
        for spec in self.specs:
            if spec.positions_input is None:
                continue
            k = spec.positions_input
            count = int(shapes[k][0]) if len(shapes[k]) else 1
            check_positions(spec, read_positions(args[k], count,
                                                 staged(k) if staged else None))

    def position_checks(self) -> list[tuple[int, int, bool, str]]:
        """(positions input, capacity, in place, description) per checked cache,
        in check_call's order: what a native plan checks in the adapter."""
        return [(s.positions_input, s.capacity, s.in_place, describe_cache(s))
                for s in self.specs if s.positions_input is not None]

    def swap(self) -> None:
        """After a call: functional states now live in the buffer just written."""
        for k, spare in enumerate(self.spares):
            if spare is not None:
                self.buffers[k], self.spares[k] = spare, self.buffers[k]
        self.calls += 1

    def reset(self) -> None:
        with self._lock:  # both buffers of a functional state: a plan may read either
            for spec, buf, spare in zip(self.specs, self.buffers, self.spares):
                np.copyto(buf, _initial(spec))
                if spare is not None:
                    np.copyto(spare, buf)

    def value(self, fqn: str) -> np.ndarray:
        """A host copy of the state's current value (for tests and tools)."""
        for k, spec in enumerate(self.specs):
            if spec.fqn == fqn:
                return self.current(k).copy()
        raise KeyError(f"no state {fqn!r}; states: {[s.fqn for s in self.specs]}")


class OrtStatefulSession:
    """An OrtSession seen as having only the user inputs/outputs: run() adds the
    state values (the last inputs and outputs of the model) and updates them
    in place or swaps them, without copying."""

    def __init__(self, session, state: ExecutorState, element_types: dict[np.dtype, int]):
        self.inner, self.state, self.api = session, state, session.api
        n_state = len(state.specs)
        n_in, n_out = len(session.inputs) - n_state, len(session.outputs) - n_state
        if n_in < 0 or n_out < 0:
            raise InvalidProgramError("the blob lists more states than the embedded ONNX model "
                                      "has inputs or outputs")
        for k, spec in enumerate(state.specs):
            for index, described, name, what in (
                    (n_in + k, session.inputs[n_in + k], spec.onnx_input, "input"),
                    (n_out + k, session.outputs[n_out + k], spec.onnx_output, "output")):
                got_name, element, dims = described
                if got_name != name or element != element_types.get(spec.dtype) or \
                        tuple(dims) != spec.shape:
                    raise InvalidProgramError(
                        f"state {spec.fqn!r}: the embedded ONNX model's {what} {index} is "
                        f"{got_name!r} (element type {element}, shape {list(dims)}); the blob "
                        f"says {name!r} {dtype_name(spec.dtype)} {list(spec.shape)}")
        self.inputs, self.outputs = session.inputs[:n_in], session.outputs[:n_out]
        self.n_in, self.n_out = n_in, n_out
        self._types = element_types
        self._values: dict[int, ctypes.c_void_p] = {}  # data_ptr -> OrtValue over it

    @property
    def session(self):
        return self.inner.session

    def _value(self, array: np.ndarray):
        address = array.ctypes.data
        v = self._values.get(address)
        if v is None:
            v = self._values[address] = self.api.tensor(
                address, array.nbytes, array.shape, self._types[array.dtype])
        return v

    def _written(self) -> list[np.ndarray]:
        """Where each state's next value goes: its buffer (in place) or its spare."""
        st = self.state
        return [b if s is None else s for b, s in zip(st.buffers, st.spares)]

    def _full(self, inputs: ctypes.Array, outputs: ctypes.Array, reads, writes):
        """The model's value arrays: the user values, then the states' OrtValues."""
        ins = [getattr(v, "value", v) for v in map(self._value, reads)]
        outs = [getattr(v, "value", v) for v in map(self._value, writes)]
        return ((ctypes.c_void_p * (self.n_in + len(ins)))(
                    *[inputs[i] for i in range(self.n_in)], *ins),
                (ctypes.c_void_p * (self.n_out + len(outs)))(
                    *[outputs[i] for i in range(self.n_out)], *outs))

    def run(self, inputs: ctypes.Array, outputs: ctypes.Array) -> None:
        st = self.state
        st.sync_plan_swaps()  # the adapter forgot its plan before calling the executor
        full_in, full_out = self._full(inputs, outputs, st.buffers, self._written())
        with st._lock:
            self.inner.run(full_in, full_out)
            st.swap()
        for j in range(self.n_out):  # outputs onnxruntime allocated: the caller releases them
            outputs[j] = full_out[j]

    def plan_values(self, inputs: ctypes.Array, outputs: ctypes.Array):
        """The arrays a native plan runs: (inputs, outputs, alt_inputs,
        alt_outputs), each the user values then the states' OrtValues. An
        in-place state is one OrtValue at both ends; a functional one reads
        buffer A and writes B, and the alt pair (None without functional
        states) the reverse; the adapter alternates them, counting in
        state.plan_swaps. Buffers stay where they are; reset() rewrites them
        in place."""
        st = self.state
        st.sync_plan_swaps()
        other = self._written()
        full_in, full_out = self._full(inputs, outputs, st.buffers, other)
        if all(s is None for s in st.spares):
            return full_in, full_out, None, None
        alt_in, alt_out = self._full(inputs, outputs, other, st.buffers)
        return full_in, full_out, alt_in, alt_out

    def end_profiling(self) -> str:
        return self.inner.end_profiling()

    def close(self) -> None:
        for v in self._values.values():
            self.api.ReleaseValue(v)
        self._values.clear()
        self.inner.close()


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
        names = {engine.get_tensor_name(i) for i in range(engine.num_io_tensors)}
        for spec in specs:
            for name in (spec.onnx_input, spec.onnx_output):
                if name not in names:
                    raise InvalidProgramError(f"state {spec.fqn!r}: the engine has no tensor "
                                              f"{name!r}; the blob is inconsistent")
            aliased = getattr(engine, "get_aliased_input_tensor", None)
            if spec.in_place and aliased is not None and \
                    aliased(spec.onnx_output) != spec.onnx_input:
                raise InvalidProgramError(
                    f"state {spec.fqn!r} is updated in place, but the engine's output "
                    f"{spec.onnx_output!r} aliases {aliased(spec.onnx_output)!r}, not "
                    f"{spec.onnx_input!r}; re-export the program")

    def reset(self) -> None:
        with self._lock:
            make_current(self.device)
            check(driver().cuCtxSynchronize(), "waiting for the calls that use the state")
            for spec, buf in zip(self.specs, self.buffers):
                _upload(buf, _initial(spec))

    def value(self, fqn: str) -> np.ndarray:
        """A host copy of the state's current value (waits for queued calls)."""
        for spec, buf in zip(self.specs, self.buffers):
            if spec.fqn == fqn:
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
        for spec, buf, spare in zip(self.specs, self.buffers, self.spares):
            context.set_input_shape(spec.onnx_input, spec.shape)
            context.set_tensor_address(spec.onnx_input, buf.address)
            context.set_tensor_address(spec.onnx_output,
                                       buf.address if spare is None else spare.address)


def _upload(buf: DeviceBuffer, host: np.ndarray) -> None:
    """A blocking copy of a state's value into its device buffer (init, reset)."""
    if host.nbytes:
        check(driver().cuMemcpyHtoD_v2(buf.address, host.ctypes.data, host.nbytes),
              "copying a state's initial value to CUDA memory")


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


# -- Torch-TensorRT's TR02 aliased outputs ---------------------------------------
def aliased_pairs(blob: Blob, inputs: Sequence[Binding],
                  outputs: Sequence[Binding]) -> list[tuple[int, int]]:
    """(output index, input index) for each aliased_io entry (names checked by
    read_blob). The caller owns the state (a delegate input and output), so the
    executor must leave the new value in the input's memory as TensorRT's
    in-place layer does, and in the output."""
    in_names, out_names = [b.name for b in inputs], [b.name for b in outputs]
    return [(out_names.index(a["output"]), in_names.index(a["input"]))
            for a in blob.aliased_io]


def reflect_aliases(args, pairs: list[tuple[int, int]], n_inputs: int,
                    outputs: Sequence[Binding]) -> None:
    """Copies each aliased output into its input's memory (host arguments; the
    onnxruntime fallback computes the output out of place)."""
    for j, i in pairs:
        out, inp = args[n_inputs + j], args[i]
        if out.data == inp.data:
            continue
        if out.device_type != abi.ETRT_DEVICE_CPU or inp.device_type != abi.ETRT_DEVICE_CPU:
            raise ArgumentError(f"aliased output {outputs[j].name!r} is in device memory; the "
                                "onnxruntime fallback updates aliased inputs on the host only")
        dtype = SCALAR_TYPE_TO_NUMPY.get(out.dtype)
        if dtype is None or out.dtype != inp.dtype or out.shape() != inp.shape():
            raise ArgumentError(f"aliased output {outputs[j].name!r} ({out.shape()}, dtype "
                                f"{out.dtype}) differs from its input ({inp.shape()}, dtype "
                                f"{inp.dtype})")
        nbytes = math.prod(out.shape()) * dtype.itemsize
        if nbytes > min(out.nbytes, inp.nbytes):
            raise ArgumentError(f"aliased output {outputs[j].name!r} needs {nbytes} bytes; "
                                f"its buffers hold {out.nbytes} and {inp.nbytes}")
        ctypes.memmove(inp.data, out.data, nbytes)


# -- live states, for reset_state ---------------------------------------------------
_live: "weakref.WeakSet[ExecutorState]" = weakref.WeakSet()
_live_lock = threading.Lock()


def register(state: ExecutorState | None, method: str | None) -> None:
    if state is None:
        return
    state.method = method
    with _live_lock:
        _live.add(state)


def live_states(method: str | None = None) -> list[ExecutorState]:
    with _live_lock:
        return [s for s in _live if method is None or s.method == method]


def reset_state(method: str | None = None) -> int:
    """Re-initializes (zeros, or the exported initial value) the state of every
    live TensorRT partition, or only of those in method `method`; returns how
    many partitions were reset. Call it between prompts: a KV cache then starts
    empty, and cache_position may start at 0 again."""
    states = live_states(method)
    for s in states:
        s.reset()
    return len(states)
