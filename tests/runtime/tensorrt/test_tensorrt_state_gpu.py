"""A KV cache owned by the TensorRT executor, on a real GPU (issue 13).

Uses a FAKE, labelled stand-in for TensorRT's engine and execution context
(no reachable GPU runs a TensorRT engine): the stand-in's enqueue writes the
new tokens into the cache at the given positions on the stream it is given,
with real CUDA kernels, and answers with the sum over the cache, so a lost or
misplaced write changes every later output. What runs for real: DeviceState's
CUDA buffers, BoundContext binding them, the position check reading positions
from device memory, stream ordering across calls. Skips without CUDA.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from executorch_tensorrt.errors import ArgumentError
from executorch_tensorrt.runtime.adapter import abi
from executorch_tensorrt.runtime.arguments import split_bindings
from executorch_tensorrt.runtime.state import StateSpec
from executorch_tensorrt.runtime.tensorrt.device_state import DeviceState
from executorch_tensorrt.runtime.tensorrt.context import BoundContext

from test_tensorrt_executor_gpu import arg  # tests/runtime

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs CUDA PyTorch and an NVIDIA GPU (device-resident state)")

CUDA = 0  # the runtime's device: a CUDA device index
L, D = 8, 4  # cache length, width
METADATA = {"io_bindings": [
    {"name": "x", "dtype": "float32", "shape": [-1, D], "is_input": True},
    {"name": "pos", "dtype": "int64", "shape": [-1], "is_input": True},
    {"name": "out", "dtype": "float32", "shape": [-1, D], "is_input": False}],
    # The profile allows more tokens than the cache holds, so that the state's
    # own check is the one that refuses a prompt longer than the cache.
    "profiles": [{"name": "x", "min": [1, D], "opt": [1, D], "max": [2 * L, D]},
                 {"name": "pos", "min": [1], "opt": [1], "max": [2 * L]}]}


def view(address: int, shape: tuple[int, ...], typestr: str) -> torch.Tensor:
    class Raw:
        __cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                    "data": (address, False), "version": 2, "strides": None}
    return torch.as_tensor(Raw(), device="cuda")


class StandInEngine:
    """FAKE ICudaEngine: the tensor names DeviceState checks, and the alias
    TensorRT's KV_CACHE_UPDATE layer declares for an in-place cache."""

    names = ["x", "pos", "state_in.k", "out", "state_out.k"]
    num_io_tensors = len(names)

    def get_tensor_name(self, i: int) -> str:
        return self.names[i]

    def get_aliased_input_tensor(self, name: str) -> str | None:
        return "state_in.k" if name == "state_out.k" else None


class StandInKVContext:
    """FAKE IExecutionContext: cache_out = cache_in with rows pos <- x;
    out[i] = sum over the cache of cache_out (every row the same)."""

    def __init__(self) -> None:
        self.shapes: dict[str, tuple] = {}
        self.addresses: dict[str, int] = {}
        self.enqueues = 0

    def set_input_shape(self, name, shape) -> bool:
        self.shapes[name] = tuple(shape)
        return True

    def get_tensor_shape(self, name):
        assert name == "out"
        return self.shapes["x"]

    def set_tensor_address(self, name, address) -> bool:
        self.addresses[name] = address
        return True

    def execute_async_v3(self, stream: int) -> bool:
        self.enqueues += 1
        s = self.shapes["x"][0]
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            a = self.addresses
            x, pos = view(a["x"], (s, D), "<f4"), view(a["pos"], (s,), "<i8")
            cache_in = view(a["state_in.k"], (1, L, D), "<f4")
            cache_out = view(a["state_out.k"], (1, L, D), "<f4")
            torch.cuda._sleep(2_000_000)  # a missing stream order shows up as a stale read
            if cache_out.data_ptr() != cache_in.data_ptr():
                cache_out.copy_(cache_in)
            cache_out[0].index_copy_(0, pos, x)
            view(a["out"], (s, D), "<f4").copy_(cache_out[0].sum(0).expand(s, D))
        return True


def stateful_context(in_place: bool) -> tuple[BoundContext, StandInKVContext]:
    inputs, outputs = split_bindings(METADATA)
    context = StandInKVContext()
    bound = BoundContext(context, inputs, outputs, CUDA, graphs=True)
    spec = StateSpec("layers.0.k_cache", "state_in.k", "state_out.k", np.dtype(np.float32),
                     (1, L, D), in_place, None, positions_input=1, positions_axis=1)
    bound.state = DeviceState([spec], StandInEngine(), CUDA)
    return bound, context


