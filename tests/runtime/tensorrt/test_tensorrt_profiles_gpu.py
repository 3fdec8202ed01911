"""Several optimization profiles on a real GPU: each call runs in the first
profile containing its shapes, the context is switched (on its own stream)
only when that changes, every shape and address is set again after a switch,
and a CUDA graph captured in one profile is never replayed in another
(runtime/tensorrt/optimization_profiles.py, docs/gpu-runtime.md "Optimization profiles").

Uses the FAKE, labelled StandInContext of test_tensorrt_executor_gpu.py in
place of TensorRT's IExecutionContext (no reachable GPU runs a TensorRT
engine); like TensorRT, it refuses shapes outside its active profile and
forgets shapes and addresses on a switch. Streams, kernels, graphs and memory
are real. Skips without CUDA PyTorch and a GPU.
"""
from __future__ import annotations

import pytest
import torch

from executorch_tensorrt.errors import ArgumentError
from executorch_tensorrt.runtime.arguments import split_bindings
from executorch_tensorrt.runtime.tensorrt.optimization_profiles import profile_choice

from test_tensorrt_context_gpu import args_of, bound_context  # tests/runtime
from test_tensorrt_executor_gpu import StandInContext

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs CUDA PyTorch and an NVIDIA GPU (streams, kernels and CUDA graphs)")

BUCKETS = [(1, 16), (17, 256), (257, 2048)]
SETS = [[{"name": n, "min": [lo, 3], "opt": [hi, 3], "max": [hi, 3]} for n in ("x", "y")]
        for lo, hi in BUCKETS]
THREE = {"io_bindings": [{"name": n, "dtype": "float32", "shape": [-1, 3], "is_input": n != "out"}
                         for n in ("x", "y", "out")],
         "profiles": SETS[0], "optimization_profiles": SETS}


def profiled(graphs: bool):
    context = StandInContext(sleep_cycles=0, profiles=BUCKETS)
    bound = bound_context(context, THREE, graphs=graphs)
    bound.profiles = profile_choice(THREE, bound.inputs)  # as TensorRTExecutor sets it
    return context, bound


def run_rows(bound, rows_list, big):
    keep: list = []
    for rows in rows_list:
        x, y, out = (b[:rows] for b in big)  # same addresses, other shapes
        x.copy_(torch.arange(rows * 3, dtype=torch.float32, device="cuda").view(rows, 3))
        y.fill_(float(rows))
        bound.execute(args_of(x, y, out, keep))
        torch.cuda.synchronize()
        assert torch.equal(out.cpu(), (2 * x + y).cpu()), rows


def test_each_call_runs_in_its_profile_switched_only_on_change():
    context, bound = profiled(graphs=False)
    big = [torch.zeros(2048, 3, device="cuda") for _ in range(3)]
    rows = [2, 5, 16, 100, 256, 1000, 2048, 3, 3]
    run_rows(bound, rows, big)
    assert context.ran_in == [0, 0, 0, 1, 1, 2, 2, 0, 0]
    stream = bound.stream.handle
    assert context.profile_switches == [(1, stream), (2, stream), (0, stream)]
    assert bound.profiles.switches == 3


def test_a_switch_sets_every_shape_and_address_again():
    context, bound = profiled(graphs=False)
    big = [torch.zeros(2048, 3, device="cuda") for _ in range(3)]
    run_rows(bound, [4], big)
    context.reset_calls()
    run_rows(bound, [300], big)  # profile 2: same addresses, which TensorRT forgot
    assert context.calls["set_input_shape"] == 2 and context.calls["set_tensor_address"] == 3
    context.reset_calls()
    run_rows(bound, [301], big)  # same profile: the shapes only
    assert context.calls["set_input_shape"] == 2 and context.calls["set_tensor_address"] == 0


def test_graphs_are_not_replayed_across_profiles():
    context, bound = profiled(graphs=True)
    big = [torch.zeros(2048, 3, device="cuda") for _ in range(3)]
    for rows in (8, 8, 8, 100, 100, 100, 8, 8):
        run_rows(bound, [rows], big)
    # Per profile stretch: a plain enqueue, a capture, then replays; back in
    # profile 0 the graph captured there is stale (its bindings were reset).
    assert context.ran_in == [0, 0, 1, 1, 0, 0]  # replays do not call the context
    assert context.captured == [False, True, False, True, False, True]
    assert bound.graph.captures == 3 and bound.graph.replays == 5


def test_shapes_in_no_profile_are_refused_before_any_switch():
    context, bound = profiled(graphs=False)
    keep: list = []
    x, out = torch.zeros(5, 3, device="cuda"), torch.zeros(5, 3, device="cuda")
    y = torch.zeros(300, 3, device="cuda")
    with pytest.raises(ArgumentError, match="fit no optimization profile of the engine; it "
                                            "has 3: profile 0: x min"):
        bound.execute(args_of(x, y, out, keep))
    assert context.profile_switches == [] and context.streams == []
