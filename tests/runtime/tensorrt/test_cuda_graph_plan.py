"""The adapter's CUDA-graph plan checks on the CPU (native/src/plans/cuda_graph_plan.cpp):
which plans it refuses, and that every signature field it was bound for is
compared before a launch. Runs the real adapter; the plan's CUDA handles are
plain numbers that matching never dereferences (no GPU and no driver here;
the runs themselves are tests/runtime/tensorrt/test_tensorrt_plan_gpu.py on the H200).
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from executorch_tensorrt.runtime.adapter import abi
from executorch_tensorrt.runtime.adapter.loader import load_adapter
from executorch_tensorrt.runtime.tensorrt.cuda_graph_plan import CudaGraphPlan, GraphCall
from executorch_tensorrt.runtime.native_plan import signature_key

SHAPE = (2, 3)
DEVICE_BASE = 0x7F0000000000  # CUDA addresses the plan names (never dereferenced)


@pytest.fixture(scope="module")
def matches():
    lib = load_adapter()
    fn = lib.etrt_cuda_graph_plan_matches
    fn.argtypes = [ctypes.POINTER(abi.EtrtNativePlan), ctypes.POINTER(abi.EtrtArg), ctypes.c_uint64]
    fn.restype = ctypes.c_int32
    return lambda plan, args: fn(ctypes.pointer(plan), args, len(args))


def make_args(host_input: np.ndarray | None, keep: list):
    """x (host when given, else CUDA), y and out in CUDA memory."""
    args = (abi.EtrtArg * 3)()
    for k, a in enumerate(args):
        sizes = (ctypes.c_int32 * 2)(*SHAPE)
        order = (ctypes.c_uint8 * 2)(0, 1)
        keep += [sizes, order]
        a.struct_size, a.kind, a.is_input, a.dtype = ctypes.sizeof(a), abi.ETRT_ARG_TENSOR, k < 2, 6
        a.nbytes, a.ndim = 24, 2
        a.sizes = ctypes.cast(sizes, ctypes.POINTER(ctypes.c_int32))
        a.dim_order = ctypes.cast(order, ctypes.POINTER(ctypes.c_uint8))
        a.device_type, a.data = abi.ETRT_DEVICE_CUDA, DEVICE_BASE + 256 * k
    if host_input is not None:
        args[0].device_type, args[0].data = abi.ETRT_DEVICE_CPU, host_input.ctypes.data
    return args


class Bound:
    """What CudaGraphPlan reads of a BoundContext: the device, the engine's stream, the scratch."""
    device, stream, scratch, state = 0, type("S", (), {"handle": 0x5000})(), None, None


def plan_for(args, staged_inputs=()):
    call = GraphCall(graph_exec=0x1000, caller_stream=0, ready_event=0x2000, done_event=0x3000,
                     staged_inputs=tuple(staged_inputs), staged_outputs=(), generation=1)
    return CudaGraphPlan(Bound(), call, args, len(args), signature_key(args, len(args)),
                         context=0x4000, launches=ctypes.c_uint64(0))


def test_identical_arguments_match_and_each_field_is_compared(matches):
    keep: list = []
    args = make_args(None, keep)
    plan = plan_for(args)
    assert matches(plan.struct, args) == 1
    for field, value in [("data", DEVICE_BASE + 4096), ("dtype", 5), ("nbytes", 20),
                         ("device_index", 1), ("device_type", abi.ETRT_DEVICE_CPU),
                         ("kind", abi.ETRT_ARG_INT), ("ndim", 1)]:
        for k in range(3):
            other = make_args(None, keep)
            setattr(other[k], field, value)
            assert matches(plan.struct, other) == 0, (field, k)
    for what, values in [("sizes", (3, 2)), ("dim_order", (1, 0))]:
        other = make_args(None, keep)
        array = (ctypes.c_int32 if what == "sizes" else ctypes.c_uint8) * 2
        keep.append(array(*values))
        setattr(other[2], what, ctypes.cast(keep[-1], type(getattr(other[2], what))))
        assert matches(plan.struct, other) == 0, what
    assert matches(plan.struct, args) == 1


def test_withdrawn_or_moved_epoch_never_matches(matches):
    keep: list = []
    args = make_args(None, keep)
    plan = plan_for(args)
    epoch = ctypes.c_uint64(7)
    plan.graph.epoch, plan.graph.epoch_at_plan = ctypes.pointer(epoch), 7
    assert matches(plan.struct, args) == 1
    epoch.value = 8  # the shared scratch area was replaced
    assert matches(plan.struct, args) == 0
    epoch.value = 7
    plan.withdraw()
    assert matches(plan.struct, args) == 0


def test_host_arguments_need_a_staging_copy_that_fits(matches):
    keep: list = []
    host = np.zeros(SHAPE, np.float32)
    args = make_args(host, keep)
    assert matches(plan_for(args).struct, args) == -1  # a host input the graph would read directly
    assert matches(plan_for(args, [(0, DEVICE_BASE + 8192, 24)]).struct, args) == 1
    assert matches(plan_for(args, [(0, DEVICE_BASE + 8192, 25)]).struct, args) == -1  # overruns
    assert matches(plan_for(args, [(1, DEVICE_BASE + 8192, 24)]).struct, args) == -1  # CUDA arg
    assert matches(plan_for(args, [(3, DEVICE_BASE, 24)]).struct, args) == -1  # no such arg
    assert matches(plan_for(args, [(0, 0, 24)]).struct, args) == -1  # no buffer


def test_refused_plans(matches):
    keep: list = []
    args = make_args(None, keep)
    for field in ("graph_exec", "stream", "context", "ready_event", "done_event"):
        plan = plan_for(args)
        setattr(plan.graph, field, 0)
        assert matches(plan.struct, args) == -1, field
    plan = plan_for(args)
    plan.struct.kind = abi.ETRT_PLAN_ORT_RUN
    assert matches(plan.struct, args) == -1
    plan = plan_for(args)
    plan.struct.num_args = 2
    assert matches(plan.struct, args) == -1
    plan = plan_for(args)
    plan.graph.device_index = 1  # its CUDA arguments live on device 0
    assert matches(plan.struct, args) == -1
