"""A stateful partition's native plan on a real GPU (issue 23): a decode loop over a
KV cache updated in place runs in the adapter's C++ after its first calls, the
cache positions checked there (runtime/tensorrt/cuda_graph_plan.py,
native/src/plans/cuda_graph_plan.cpp, native/src/plans/position_checks.cpp).

Uses a FAKE, labelled stand-in for TensorRT's engine and execution context
(DecodeContext below; no reachable GPU runs a TensorRT engine): its enqueue
writes the new token into the cache at the given position with real CUDA
kernels, on the stream it is given, and answers with the sum over the cache, so
a lost, stale or misplaced write changes every later output. Real: DeviceState's
CUDA buffers, BoundContext, the graph capture, the adapter's plan (dispatched as
tensorrt_backend.cpp does, through etrt_cuda_graph_plan_matches / _replay, as in
test_tensorrt_plan_gpu.py). Skips without CUDA PyTorch and a GPU.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch

from executorch_tensorrt.runtime.adapter import abi
from executorch_tensorrt.runtime.arguments import split_bindings
from executorch_tensorrt.runtime.state import StateSpec
from executorch_tensorrt.runtime.tensorrt.context import BoundContext
from executorch_tensorrt.runtime.tensorrt.device_state import DeviceState
from executorch_tensorrt.runtime.testing import executor_over_bound_context

from test_tensorrt_executor_gpu import arg  # tests/runtime
from test_tensorrt_plan_gpu import Dispatch, adapter
from test_tensorrt_state_gpu import METADATA, StandInEngine, view, D, L

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs CUDA PyTorch and an NVIDIA GPU (CUDA graph replay of a stateful partition)")


class DecodeContext:
    """FAKE IExecutionContext (labelled), one token per call: the cache's row
    pos <- x (in place, or into the other buffer of a ping-pong state), out =
    the sum of the cache's rows. Its views are made
    outside captures (the first call with new bindings is never captured) and
    no kernel allocates, so the enqueue can be captured into a graph."""

    def __init__(self, sleep_cycles: int = 200_000) -> None:
        self.shapes: dict[str, tuple] = {}
        self.addresses: dict[str, int] = {}
        self.sleep_cycles = sleep_cycles
        self._views: dict[tuple, torch.Tensor] = {}

    def set_input_shape(self, name, shape) -> bool:
        self.shapes[name] = tuple(shape)
        return True

    def get_tensor_shape(self, name):
        return self.shapes["x"]

    def set_tensor_address(self, name, address) -> bool:
        self.addresses[name] = address
        return True

    def is_stream_capturable(self, stream) -> bool:
        return True

    def _view(self, name: str, shape: tuple, typestr: str) -> torch.Tensor:
        key = (self.addresses[name], shape)
        if key not in self._views:
            self._views[key] = view(self.addresses[name], shape, typestr)
        return self._views[key]

    def execute_async_v3(self, stream: int) -> bool:
        assert self.shapes["x"][0] == 1, "the decode stand-in takes one token per call"
        x, pos = self._view("x", (1, D), "<f4"), self._view("pos", (1,), "<i8")
        cache = self._view("state_out.k", (L, D), "<f4")
        out = self._view("out", (D,), "<f4")
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            if self.sleep_cycles:  # a missing stream order shows up as a stale read
                torch.cuda._sleep(self.sleep_cycles)
            if self.addresses["state_in.k"] != self.addresses["state_out.k"]:  # ping-pong
                cache.copy_(self._view("state_in.k", (L, D), "<f4"))
            cache.index_copy_(0, pos, x)
            torch.sum(cache, 0, out=out)
        return True


def decode_executor(in_place: bool = True, sleep_cycles: int = 200_000):
    inputs, outputs = split_bindings(METADATA)
    bound = BoundContext(DecodeContext(sleep_cycles), inputs, outputs, 0, graphs=True)
    spec = StateSpec("layers.0.k_cache", "state_in.k", "state_out.k", np.dtype(np.float32),
                     (1, L, D), in_place, None, positions_input=1, positions_axis=1)
    bound.state = DeviceState([spec], StandInEngine(), 0)
    return executor_over_bound_context(bound)


class DecodeArgs:
    """One token's arguments at fixed addresses (as ExecuTorch's memory plan
    gives them): x [1, D] and out [1, D] in `where` memory, the int64 position
    [1] on the host."""

    def __init__(self, where: str) -> None:
        self.x = torch.zeros(1, D, device=where)
        self.pos = torch.zeros(1, dtype=torch.int64)
        self.out = torch.zeros(1, D, device=where)
        self._keep: list = []
        self.args = (abi.EtrtArg * 3)(arg(self.x, True, self._keep), arg(self.pos, True, self._keep, dtype=4),
                                      arg(self.out, False, self._keep))

    def set(self, token: torch.Tensor, position: int) -> None:
        self.x.copy_(token.view(1, D))
        self.pos[0] = position


def python_path_outputs(tokens: torch.Tensor, positions, where: str) -> list[torch.Tensor]:
    """The same calls through the Python executor only (no plan)."""
    ex, a, outs = decode_executor(), DecodeArgs(where), []
    for token, p in zip(tokens, positions):
        a.set(token, p)
        ex.execute(a.args)
        torch.cuda.synchronize()
        outs.append(a.out.cpu().clone())
    return outs


@pytest.mark.parametrize("where", ["cuda", "cpu"])
def test_decode_loop_runs_in_cpp_after_the_first_calls(where):
    lib = adapter()
    ex = decode_executor()
    run = Dispatch(lib, ex)
    a = DecodeArgs(where)
    torch.manual_seed(0)
    tokens = torch.randn(L, D)
    positions = list(range(L - 2)) + [3, 4]  # a step back (both paths rewrite the row)
    outs = []
    for token, p in zip(tokens, positions):
        a.set(token, p)
        run(a.args)
        torch.cuda.synchronize()
        outs.append(a.out.cpu().clone())
    # a plain enqueue, a capture and replay; then the adapter's plan only
    assert run.entries.count == 2
    assert ex.plan_launches.value == L - 2
    assert ex.bound.graph.captures == 1
    reference = python_path_outputs(tokens, positions, where)
    for k, (got, want) in enumerate(zip(outs, reference)):
        assert torch.equal(got, want), k
    cache = torch.zeros(L, D)
    for token, p in zip(tokens, positions):
        cache[p] = token
    assert torch.allclose(outs[-1][0], cache.sum(0), atol=1e-5)
    assert torch.equal(torch.as_tensor(ex.bound.state.value("layers.0.k_cache"))[0], cache)


def test_a_position_outside_the_cache_is_refused_in_cpp_and_writes_nothing():
    lib = adapter()
    ex = decode_executor()
    run = Dispatch(lib, ex)
    a = DecodeArgs("cuda")
    for p in range(3):
        a.set(torch.full((D,), float(p + 1)), p)
        run(a.args)
    torch.cuda.synchronize()
    assert run.plan is not None and ex.plan_launches.value == 1
    before = ex.bound.state.value("layers.0.k_cache")
    launches = ex.plan_launches.value
    for bad in (L, -1):
        a.set(torch.full((D,), 9.0), bad)
        assert lib.etrt_cuda_graph_plan_matches(run.plan, a.args, 3) == 1  # same signature
        assert lib.etrt_cuda_graph_plan_replay(run.plan, a.args, 3, 1) == -1
        error = lib.etrt_last_error().decode()
        assert f"cache position {bad} (index 0 of the positions input) is outside the cache" in error
        assert "state 'layers.0.k_cache' (axis 1 holds 8 positions)" in error
    assert ex.plan_launches.value == launches  # nothing launched
    assert np.array_equal(ex.bound.state.value("layers.0.k_cache"), before)  # nothing written
    assert run.entries.count == 2


def test_a_reset_sends_the_next_call_to_python_which_plans_again():
    lib = adapter()
    ex = decode_executor()
    run = Dispatch(lib, ex)
    a = DecodeArgs("cuda")
    for p in range(4):
        a.set(torch.full((D,), 1.0), p)
        run(a.args)
    assert run.entries.count == 2
    ex.bound.state.reset()  # executorch_tensorrt.reset_state does this per live state
    a.set(torch.full((D,), 5.0), 0)
    run(a.args)  # the plan's state epoch moved: the executor runs it and plans again
    torch.cuda.synchronize()
    assert run.entries.count == 3
    assert torch.equal(a.out.cpu(), torch.full((1, D), 5.0))  # the cache started empty
    a.set(torch.full((D,), 2.0), 1)
    run(a.args)
    torch.cuda.synchronize()
    assert run.entries.count == 3  # the new plan
    assert torch.equal(a.out.cpu(), torch.full((1, D), 7.0))


def test_no_plan_for_ping_pong_state_or_device_positions():
    ex = decode_executor(in_place=False)
    a = DecodeArgs("cuda")
    for p in range(3):
        a.set(torch.ones(D), p)
        ex.execute(a.args)
        assert ex.native_plan() is None  # two buffers alternate: plain enqueues
    ex = decode_executor()
    keep: list = []
    x, pos, out = torch.ones(1, D, device="cuda"), torch.zeros(1, dtype=torch.int64, device="cuda"), \
        torch.zeros(1, D, device="cuda")
    args = (abi.EtrtArg * 3)(arg(x, True, keep), arg(pos, True, keep, dtype=4), arg(out, False, keep))
    for p in range(3):
        pos.fill_(p)
        ex.execute(args)
    assert ex.bound.last_graph_call is not None  # it replays in Python
    assert ex.native_plan() is None  # but the adapter reads positions in host memory only
