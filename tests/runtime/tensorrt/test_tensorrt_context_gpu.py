"""BoundContext on a real GPU: bind once, asynchronous device-resident calls,
the shared scratch area, and the device chosen at load (docs/gpu-runtime.md).

Uses the FAKE, labelled StandInContext of test_tensorrt_executor_gpu.py in
place of TensorRT's IExecutionContext (no reachable GPU runs a TensorRT
engine); the streams, events, kernels and memory are real. Skips without
CUDA PyTorch and a GPU.
"""
from __future__ import annotations

import time
import weakref
from types import SimpleNamespace

import pytest
import torch

from executorch_tensorrt.errors import ArgumentError
from executorch_tensorrt.runtime.adapter import abi
from executorch_tensorrt.runtime.arguments import split_bindings
from executorch_tensorrt.runtime.cuda.device import DEVICE_ENV, chosen_device
from executorch_tensorrt.runtime.tensorrt.context import (
    SHARED_SCRATCH_ENV,
    BoundContext,
    SharedScratch,
    create_context,
)

from test_tensorrt_executor_gpu import METADATA, SHAPE, StandInContext, arg  # tests/runtime

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs CUDA PyTorch and an NVIDIA GPU (device memory, streams and events)")

CUDA = 0  # the runtime's device: a CUDA device index
DYNAMIC = {"io_bindings": [
    {"name": n, "dtype": "float32", "shape": [-1, 3], "is_input": n != "out"}
    for n in ("x", "y", "out")],
    "profiles": [{"name": n, "min": [1, 3], "opt": [4, 3], "max": [64, 3]} for n in ("x", "y")]}


def bound_context(context, metadata=METADATA, **kwargs) -> BoundContext:
    inputs, outputs = split_bindings(metadata)
    return BoundContext(context, inputs, outputs, CUDA, **kwargs)


def args_of(x, y, out, keep):
    return (abi.EtrtArg * 3)(arg(x, True, keep), arg(y, True, keep), arg(out, False, keep))


# -- bind once, re-bind on change -----------------------------------------------------------

@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_an_identical_second_call_sets_nothing(device):
    context = StandInContext(sleep_cycles=0)
    bound = bound_context(context, graphs=False)
    x, y, out = (torch.full(SHAPE, v, device=device) for v in (1.0, 2.0, 0.0))
    keep: list = []
    args = args_of(x, y, out, keep)
    bound.execute(args)
    assert context.calls == {"set_input_shape": 2, "set_tensor_address": 3,
                             "get_tensor_shape": 1, "set_device_memory": 0}
    context.reset_calls()
    x.fill_(5.0)
    bound.execute(args)
    assert context.calls == dict.fromkeys(context.calls, 0)
    torch.cuda.synchronize()
    assert torch.equal(out.cpu(), torch.full(SHAPE, 12.0))


def test_a_new_address_sets_exactly_one():
    context = StandInContext(sleep_cycles=0)
    bound = bound_context(context, graphs=False)
    x, y, out = (torch.full(SHAPE, v, device="cuda") for v in (1.0, 2.0, 0.0))
    keep: list = []
    bound.execute(args_of(x, y, out, keep))
    context.reset_calls()
    other = torch.zeros(SHAPE, device="cuda")
    bound.execute(args_of(x, y, other, keep))
    assert context.calls["set_tensor_address"] == 1 and context.addresses["out"] == other.data_ptr()
    assert sum(context.calls.values()) == 1
    assert torch.equal(other.cpu(), torch.full(SHAPE, 4.0))


def test_a_new_shape_sets_the_shapes_and_asks_for_the_outputs_again():
    context = StandInContext(sleep_cycles=0)
    bound = bound_context(context, DYNAMIC, graphs=False)
    big = [torch.zeros(64, 3, device="cuda") for _ in range(3)]
    keep: list = []
    for rows, shape_calls in ((2, 2), (2, 0), (5, 2), (5, 0), (2, 2)):
        x, y, out = (b[:rows] for b in big)  # same addresses, other shapes
        x.fill_(rows)
        y.fill_(1.0)
        context.reset_calls()
        bound.execute(args_of(x, y, out, keep))
        assert context.calls["set_input_shape"] == shape_calls
        assert context.calls["get_tensor_shape"] == (1 if shape_calls else 0)
        assert torch.equal(out.cpu(), torch.full((rows, 3), 2.0 * rows + 1))


# -- asynchronous device-resident execution --------------------------------------------------

