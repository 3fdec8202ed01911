"""The CUDA-graph plan of a stateful partition, on the CPU (native/src/plans/cuda_graph_plan.cpp,
native/src/plans/position_checks.cpp): the adapter checks the KV cache's write positions
before it copies or launches anything, in the executor's own words, stops at a
reset of the state, and refuses position checks it cannot perform. Runs the real
adapter and the real plan builder (runtime/tensorrt/cuda_graph_plan.py); the CUDA
handles and the state's device buffers are plain numbers that these paths never
dereference (no GPU here: a run that passes the checks needs the driver, so only
refused runs are made; the decode loop itself is test_tensorrt_plan_gpu.py on the H200).
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from executorch_tensorrt.errors import ArgumentError
from executorch_tensorrt.runtime.adapter import abi
from executorch_tensorrt.runtime.adapter.loader import load_adapter
from executorch_tensorrt.runtime.native_plan import signature_key
from executorch_tensorrt.runtime.state import ExecutorState, StateSpec, check_positions
from executorch_tensorrt.runtime.tensorrt.cuda_graph_plan import CudaGraphPlan, GraphCall

L, D = 8, 4  # cache length, width
DEVICE_BASE = 0x7F0000000000
LONG, FLOAT = 4, 6  # ExecuTorch ScalarType
SPEC = StateSpec("layers.0.k_cache", "state_in.k", "state_out.k", np.dtype(np.float32),
                 (1, L, D), True, None, positions_input=1, positions_axis=1)


@pytest.fixture(scope="module")
def lib():
    lib = load_adapter()
    plan, args = ctypes.POINTER(abi.EtrtNativePlan), ctypes.POINTER(abi.EtrtArg)
    lib.etrt_cuda_graph_plan_matches.argtypes = [plan, args, ctypes.c_uint64]
    lib.etrt_cuda_graph_plan_matches.restype = ctypes.c_int32
    lib.etrt_cuda_graph_plan_replay.argtypes = [plan, args, ctypes.c_uint64, ctypes.c_uint64]
    lib.etrt_cuda_graph_plan_replay.restype = ctypes.c_int64
    lib.etrt_last_error.restype = ctypes.c_char_p
    return lib


class Buffer:
    def __init__(self, address: int, nbytes: int) -> None:
        self.address, self.nbytes = address, nbytes


class State:
    """What CudaGraphPlan reads of a DeviceState (which needs CUDA): the
    executor's real position checks, a buffer address and the reset epoch."""

    def __init__(self) -> None:
        self.position_checks = ExecutorState([SPEC]).position_checks
        self.buffers = [Buffer(DEVICE_BASE + 65536, L * D * 4)]
        self.epoch = ctypes.c_uint64(3)


class Bound:
    device, stream, scratch = 0, type("S", (), {"handle": 0x5000})(), None

    def __init__(self) -> None:
        self.state = State()


def tensor(k: int, dtype: int, sizes: tuple, nbytes: int, keep: list, host=None) -> abi.EtrtArg:
    a = abi.EtrtArg()
    s, order = (ctypes.c_int32 * len(sizes))(*sizes), (ctypes.c_uint8 * len(sizes))(*range(len(sizes)))
    keep += [s, order]
    a.struct_size, a.kind, a.is_input, a.dtype = ctypes.sizeof(a), abi.ETRT_ARG_TENSOR, k < 2, dtype
    a.nbytes, a.ndim = nbytes, len(sizes)
    a.sizes = ctypes.cast(s, ctypes.POINTER(ctypes.c_int32))
    a.dim_order = ctypes.cast(order, ctypes.POINTER(ctypes.c_uint8))
    a.device_type, a.data = abi.ETRT_DEVICE_CUDA, DEVICE_BASE + 256 * k
    if host is not None:
        a.device_type, a.data = abi.ETRT_DEVICE_CPU, host.ctypes.data
    return a


def decode_args(positions: np.ndarray | None, keep: list):
    """x [n, D] and out [n, D] in CUDA memory; the int64 positions [n] on the
    host (or in CUDA memory when None)."""
    n = 1 if positions is None else len(positions)
    return (abi.EtrtArg * 3)(tensor(0, FLOAT, (n, D), n * D * 4, keep),
                             tensor(1, LONG, (n,), n * 8, keep, positions),
                             tensor(2, FLOAT, (n, D), n * D * 4, keep))


