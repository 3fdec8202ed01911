"""The onnxruntime executor's share of partition state (runtime/state.py).

OrtStatefulSession hides the state inputs and outputs of the embedded ONNX
model behind an OrtSession that shows only the user's, binding the host
buffers of an ExecutorState in place (or ping-pong) with no copy; the native
plans get the same arrays from plan_values. reflect_aliases gives TR02
aliased outputs (Torch-TensorRT's in-place state) the in-place effect
TensorRT would have: onnxruntime computes them out of place, on the host.
Only the onnxruntime executor uses either.
"""
from __future__ import annotations

import ctypes
import math
from typing import Sequence

import numpy as np

from ...errors import ArgumentError, InvalidProgramError
from ..adapter import abi
from ..arguments import SCALAR_TYPE_TO_NUMPY, Binding, dtype_name
from ..state import ExecutorState

__all__ = ["OrtStatefulSession", "reflect_aliases"]


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
        with st._lock:
            n = len(st.specs)
            full_in, full_out = self._full(inputs, outputs, map(st.current, range(n)),
                                           map(st.writes_to, range(n)))
            self.inner.run(full_in, full_out)
            st.advance()
        for j in range(self.n_out):  # outputs onnxruntime allocated: the caller releases them
            outputs[j] = full_out[j]

    def plan_values(self, inputs: ctypes.Array, outputs: ctypes.Array):
        """The arrays a native plan runs: (inputs, outputs, alt_inputs,
        alt_outputs), each the user values then the states' OrtValues. An
        in-place state is one OrtValue at both ends; a functional one reads
        its buffer and writes its spare in the even pair, the reverse in the
        alt pair (None without functional states); the adapter picks the pair
        by the parity of state.swaps and adds 1 per run, as the executor's
        own calls do, so a plan stays valid whoever ran the calls before it."""
        st = self.state
        writes = [b if s is None else s for b, s in zip(st.buffers, st.spares)]
        full_in, full_out = self._full(inputs, outputs, st.buffers, writes)
        if all(s is None for s in st.spares):
            return full_in, full_out, None, None
        alt_in, alt_out = self._full(inputs, outputs, writes, st.buffers)
        return full_in, full_out, alt_in, alt_out

    def end_profiling(self) -> str:
        return self.inner.end_profiling()

    def close(self) -> None:
        for v in self._values.values():
            self.api.ReleaseValue(v)
        self._values.clear()
        self.inner.close()



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