def test_the_callers_stream_waits_for_the_engine():
    """The caller reads the output on its own stream right after execute: it
    must see the engine's result. Fails without the event wait (the engine
    sleeps ~50M cycles on the context's stream)."""
    context = StandInContext(sleep_cycles=50_000_000)
    bound = bound_context(context, graphs=False)
    caller = torch.cuda.Stream()
    x, y, out = (torch.full(SHAPE, v, device="cuda") for v in (1.0, 2.0, 0.0))
    keep: list = []
    args = args_of(x, y, out, keep)
    torch.cuda.synchronize()
    with torch.cuda.stream(caller):
        bound.execute(args)
        seen = out.clone()  # queued on the caller's stream
    caller.synchronize()
    assert torch.equal(seen.cpu(), torch.full(SHAPE, 4.0))


def test_inputs_written_on_the_callers_stream_are_waited_for():
    context = StandInContext(sleep_cycles=0)
    bound = bound_context(context, graphs=False)
    caller = torch.cuda.Stream()
    x, y, out = (torch.zeros(SHAPE, device="cuda") for _ in range(3))
    keep: list = []
    torch.cuda.synchronize()
    with torch.cuda.stream(caller):
        torch.cuda._sleep(50_000_000)  # delays the write below
        x.fill_(3.0)
        bound.execute(args_of(x, y, out, keep))
        seen = out.clone()
    caller.synchronize()
    assert torch.equal(seen.cpu(), torch.full(SHAPE, 6.0))


def test_a_device_resident_call_does_not_synchronize_the_host():
    """execute returns while the engine still runs: an event recorded on the
    caller's stream right after it is not complete yet, and the call took far
    less than the engine's ~100M-cycle sleep. Fails with a host synchronize."""
    context = StandInContext(sleep_cycles=100_000_000)
    bound = bound_context(context, graphs=False)
    x, y, out = (torch.full(SHAPE, v, device="cuda") for v in (1.0, 2.0, 0.0))
    keep: list = []
    args = args_of(x, y, out, keep)
    bound.execute(args)  # first call: whatever lazy setup torch does
    torch.cuda.synchronize()
    after = torch.cuda.Event(enable_timing=True)
    before = torch.cuda.Event(enable_timing=True)
    before.record()
    t0 = time.perf_counter()
    bound.execute(args)
    returned = time.perf_counter() - t0
    after.record()  # on the caller's (default) stream: waits for the engine
    still_running = not after.query()
    after.synchronize()
    engine_ms = before.elapsed_time(after)
    assert still_running, f"execute returned after the engine finished ({returned * 1e3:.2f} ms)"
    assert returned * 1e3 < engine_ms / 4, (returned * 1e3, engine_ms)
    assert torch.equal(out.cpu(), torch.full(SHAPE, 4.0))


def test_close_waits_for_a_call_still_running():
    """The executor drops the context after close(); its work must be done."""
    context = StandInContext(sleep_cycles=100_000_000)
    bound = bound_context(context, graphs=False)
    x, y, out = (torch.full(SHAPE, v, device="cuda") for v in (1.0, 2.0, 0.0))
    keep: list = []
    bound.execute(args_of(x, y, out, keep))
    assert not bound.stream.query(), "the engine finished before close: the test shows nothing"
    bound.close()
    assert bound.stream.query()


def test_host_outputs_are_complete_on_return():
    context = StandInContext(sleep_cycles=50_000_000)
    bound = bound_context(context, graphs=False)
    x, y = torch.full(SHAPE, 1.0, device="cuda"), torch.full(SHAPE, 2.0, device="cuda")
    out = torch.zeros(SHAPE)  # host: copied back before execute returns
    keep: list = []
    bound.execute(args_of(x, y, out, keep))
    assert torch.equal(out, torch.full(SHAPE, 4.0))


# -- one scratch area for several partitions -------------------------------------------------

def test_partitions_share_one_scratch_area_sized_for_the_largest():
    """Two partitions whose engines compute through the same scratch memory,
    called from two caller streams at once: they run one after another on the
    scratch's stream, so neither corrupts the other's intermediate."""
    scratch = SharedScratch(CUDA)
    scratch.reserve(1024)
    a_context, b_context = StandInContext(50_000_000), StandInContext(50_000_000)
    a = bound_context(a_context, graphs=False, scratch=scratch)
    scratch.reserve(4096)  # the second partition needs more
    b = bound_context(b_context, graphs=False, scratch=scratch)
    assert a.stream is b.stream is scratch.stream
    keep: list = []
    xa, ya, outa = (torch.full(SHAPE, v, device="cuda") for v in (1.0, 2.0, 0.0))
    xb, yb, outb = (torch.full(SHAPE, v, device="cuda") for v in (10.0, 20.0, 0.0))
    sa, sb = torch.cuda.Stream(), torch.cuda.Stream()
    for _ in range(3):
        torch.cuda.synchronize()
        with torch.cuda.stream(sa):
            a.execute(args_of(xa, ya, outa, keep))
        with torch.cuda.stream(sb):
            b.execute(args_of(xb, yb, outb, keep))
        torch.cuda.synchronize()
        assert torch.equal(outa.cpu(), torch.full(SHAPE, 4.0))
        assert torch.equal(outb.cpu(), torch.full(SHAPE, 40.0))
    assert a_context.device_memory == b_context.device_memory == (scratch.address, 4096)
    assert a_context.calls["set_device_memory"] == b_context.calls["set_device_memory"] == 1