def plan_for(args, bound: Bound, staged=True) -> CudaGraphPlan:
    n = args[1].nbytes
    call = GraphCall(graph_exec=0x1000, caller_stream=0, ready_event=0x2000, done_event=0x3000,
                     staged_inputs=((1, DEVICE_BASE + 8192, n),) if staged else (),
                     staged_outputs=(), generation=1)
    return CudaGraphPlan(bound, call, args, 3, signature_key(args, 3), context=0x4000,
                         launches=ctypes.c_uint64(0))


def python_words(positions) -> str:
    with pytest.raises(ArgumentError) as e:
        check_positions(SPEC, list(positions))
    return str(e.value)


def test_the_plan_names_the_state_and_its_checks(lib):
    keep: list = []
    positions = np.array([5], np.int64)
    args = decode_args(positions, keep)
    bound = Bound()
    plan = plan_for(args, bound)
    g = plan.graph
    assert (g.num_states, g.states[0].device, g.states[0].nbytes) == (1, DEVICE_BASE + 65536, L * D * 4)
    assert (g.state_epoch.contents.value, g.state_epoch_at_plan) == (3, 3)
    c = plan.struct.position_checks[0]
    assert (plan.struct.num_position_checks, c.arg_index, c.capacity, c.in_place) == (1, 1, L, 1)
    assert lib.etrt_cuda_graph_plan_matches(ctypes.pointer(plan.struct), args, 3) == 1
    assert plan.live(bound_with_graph(bound))


def bound_with_graph(bound: Bound) -> Bound:
    bound.graph = type("G", (), {"exec": 0x1000, "generation": 1})()
    return bound


@pytest.mark.parametrize("values", [[L], [-1], [2, 4]], ids=["past_the_end", "negative", "gap"])
def test_positions_refused_in_cpp_with_the_executors_words(lib, values):
    keep: list = []
    positions = np.array(values, np.int64)
    args = decode_args(positions, keep)
    plan = plan_for(args, Bound())
    p = ctypes.pointer(plan.struct)
    assert lib.etrt_cuda_graph_plan_matches(p, args, 3) == 1  # the signature holds
    assert lib.etrt_cuda_graph_plan_replay(p, args, 3, 1) == -1  # its values do not
    error = lib.etrt_last_error().decode()
    assert error == "TensorRTBackend execute: " + python_words(values), error
    assert plan.graph.launches.contents.value == 0  # refused before any launch


def test_a_prompt_longer_than_the_cache_is_refused(lib):
    keep: list = []
    positions = np.arange(L + 1, dtype=np.int64)
    args = decode_args(positions, keep)
    plan = plan_for(args, Bound())
    assert lib.etrt_cuda_graph_plan_replay(ctypes.pointer(plan.struct), args, 3, 1) == -1
    assert lib.etrt_last_error().decode() == "TensorRTBackend execute: " + python_words(positions)


def test_a_reset_stops_the_plan(lib):
    keep: list = []
    args = decode_args(np.array([5], np.int64), keep)
    bound = bound_with_graph(Bound())
    plan = plan_for(args, bound)
    p = ctypes.pointer(plan.struct)
    assert lib.etrt_cuda_graph_plan_matches(p, args, 3) == 1
    bound.state.epoch.value += 1  # what DeviceState.reset does first
    assert lib.etrt_cuda_graph_plan_matches(p, args, 3) == 0
    assert not plan.live(bound)  # the executor builds a new plan


def test_checks_the_adapter_cannot_perform_refuse_the_plan(lib):
    keep: list = []
    # positions in CUDA memory (not staged): the adapter would have to read device memory
    args = decode_args(None, keep)
    args[1].device_type = abi.ETRT_DEVICE_CUDA
    assert lib.etrt_cuda_graph_plan_matches(ctypes.pointer(plan_for(args, Bound(), False).struct),
                                            args, 3) == -1
    # a check on a float input, and one past the arguments
    host = decode_args(np.array([5], np.int64), keep)
    for index in (0, 3):
        plan = plan_for(host, Bound())
        plan.struct.position_checks[0].arg_index = index
        assert lib.etrt_cuda_graph_plan_matches(ctypes.pointer(plan.struct), host, 3) == -1, index
    # a named state buffer at address 0
    plan = plan_for(host, Bound())
    plan.graph.states[0].device = 0
    assert lib.etrt_cuda_graph_plan_matches(ctypes.pointer(plan.struct), host, 3) == -1
