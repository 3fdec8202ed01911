"""runtime/state.py on its own: the position checks every stateful call passes
first, initial values, and ping-pong vs in-place buffers."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from executorch_tensorrt.blob import read_blob, write_blob
from executorch_tensorrt.errors import ArgumentError
from executorch_tensorrt.runtime.arguments import split_bindings
from executorch_tensorrt.runtime.state import (ExecutorState, StateSpec, check_positions,
                                               state_specs)


def spec(in_place=True, cap=8) -> StateSpec:
    return StateSpec("k_cache", "state_in.k", "state_out.k", np.dtype(np.float32), (1, 2, cap, 4),
                     in_place, None, 1, 2)


@pytest.mark.parametrize("positions,words", [
    (list(range(9)), ["9 tokens is longer than the cache", "8 positions"]),
    ([7, 8], ["cache position 8", "valid positions are 0..7"]),
    ([-1], ["cache position -1"]),
    ([2, 4], ["contiguous"]),
])
def test_bad_positions_are_named(positions, words):
    with pytest.raises(ArgumentError) as e:
        check_positions(spec(), positions)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_good_positions_pass():
    check_positions(spec(), [0, 1, 2])
    check_positions(spec(), [7])
    check_positions(spec(in_place=False), [5, 1])  # an index_put may scatter


def test_initial_value_from_section_and_ping_pong():
    init = struct.pack("<64f", *range(64))
    meta = {"io_bindings": [{"name": "pos", "dtype": "int64", "shape": [-1], "is_input": True},
                            {"name": "y", "dtype": "float32", "shape": [1], "is_input": False}],
            "state": [{"fqn": "k", "onnx_input": "state_in.k", "onnx_output": "state_out.k",
                       "dtype": "float32", "shape": [1, 2, 8, 4],
                       "init": "section:state_init.0", "update": "functional",
                       "positions": {"input": "pos", "axis": 2}}]}
    blob = read_blob(write_blob(b"E", meta, b"onnx", sections={"state_init.0": init}))
    inputs, _ = split_bindings(blob.metadata)
    [s] = state_specs(blob, inputs)
    assert s.positions_input == 0 and s.capacity == 8 and not s.in_place
    st = ExecutorState([s])
    assert np.array_equal(st.buffers[0].flatten(), np.arange(64, dtype=np.float32))
    first, spare = st.buffers[0], st.spares[0]
    assert st.current(0) is first and st.writes_to(0) is spare
    st.advance()  # no copy, no move: the parity says which buffer is current
    assert st.current(0) is spare and st.writes_to(0) is first
    assert st.buffers[0] is first and st.spares[0] is spare
    st.current(0).fill(5)
    st.reset()
    assert np.array_equal(st.value("k").flatten(), np.arange(64, dtype=np.float32))
