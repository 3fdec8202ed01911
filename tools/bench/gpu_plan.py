"""`tools/bench/gpu.py plan`: the adapter's CUDA-graph plan per call, on the GPU
machine, against the same graph exec launched from C and the Python executor, in
one run, over FAKE, labelled engines (gpu.py's KernelsContext; the decode step's
DecodeContext of tests/runtime/tensorrt/test_tensorrt_plan_state_gpu.py).
Not a test: timings on a shared machine (docs/gpu-runtime.md records runs).
"""
from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

import torch

from gpu import KernelsContext, _arg  # beside this file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
from gpu_timing import best_us_per_call  # noqa: E402  the loop stand_in_engine.py's raw peers use


def plan_overhead(calls: int, adapter_dir: Path, raw_lib: Path) -> dict:
    """1 kernel (the labelled KernelsContext), per call back to back: the
    adapter's CUDA-graph plan (etrt_cuda_graph_plan_replay: signature check,
    events, staging copies, cuGraphLaunch, in C++), against the same graph
    exec launched from C (raw_graph_launch.c) and the Python BoundContext,
    in one run. ExecuTorch's Method::execute around the adapter is not in it
    (not installed on the GPU machine)."""
    from executorch_tensorrt.runtime.adapter import abi
    from executorch_tensorrt.runtime.arguments import split_bindings
    from executorch_tensorrt.runtime.tensorrt.executor import BoundContext
    from executorch_tensorrt.runtime.testing import executor_over_bound_context

    ctypes.CDLL(str(adapter_dir / "executorch/lib/libexecutorch.so"), mode=os.RTLD_GLOBAL)
    lib = ctypes.CDLL(str(adapter_dir / "executorch_tensorrt/lib/libexecutorch_backend_tensorrt.so"))
    lib.etrt_cuda_graph_plan_replay.restype = ctypes.c_int64
    lib.etrt_cuda_graph_plan_replay.argtypes = [
        ctypes.POINTER(abi.EtrtNativePlan), ctypes.POINTER(abi.EtrtArg), ctypes.c_uint64,
        ctypes.c_uint64]
    raw = ctypes.CDLL(str(raw_lib))
    raw.raw_graph_launch.restype = ctypes.c_int64
    raw.raw_graph_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
    meta = {"io_bindings": [{"name": n, "dtype": "float32", "shape": [2, 3], "is_input": n != "out"}
                            for n in ("x", "y", "out")]}
    inputs, outputs = split_bindings(meta)
    report: dict = {"calls": calls}
    for where in ("cuda", "cpu"):
        ex = executor_over_bound_context(  # its engine: the stand-in below
            BoundContext(KernelsContext(1), inputs, outputs, 0, graphs=True))
        keep: list = []
        tensors = [torch.zeros(2, 3, device=where) for _ in range(3)]
        args = (abi.EtrtArg * 3)(*(_arg(t, k < 2, keep) for k, t in enumerate(tensors)))
        for _ in range(3):
            ex.execute(args)
        plan = ctypes.pointer(ex.native_plan())
        io = "device" if where == "cuda" else "host"

        def timed(step, n) -> float:
            return round(best_us_per_call(step, n), 2)

        def adapter_plan(n):
            assert lib.etrt_cuda_graph_plan_replay(plan, args, 3, n) == n

        def raw_launch(n):
            assert raw.raw_graph_launch(ex.bound.graph.exec, ex.bound.stream.handle, n) == n

        def python(n):
            for _ in range(n):
                ex.execute(args)

        row = {"adapter plan (C++)": timed(adapter_plan, calls),
               "raw cuGraphLaunch (C)": timed(raw_launch, calls),
               "Python BoundContext, graphs": timed(python, calls // 10)}
        report[f"1 kernel, {io} I/O"] = row
        print(f"1 kernel, {io} I/O", row, flush=True)
    report["decode step, 1 in-place KV cache"] = decode_plan_row(lib, raw, calls, timed)
    return report


def decode_plan_row(lib, raw, calls: int, timed) -> dict:
    """A stateful partition's plan (issue 23): one decode step over an in-place
    KV cache (the labelled DecodeContext of test_tensorrt_plan_state_gpu.py,
    3 tiny kernels, x and out in CUDA memory, the int64 position on the host:
    the adapter checks it, stages it and synchronizes), at a fixed position."""
    root = Path(__file__).resolve().parents[2] / "tests" / "runtime"
    sys.path[:0] = [str(root / "tensorrt"), str(root)]
    from test_tensorrt_plan_state_gpu import D, DecodeArgs, decode_executor

    ex, a = decode_executor(sleep_cycles=0), DecodeArgs("cuda")
    a.set(torch.ones(D), 3)
    for _ in range(3):
        ex.execute(a.args)
    plan = ctypes.pointer(ex.native_plan())

    def python(n):
        for _ in range(n):
            ex.execute(a.args)

    row = {"adapter plan (C++)": timed(lambda n: lib.etrt_cuda_graph_plan_replay(
               plan, a.args, 3, n) == n or sys.exit("the decode plan stopped"), calls),
           "raw cuGraphLaunch (C), no copy or synchronize":
               timed(lambda n: raw.raw_graph_launch(ex.bound.graph.exec, ex.bound.stream.handle, n),
                     calls),
           "Python BoundContext, graphs": timed(python, calls // 10)}
    print("decode step, 1 in-place KV cache", row, flush=True)
    return row
