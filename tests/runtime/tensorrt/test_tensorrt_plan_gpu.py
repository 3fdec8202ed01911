"""The TensorRT executor's native plan on a real GPU (runtime/tensorrt/cuda_graph_plan.py,
native/src/plans/cuda_graph_plan.cpp): the adapter's C++ replays the captured graph,
and a steady-state call enters no Python.

Uses the FAKE, labelled StandInContext of test_tensorrt_executor_gpu.py in
place of TensorRT's IExecutionContext (no reachable GPU runs a TensorRT
engine); the graph, streams, events, staging copies and the adapter's C++ are
real. ExecuTorch's Method::execute is not on the GPU machine: each call is
dispatched the way tensorrt_backend.cpp's execute_impl does (the adapter's
signature check, then its plan or the executor), through the adapter's
etrt_cuda_graph_plan_matches / etrt_cuda_graph_plan_replay. Skips without
CUDA PyTorch and a GPU.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest
import torch

from executorch_tensorrt.runtime.adapter import abi
from executorch_tensorrt.runtime.tensorrt.context import SharedScratch
from executorch_tensorrt.runtime.tensorrt.executor import TensorRTExecutor
from executorch_tensorrt.runtime.testing import executor_over_bound_context

from test_tensorrt_context_gpu import args_of, bound_context  # tests/runtime
from test_tensorrt_executor_gpu import SHAPE, StandInContext

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs CUDA PyTorch and an NVIDIA GPU (CUDA graph replay from the adapter)")


def adapter() -> ctypes.CDLL:
    """The adapter library: the installed one, or ETRT_ADAPTER_DIR's copy (the
    GPU machine has no ExecuTorch install: its libexecutorch.so travels with it)."""
    root = os.environ.get("ETRT_ADAPTER_DIR")
    if root:
        ctypes.CDLL(str(Path(root) / "executorch/lib/libexecutorch.so"), mode=os.RTLD_GLOBAL)
        lib = ctypes.CDLL(str(Path(root) / "executorch_tensorrt/lib/libexecutorch_backend_tensorrt.so"))
    else:
        from executorch_tensorrt.runtime.adapter.loader import load_adapter
        lib = load_adapter()
    plan, args = ctypes.POINTER(abi.EtrtNativePlan), ctypes.POINTER(abi.EtrtArg)
    lib.etrt_cuda_graph_plan_matches.argtypes = [plan, args, ctypes.c_uint64]
    lib.etrt_cuda_graph_plan_matches.restype = ctypes.c_int32
    lib.etrt_cuda_graph_plan_replay.argtypes = [plan, args, ctypes.c_uint64, ctypes.c_uint64]
    lib.etrt_cuda_graph_plan_replay.restype = ctypes.c_int64
    lib.etrt_last_error.restype = ctypes.c_char_p
    return lib


class Entries:
    """Counts the Python executor's execute entries."""

    def __init__(self, executor: TensorRTExecutor) -> None:
        self.count, self._execute = 0, executor.execute
        executor.execute = self

    def __call__(self, *a, **k):
        self.count += 1
        return self._execute(*a, **k)


def executor_over(context: StandInContext) -> TensorRTExecutor:
    """A TensorRTExecutor whose engine is the stand-in: only what native_plan
    and execute read is set (loading needs a TensorRT engine, which no
    reachable GPU runs)."""
    scratch = SharedScratch(0)  # as create_context gives it: the stand-in computes through it
    scratch.reserve(4096)
    return executor_over_bound_context(bound_context(context, graphs=True, scratch=scratch))


class Dispatch:
    """tensorrt_backend.cpp's execute_impl: the plan when the adapter says the
    call matches it, else the executor (and a new plan from it)."""

    def __init__(self, lib, executor: TensorRTExecutor) -> None:
        self.lib, self.executor, self.plan = lib, executor, None
        self.entries = Entries(executor)

    def __call__(self, args) -> None:
        n = len(args)
        if self.plan is not None and self.lib.etrt_cuda_graph_plan_matches(self.plan, args, n) == 1:
            ran = self.lib.etrt_cuda_graph_plan_replay(self.plan, args, n, 1)
            assert ran == 1, self.lib.etrt_last_error()
            return
        self.plan = None  # forgotten before the executor runs
        self.executor.execute(args)
        plan = self.executor.native_plan()
        self.plan = ctypes.pointer(plan) if plan is not None else None


@pytest.mark.parametrize("where", ["cuda", "cpu"])
def test_steady_state_enters_no_python(where):
    lib = adapter()
    ex = executor_over(StandInContext(0))
    run = Dispatch(lib, ex)
    keep: list = []
    x, y, out = (torch.zeros(SHAPE, device=where) for _ in range(3))
    args = args_of(x, y, out, keep)
    calls = 50
    for k in range(calls):
        x.fill_(float(k))
        y.fill_(1.0)
        run(args)
        torch.cuda.synchronize()
        assert torch.equal(out.cpu(), torch.full(SHAPE, 2.0 * k + 1.0)), k
    # a plain enqueue, a capture and replay, then the adapter's plan only
    assert run.entries.count == 2
    assert ex.plan_launches.value == calls - 2
    assert ex.bound.graph.captures == 1


