"""CUDA graphs of the enqueue on a real GPU (runtime/cuda/graphs.py).

Uses the FAKE, labelled StandInContext of test_tensorrt_executor_gpu.py in
place of TensorRT's IExecutionContext (no reachable GPU runs a TensorRT
engine): its enqueue launches real kernels on the given stream, so a capture
records them with the addresses bound at that moment, as TensorRT's would.
Skips without CUDA PyTorch and a GPU.
"""
from __future__ import annotations

import logging

import pytest
import torch

from executorch_tensorrt.runtime.cuda.graphs import CUDA_GRAPHS_ENV
from executorch_tensorrt.runtime.tensorrt.context import BoundContext

from test_tensorrt_context_gpu import DYNAMIC, args_of, bound_context  # tests/runtime
from test_tensorrt_executor_gpu import METADATA, SHAPE, StandInContext

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs CUDA PyTorch and an NVIDIA GPU (CUDA graph capture and replay)")


def calls_for_shapes(bound: BoundContext, rows_list, repeat: int):
    """Runs each shape `repeat` times with new input values each call (written
    in place: same addresses); returns the outputs and the expected ones."""
    big = [torch.zeros(64, 3, device="cuda") for _ in range(3)]
    keep: list = []
    got, want = [], []
    for rows in rows_list:
        x, y, out = (b[:rows] for b in big)
        for k in range(repeat):
            x.copy_(torch.arange(rows * 3, dtype=torch.float32, device="cuda").view(rows, 3) + k)
            y.fill_(float(rows))
            bound.execute(args_of(x, y, out, keep))
            torch.cuda.synchronize()
            got.append(out.cpu().clone())
            want.append((2 * x + y).cpu())
    return got, want


def test_replay_equals_plain_enqueue_for_several_shapes():
    plain_context, graph_context = StandInContext(0), StandInContext(0)
    plain = bound_context(plain_context, DYNAMIC, graphs=False)
    graphed = bound_context(graph_context, DYNAMIC, graphs=True)
    shapes = [1, 2, 5, 2, 64]
    got, want = calls_for_shapes(graphed, shapes, repeat=4)
    plain_got, _ = calls_for_shapes(plain, shapes, repeat=4)
    for g, p, w in zip(got, plain_got, want):
        assert torch.equal(g, w) and torch.equal(p, w)
    # Per shape: a plain enqueue, a capture, then replays for calls 2..4.
    assert graphed.graph.captures == len(shapes)
    assert graphed.graph.replays == 3 * len(shapes)
    assert graph_context.captured == [False, True] * len(shapes)
    assert len(plain_context.streams) == 4 * len(shapes)
    if hasattr(torch.cuda.CUDAGraph, "raw_cuda_graph_exec"):  # replayed through the driver
        assert graphed.graph.exec != 0


def test_a_new_address_recaptures():
    context = StandInContext(0)
    bound = bound_context(context, graphs=True)
    keep: list = []
    x, y = torch.full(SHAPE, 1.0, device="cuda"), torch.full(SHAPE, 2.0, device="cuda")
    first, second = torch.zeros(SHAPE, device="cuda"), torch.zeros(SHAPE, device="cuda")
    for _ in range(3):
        bound.execute(args_of(x, y, first, keep))
    assert bound.graph.captures == 1
    y.fill_(3.0)
    for _ in range(3):
        bound.execute(args_of(x, y, second, keep))
    torch.cuda.synchronize()
    assert bound.graph.captures == 2
    assert torch.equal(second.cpu(), torch.full(SHAPE, 5.0))
    assert torch.equal(first.cpu(), torch.full(SHAPE, 4.0)), "an old graph wrote the old output"


def test_host_arguments_with_graphs():
    context = StandInContext(0)
    bound = bound_context(context, graphs=True)
    keep: list = []
    out = torch.zeros(SHAPE)
    for k in range(4):
        x, y = torch.full(SHAPE, float(k)), torch.full(SHAPE, 1.0)
        bound.execute(args_of(x, y, out, keep))
        assert torch.equal(out, 2 * x + y)
    assert bound.graph.captures == 1 and bound.graph.replays == 3


@pytest.mark.parametrize("capturable, why", [
    (False, "TensorRT says the context is not stream capturable"),
    ("refuse", "the enqueue returned false while being captured")])
def test_falls_back_to_plain_enqueue_when_capture_fails(capturable, why, caplog):
    context = StandInContext(0, capturable=capturable)
    bound = bound_context(context, graphs=True)
    keep: list = []
    out = torch.zeros(SHAPE, device="cuda")
    x, y = torch.full(SHAPE, 1.0, device="cuda"), torch.full(SHAPE, 2.0, device="cuda")
    with caplog.at_level(logging.DEBUG, logger="executorch_tensorrt.runtime.cuda.graphs"):
        for k in range(4):
            x.fill_(float(k))
            bound.execute(args_of(x, y, out, keep))
            torch.cuda.synchronize()
            assert torch.equal(out.cpu(), torch.full(SHAPE, 2.0 * k + 2))
    assert bound.graph.off_reason == why and bound.graph.captures == 0
    assert any(why in r.getMessage() for r in caplog.records), caplog.records


def test_environment_turns_graphs_off(monkeypatch):
    monkeypatch.setenv(CUDA_GRAPHS_ENV, "0")
    context = StandInContext(0)
    bound = bound_context(context)
    keep: list = []
    out = torch.zeros(SHAPE, device="cuda")
    x, y = torch.ones(SHAPE, device="cuda"), torch.ones(SHAPE, device="cuda")
    for _ in range(3):
        bound.execute(args_of(x, y, out, keep))
    assert bound.graph is None and context.captured == [False] * 3
    assert METADATA["io_bindings"][2]["name"] == "out"