# -- the GPU chosen at load ------------------------------------------------------------------

def test_device_from_the_environment(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cuda:0")
    assert chosen_device({"device_id": 7}) == 0
    count = torch.cuda.device_count()
    monkeypatch.setenv(DEVICE_ENV, str(count))
    with pytest.raises(ArgumentError, match=rf"{DEVICE_ENV}={count} asks for CUDA device "
                                            rf"{count}, but only {count} device\(s\) exist"):
        chosen_device({})


# -- create_context: allocation strategy, scratch sizing, TensorRT-RTX's runtime config ---------

class StandInEngine:
    """FAKE ICudaEngine (labelled, like StandInContext): hands out stand-in
    contexts and records what create_context asked for."""

    def __init__(self, memory: int) -> None:
        self.device_memory_size_v2 = memory
        self.created_with: list = []

    def create_execution_context(self, how):
        self.created_with.append(how)
        return StandInContext(0)


class StandInRtxEngine(StandInEngine):
    """FAKE TensorRT-RTX engine: it also has create_runtime_config."""

    def create_runtime_config(self):
        engine = self

        class Config:
            cuda_graph_strategy = None
            runtime_cache = None

            def set_execution_context_allocation_strategy(self, strategy):
                self.strategy = strategy

            def set_runtime_cache(self, cache):
                self.runtime_cache = cache
                return True

        engine.config = Config()
        return engine.config


STANDIN_TRT = SimpleNamespace(module=SimpleNamespace(
    ExecutionContextAllocationStrategy=SimpleNamespace(STATIC="static", USER_MANAGED="user"),
    CudaGraphStrategy=SimpleNamespace(DISABLED="disabled", WHOLE_GRAPH_CAPTURE="whole")))


@pytest.fixture
def fresh_scratch(monkeypatch):
    monkeypatch.setattr(SharedScratch, "_per_device", weakref.WeakValueDictionary())
    monkeypatch.delenv(SHARED_SCRATCH_ENV, raising=False)


def test_contexts_get_user_managed_memory_from_one_scratch(fresh_scratch):
    small, large = StandInEngine(1000), StandInEngine(5000)
    a, b = (create_context(STANDIN_TRT, e, CUDA, graphs=False) for e in (small, large))
    assert small.created_with == large.created_with == ["user"]
    assert a.scratch is b.scratch and a.stream is b.stream and a.scratch.size >= 5000
    inputs, outputs = split_bindings(METADATA)
    keep: list = []
    for bound, v in ((a, 1.0), (b, 2.0)):
        bound.bind(inputs, outputs)
        x, y, out = torch.full(SHAPE, v, device="cuda"), torch.ones(SHAPE, device="cuda"), \
            torch.zeros(SHAPE, device="cuda")
        bound.execute(args_of(x, y, out, keep))
        assert bound.context.device_memory == (a.scratch.address, a.scratch.size)
        assert torch.equal(out.cpu(), torch.full(SHAPE, 2 * v + 1))


def test_without_shared_scratch_each_context_has_its_own(fresh_scratch, monkeypatch):
    monkeypatch.setenv(SHARED_SCRATCH_ENV, "0")
    engine = StandInEngine(1000)
    a, b = (create_context(STANDIN_TRT, engine, CUDA) for _ in range(2))
    assert engine.created_with == ["static", "static"]
    assert a.scratch is None and a.stream is not b.stream


@pytest.mark.parametrize("graphs, strategy", [(True, "whole"), (False, "disabled")])
def test_tensorrt_rtx_uses_its_own_graphs_and_runtime_cache(graphs, strategy, fresh_scratch):
    engine = StandInRtxEngine(1000)

    class Cache:
        def open(self, config):
            return "the runtime cache"

    bound = create_context(STANDIN_TRT, engine, CUDA, graphs=graphs, kernel_cache=Cache())
    assert engine.created_with == [engine.config] and engine.config.strategy == "user"
    assert engine.config.cuda_graph_strategy == strategy
    assert engine.config.runtime_cache == "the runtime cache"
    assert bound.graph is None, "our capture would nest TensorRT-RTX's graph launch"