def call(bound: BoundContext, tokens: torch.Tensor, first: int, device: str = "cuda"):
    x = tokens.to(device)
    pos = torch.arange(first, first + len(tokens), dtype=torch.int64, device=device)
    out = torch.empty(len(tokens), D, device=device)
    keep: list = []
    args = [arg(x, True, keep), arg(pos, True, keep, dtype=4), arg(out, False, keep)]
    bound.execute((abi.EtrtArg * 3)(*args))
    return out


@pytest.mark.parametrize("in_place", [True, False], ids=["in_place", "ping_pong"])
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_the_cache_lives_on_the_gpu_across_calls(in_place, device):
    bound, context = stateful_context(in_place)
    buffers = {t.address for t in bound.state.buffers + [s for s in bound.state.spares if s is not None]}
    assert all(t.nbytes == L * D * 4 for t in bound.state.buffers)  # read as CUDA memory below
    torch.manual_seed(0)
    reference = torch.zeros(L, D)
    first = 0
    for n in (3, 1, 1, 2):  # a prompt, then tokens one at a time
        tokens = torch.randn(n, D)
        out = call(bound, tokens, first, device)
        torch.cuda.synchronize()
        reference[first:first + n] = tokens
        assert torch.allclose(out.cpu(), reference.sum(0).expand(n, D), atol=1e-5)
        first += n
    # The state never left the GPU and no buffer was allocated per call.
    now = {t.address for t in bound.state.buffers + [s for s in bound.state.spares if s is not None]}
    assert now == buffers
    cache = view(bound.state.buffers[0].address, (1, L, D), "<f4")
    assert torch.allclose(cache[0, :first].cpu(), reference[:first])
    if in_place:
        assert context.addresses["state_in.k"] == context.addresses["state_out.k"]
    # Captured into a CUDA graph only where the adapter's plan can check the
    # positions in C++ (in-place state, positions in host memory); else plain enqueues.
    captured = bound.graph is not None and bound.graph.captures > 0
    assert captured == (in_place and device == "cpu")


def test_positions_outside_the_cache_fail_before_the_engine_runs():
    bound, context = stateful_context(True)
    call(bound, torch.ones(2, D), 0)
    with pytest.raises(ArgumentError, match=r"cache position 8 .*valid positions are 0\.\.7"):
        call(bound, torch.ones(1, D), L)  # positions read from device memory
    with pytest.raises(ArgumentError, match="longer than the cache"):
        call(bound, torch.ones(L + 1, D), 0)
    assert context.enqueues == 1


def test_reset_returns_the_cache_to_its_initial_value():
    bound, _ = stateful_context(True)
    call(bound, torch.ones(4, D), 0)
    bound.state.reset()
    out = call(bound, torch.full((1, D), 2.0), 0)
    torch.cuda.synchronize()
    assert torch.equal(out.cpu(), torch.full((1, D), 2.0))


class StandInAliasContext:
    """FAKE IExecutionContext of a Torch-TensorRT TR02 engine: its output
    "cache_out" aliases input "cache" (written in place: cache += 1)."""

    def __init__(self) -> None:
        self.shapes: dict[str, tuple] = {}
        self.addresses: dict[str, int] = {}

    def set_input_shape(self, name, shape) -> bool:
        self.shapes[name] = tuple(shape)
        return True

    def get_tensor_shape(self, name):
        return self.shapes["cache"]

    def set_tensor_address(self, name, address) -> bool:
        self.addresses[name] = address
        return True

    def execute_async_v3(self, stream: int) -> bool:
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            torch.cuda._sleep(2_000_000)
            view(self.addresses["cache_out"], self.shapes["cache"], "<f4").add_(1.0)
        return True


def test_tr02_aliased_output_is_written_in_place_then_into_its_slot():
    meta = {"io_bindings": [
        {"name": "cache", "dtype": "float32", "shape": [2, 3], "is_input": True},
        {"name": "cache_out", "dtype": "float32", "shape": [2, 3], "is_input": False}]}
    inputs, outputs = split_bindings(meta)
    context = StandInAliasContext()
    bound = BoundContext(context, inputs, outputs, CUDA, graphs=False)
    bound.aliases = {0: 0}  # output 0 aliases input 0
    cache, slot = torch.ones(2, 3, device="cuda"), torch.zeros(2, 3, device="cuda")
    keep: list = []
    for expected in (2.0, 3.0):  # the state survives calls in the caller's buffer
        bound.execute((abi.EtrtArg * 2)(arg(cache, True, keep), arg(slot, False, keep)))
        torch.cuda.synchronize()
        assert context.addresses["cache_out"] == cache.data_ptr()
        assert torch.equal(cache.cpu(), torch.full((2, 3), expected))
        assert torch.equal(slot.cpu(), torch.full((2, 3), expected))  # the reflected copy
