"""Per-call dispatch cost of a 1-op program, and calls/s from 1 and 8 threads.

    .venv/bin/python tools/bench/dispatch.py [--calls 2000] [--repeat 7] [--thread-calls 300]
                                             [--per-call-only] [--thread-time]

The `add` example (x + 1 on a [2, 3] tensor) through Python `Method.execute`:
our delegate with its native plan (the adapter runs onnxruntime's Run in C++,
no Python), our delegate with EXECUTORCH_TENSORRT_NATIVE_PLAN=0 (the Python
executor on every call), XNNPACK, and ExecuTorch's portable kernels (no
delegate); our native plan again with a 1-thread onnxruntime session
(EXECUTORCH_TENSORRT_ORT_THREADS=1; the others keep each library's default
threads: one per core). Per-call time: the methods loaded in one process, runs
interleaved, median of `--repeat` runs of `--calls` calls. Threads: one
process per variant (an overlap in the Python path can kill its process:
docs/concurrency.md), 1 thread on one method, 8 threads on one method, 8
threads each on its own program; median of 3 runs. Not a test: timing on a
shared machine; compare within a table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["EXECUTORCH_TENSORRT_FALLBACK"] = "onnxruntime"
PLAN_ENV = "EXECUTORCH_TENSORRT_NATIVE_PLAN"

import torch  # noqa: E402

from threads import calls_per_second  # noqa: E402 - tools/bench/ is this script's folder

THREADS_ENV = "EXECUTORCH_TENSORRT_ORT_THREADS"

# variant -> (program, EXECUTORCH_TENSORRT_NATIVE_PLAN, EXECUTORCH_TENSORRT_ORT_THREADS)
VARIANTS = {"ours, native plan": ("tensorrt", "1", ""),
            "ours, native plan, 1 onnxruntime thread (ORT_THREADS=1)": ("tensorrt", "1", "1"),
            "ours, Python executor (NATIVE_PLAN=0)": ("tensorrt", "0", ""),
            "XNNPACK": ("xnnpack", "1", ""),
            "portable kernels (no delegate)": ("portable", "1", "")}
LAYOUTS = (("1 thread, 1 method", 1, 1), ("8 threads, 1 method", 8, 1),
           ("8 threads, 8 programs", 8, 8))


def export_all(folder: Path) -> None:
    import executorch_tensorrt
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from executorch_tensorrt.examples.models import example

    model, inputs = example("add")
    executorch_tensorrt.export(model, inputs, folder / "tensorrt.pte", progress=None)
    for name, partitioners in (("portable", []), ("xnnpack", [XnnpackPartitioner()])):
        program = to_edge_transform_and_lower(torch.export.export(model, inputs),
                                              partitioner=partitioners).to_executorch()
        (folder / f"{name}.pte").write_bytes(program.buffer)


_programs: list = []


def load(folder: Path, variant: str):
    from executorch.runtime import Runtime

    program, plan, threads = VARIANTS[variant]
    os.environ[PLAN_ENV] = plan  # both read when the delegate's executor is created
    os.environ[THREADS_ENV] = threads
    loaded = Runtime.get().load_program(folder / f"{program}.pte")
    _programs.append(loaded)  # a Method does not keep its Program alive
    return loaded.load_method("forward")


def per_call_us(folder: Path, calls: int, repeat: int, clock=time.perf_counter) -> dict[str, float]:
    import executorch_tensorrt  # noqa: F401 - registers the backend

    methods = {v: load(folder, v) for v in VARIANTS}
    x = [torch.randn(2, 3)]
    samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for v, m in methods.items():
        for _ in range(200):  # warm-up: the first call builds the plan
            m.execute(x)
    for _ in range(repeat):
        for v, m in methods.items():  # interleaved: load drifts hit all variants alike
            began = clock()
            for _ in range(calls):
                m.execute(x)
            samples[v].append((clock() - began) / calls * 1e6)
    return {v: statistics.median(s) for v, s in samples.items()}


def run_threads_child(variant: str, folder: Path, calls: int) -> None:
    import executorch_tensorrt  # noqa: F401

    for _, threads, programs in LAYOUTS:
        methods = [load(folder, variant) for _ in range(programs)]
        runs = [calls_per_second(methods, threads, calls, torch.randn(2, 3)) for _ in range(3)]
        print(json.dumps([statistics.median(r for r, _ in runs), sum(f for _, f in runs)]),
              flush=True)  # one line per cell: a crash later keeps the cells before it
    os._exit(0)  # an overlap can leave std::cerr dangling (docs/concurrency.md)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed run")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--thread-calls", type=int, default=300, help="calls per thread")
    parser.add_argument("--per-call-only", action="store_true", help="skip the thread tables")
    parser.add_argument("--thread-time", action="store_true",
                        help="per call: the calling thread's CPU time (time.thread_time), not "
                             "wall time: on a loaded machine it leaves out the time other jobs "
                             "hold the core (and any work onnxruntime's pool threads do)")
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.variant:
        run_threads_child(options.variant, Path(options.folder), options.thread_calls)
    folder = Path(tempfile.mkdtemp(prefix="bench_dispatch_"))
    export_all(folder)
    us = per_call_us(folder, options.calls, options.repeat,
                     time.thread_time if options.thread_time else time.perf_counter)
    xnn = us["XNNPACK"]
    print("| variant | per call (us) | vs XNNPACK |\n| --- | --- | --- |")
    for v, t in us.items():
        print(f"| {v} | {t:.2f} | {t / xnn:.2f}x |")
    if options.per_call_only:
        return 0
    print("\n| variant (calls/s) | " + " | ".join(n for n, _, _ in LAYOUTS) + " |")
    print("| --- |" + " --- |" * len(LAYOUTS))
    for v in VARIANTS:
        done = subprocess.run([sys.executable, __file__, "--variant", v, "--folder", str(folder),
                               "--thread-calls", str(options.thread_calls)],
                              capture_output=True, text=True)
        cells = [f"{rate:,.0f}" + (f" ({failed} failed)" if failed else "")
                 for rate, failed in map(json.loads, done.stdout.splitlines())]
        if len(cells) < len(LAYOUTS):
            cells += [f"process died (exit {done.returncode})"]
            cells += [""] * (len(LAYOUTS) - len(cells))
        print(f"| {v} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