def _each_mismatch(x, y, out, keep):
    """Arguments differing from (x, y, out) in one signature field each."""
    base = lambda: args_of(x, y, out, keep)  # noqa: E731
    other = torch.zeros(SHAPE, device="cuda")
    cases = {"address": args_of(x, other, out, keep)}
    a = base(); a[0].dtype = 5; cases["dtype"] = a  # noqa: E702
    a = base(); a[0].nbytes -= 4; cases["nbytes"] = a  # noqa: E702
    a = base(); a[1].device_index = 1; cases["device"] = a  # noqa: E702
    a = base(); a[1].device_type = abi.ETRT_DEVICE_CPU; cases["device type"] = a  # noqa: E702
    sizes = (ctypes.c_int32 * 2)(SHAPE[1], SHAPE[0])
    order = (ctypes.c_uint8 * 2)(1, 0)
    keep += [sizes, order]
    a = base(); a[2].sizes = ctypes.cast(sizes, ctypes.POINTER(ctypes.c_int32)); cases["shape"] = a  # noqa: E702,E501
    a = base(); a[2].dim_order = ctypes.cast(order, ctypes.POINTER(ctypes.c_uint8)); cases["dim order"] = a  # noqa: E702,E501
    return cases


def test_every_signature_mismatch_goes_to_the_executor():
    lib = adapter()
    ex = executor_over(StandInContext(0))
    keep: list = []
    x, y, out = (torch.zeros(SHAPE, device="cuda") for _ in range(3))
    args = args_of(x, y, out, keep)
    for _ in range(2):
        ex.execute(args)
    plan = ctypes.pointer(ex.native_plan())
    assert lib.etrt_cuda_graph_plan_matches(plan, args, 3) == 1
    for field, wrong in _each_mismatch(x, y, out, keep).items():
        assert lib.etrt_cuda_graph_plan_matches(plan, wrong, 3) == 0, field
        assert lib.etrt_cuda_graph_plan_replay(plan, wrong, 3, 1) == 0, field


def test_a_plan_never_outlives_what_it_names():
    lib = adapter()
    ex = executor_over(StandInContext(0))
    keep: list = []
    x, y, out = (torch.zeros(SHAPE, device="cuda") for _ in range(3))
    args = args_of(x, y, out, keep)
    for _ in range(2):
        ex.execute(args)
    plan = ex.native_plan()
    assert lib.etrt_cuda_graph_plan_matches(ctypes.pointer(plan), args, 3) == 1
    # Another engine grows the shared scratch area: the graph points at the old one.
    scratch = ex.bound.scratch
    scratch.reserve(scratch.size * 2)
    assert lib.etrt_cuda_graph_plan_matches(ctypes.pointer(plan), args, 3) == 0
    ex.execute(args)  # re-points the context: a plain enqueue, no plan
    assert ex.native_plan() is None
    ex.execute(args)  # captures again over the new area
    plan = ex.native_plan()
    assert lib.etrt_cuda_graph_plan_matches(ctypes.pointer(plan), args, 3) == 1
    ex.withdraw_native_plan()  # interpreter exit
    assert lib.etrt_cuda_graph_plan_matches(ctypes.pointer(plan), args, 3) == 0


def test_no_plan_for_another_caller_stream():
    ex = executor_over(StandInContext(0))
    keep: list = []
    x, y, out = (torch.zeros(SHAPE, device="cuda") for _ in range(3))
    args = args_of(x, y, out, keep)
    with torch.cuda.stream(torch.cuda.Stream()):
        for _ in range(3):
            ex.execute(args)
        assert ex.bound.last_graph_call is not None  # replayed, but for another stream
        assert ex.native_plan() is None


def test_several_profiles_get_plans_and_a_switch_drops_them():
    """Three optimization profiles: the steady state of each gets a plan; a
    call in another profile differs in shape, so it goes to the executor,
    which switches the profile (a new binding generation: the old plan no
    longer names the context's graph) and plans again there."""
    from test_tensorrt_profiles_gpu import profiled

    lib = adapter()
    context, bound = profiled(graphs=True)
    ex = executor_over_bound_context(bound)
    run = Dispatch(lib, ex)
    big = [torch.zeros(2048, 3, device="cuda") for _ in range(3)]
    keep: list = []
    plans = []
    for rows in (4, 300, 4):
        x, y, out = (b[:rows] for b in big)  # same addresses, another shape and profile
        args = args_of(x, y, out, keep)
        for k in range(6):
            x.fill_(float(k))
            y.fill_(float(rows))
            run(args)
            torch.cuda.synchronize()
            assert torch.equal(out.cpu(), torch.full((rows, 3), 2.0 * k + rows)), (rows, k)
        plans.append((ex._plan, args))
    # per profile: a plain enqueue after the switch, a capture, then 4 plan launches
    assert run.entries.count == 6
    assert ex.plan_launches.value == 12
    assert context.profile_switches == [(2, bound.stream.handle), (0, bound.stream.handle)]
    first, args0 = plans[0]
    assert not first.live(bound)  # profile 0's first plan: its graph was replaced
    assert plans[2][0].live(bound)
    assert lib.etrt_cuda_graph_plan_matches(ctypes.pointer(plans[2][0].struct), plans[1][1], 3) == 0
