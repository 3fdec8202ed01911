"""State a partition owns between calls (KV caches): the part both executors share.

ExecuTorch never passes a delegate-owned buffer (docs/llm.md): the executor
allocates it at init from the blob's "state" entries, feeds it to the engine
as an extra input and takes the new value from an extra output, without a
copy. "in_place" states (the ONNX updates them with TensorScatter) bind one
buffer as both the input and the output, and so do "rewrite_in_place" ones
(an fp8 cache, rewritten whole: aot/state/fp8_cache.py says why one buffer
is safe); "functional" ones alternate between
two buffers (ping-pong). Before each call the write positions of every cache
with a "positions" entry are checked against the cache, so a bad
cache_position is an error naming the value and the limit, never a write
outside the cache.

Here: the state specs read from the blob, the position checks, the host-memory
ExecutorState, the TR02 aliased-output pairs, and the process-wide registry
behind `reset_state(method)`, which re-initializes the states of live
executors. What only one executor uses lives with it: the onnxruntime session
wrapper in runtime/onnxruntime/state.py, the CUDA states in
runtime/tensorrt/device_state.py, the device copies in runtime/cuda/copies.py.
"""
from __future__ import annotations

import ctypes
import threading
import weakref
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from ..blob import Blob
from ..errors import ArgumentError, InvalidProgramError
from .adapter import abi
from .arguments import BLOB_DTYPE_TO_NUMPY, Binding


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
    rewritten: bool = False  # in place, but no engine layer aliases output and input

    @property
    def capacity(self) -> int:
        """Entries along the written axis (max_cache_len for a KV cache)."""
        return self.shape[self.positions_axis] if self.positions_axis is not None else 0


def state_specs(blob: Blob, inputs: Sequence[Binding]) -> list[StateSpec]:
    """The blob's states (already schema-checked by read_blob)."""
    names = [b.name for b in inputs]
    specs = []
    for e in blob.meta.state or ():
        dtype = BLOB_DTYPE_TO_NUMPY.get(e.dtype)
        if dtype is None:
            raise InvalidProgramError(f"state {e.fqn!r} has dtype {e.dtype!r}, which "
                                      "this runtime has no tensor type for")
        section = e.init_section
        init = blob.section(section) if section is not None else None
        pos = e.positions
        specs.append(StateSpec(e.fqn, e.onnx_input, e.onnx_output, dtype, e.shape,
                               e.in_place, init,
                               names.index(pos.input) if pos else None,
                               pos.axis if pos else None, e.rewritten))
    return specs


def fp32_state(spec: StateSpec) -> StateSpec:
    """The state as an upcast (fp32-computing) fallback graph holds it: fp32
    buffers, the initial value converted once (twice a bf16 cache's bytes)."""
    if spec.dtype.name not in ("float16", "bfloat16"):
        return spec
    init = initial_value(spec).astype(np.float32).tobytes() if spec.init is not None else None
    return replace(spec, dtype=np.dtype(np.float32), init=init)


def initial_value(spec: StateSpec) -> np.ndarray:
    """A fresh host array holding the state's exported initial value (or zeros)."""
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
    """Host-memory states for one executor. An in-place state is one buffer;
    a functional one two (`buffers[k]`, `spares[k]`) that calls alternate
    (ping-pong): which one holds the current value is the parity of `swaps`,
    so the pairs never move and every plan made over them stays valid."""

    def __init__(self, specs: list[StateSpec]):
        self.specs = specs
        self.buffers = [initial_value(s) for s in specs]
        self.spares = [None if s.in_place else np.empty_like(b)
                       for s, b in zip(specs, self.buffers)]
        self.calls = 0  # calls the executor ran (the adapter's plans do not count)
        self.method: str | None = None
        self._lock = threading.Lock()
        # Calls run, by the executor (advance) or by a native plan (the adapter
        # adds 1 per run): when odd, each functional state's value is in its spare.
        self.swaps = ctypes.c_uint64(0)

    def current(self, k: int):
        """State k's current value, wherever the ping-pong left it."""
        spare = self.spares[k]
        return spare if spare is not None and self.swaps.value & 1 else self.buffers[k]

    def writes_to(self, k: int):
        """Where the next call writes state k (its buffer again when in place)."""
        spare = self.spares[k]
        if spare is None:
            return self.buffers[k]
        return self.buffers[k] if self.swaps.value & 1 else spare

    def advance(self) -> None:
        """After a call: functional states now live in the buffers just written."""
        self.swaps.value += 1
        self.calls += 1

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

    def reset(self) -> None:
        with self._lock:  # both buffers of a functional state: a plan may read either
            for spec, buf, spare in zip(self.specs, self.buffers, self.spares):
                np.copyto(buf, initial_value(spec))
                if spare is not None:
                    np.copyto(spare, buf)

    def value(self, fqn: str) -> np.ndarray:
        """A host copy of the state's current value (for tests and tools)."""
        for k, spec in enumerate(self.specs):
            if spec.fqn == fqn:
                return self.current(k).copy()
        raise KeyError(f"no state {fqn!r}; states: {[s.fqn for s in self.specs]}")


# -- Torch-TensorRT's TR02 aliased outputs ---------------------------------------
def aliased_pairs(blob: Blob, inputs: Sequence[Binding],
                  outputs: Sequence[Binding]) -> list[tuple[int, int]]:
    """(output index, input index) for each aliased_io entry (names checked by
    read_blob). The caller owns the state (a delegate input and output), so the
    executor must leave the new value in the input's memory as TensorRT's
    in-place layer does, and in the output."""
    in_names, out_names = [b.name for b in inputs], [b.name for b in outputs]
    return [(out_names.index(a.output), in_names.index(a.input))
            for a in blob.meta.aliased_io or ()]



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
