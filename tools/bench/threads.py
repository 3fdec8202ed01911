"""Calls per second of ExecuTorch methods from 1 and 8 Python threads.

    .venv/bin/python tools/bench/threads.py [--calls 300] [--repeat 3]

Variants: our delegate through the onnxruntime fallback with the C-API
executor (GIL held during the run) and with the previous Python-API executor
(rebuilt here, bench only: GIL released during the run); ExecuTorch's portable
kernels (no delegate); XNNPACK. Layouts: 1 thread on one method, 8 threads on
one method, 8 threads each on its own program. Each cell is the median of
`--repeat` runs; "failed" counts calls the adapter refused because another
call was inside the same method (docs/concurrency.md). Not a test: timing on
a shared machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ["EXECUTORCH_TENSORRT_FALLBACK"] = "onnxruntime"

import torch  # noqa: E402

from executorch_tensorrt.examples.models import Mlp  # noqa: E402


def export_all(folder: Path) -> dict[str, Path]:
    import executorch_tensorrt
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    torch.manual_seed(0)
    model, example = Mlp().eval(), (torch.randn(4, 64),)
    paths = {"tensorrt": folder / "trt.pte"}
    executorch_tensorrt.export(model, example, paths["tensorrt"], progress=None)
    for name, partitioners in (("portable", []), ("xnnpack", [XnnpackPartitioner()])):
        program = to_edge_transform_and_lower(torch.export.export(model, example),
                                              partitioner=partitioners).to_executorch()
        paths[name] = folder / f"{name}.pte"
        paths[name].write_bytes(program.buffer)
    return paths


def load(path: Path):
    from executorch.runtime import Runtime

    return Runtime.get().load_program(path).load_method("forward")


def calls_per_second(methods: list, threads: int, calls: int,
                     x: torch.Tensor | None = None) -> tuple[float, int]:
    """`threads` threads, thread t calling methods[t % len(methods)] on `x`;
    each method is called once first, single-threaded (its native plan)."""
    x = torch.randn(4, 64) if x is None else x
    for m in methods:
        m.execute([x])
    failed = [0] * threads
    start = threading.Barrier(threads + 1)

    def worker(t: int) -> None:
        method = methods[t % len(methods)]
        start.wait()
        for _ in range(calls):
            try:
                method.execute([x])
            except RuntimeError:
                failed[t] += 1

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    start.wait()
    began = time.perf_counter()
    for w in workers:
        w.join()
    return threads * calls / (time.perf_counter() - began), sum(failed)


VARIANTS = {"delegate, native plan (no Python per call)": "tensorrt",
            "delegate, Python executor (EXECUTORCH_TENSORRT_NATIVE_PLAN=0)": "tensorrt",
            "portable kernels": "portable", "XNNPACK": "xnnpack"}
LAYOUTS = (("1 thread, 1 method", 1, 1), ("8 threads, 1 method", 8, 1),
           ("8 threads, 8 programs", 8, 8))


def run_variant(variant: str, folder: Path, calls: int, repeat: int) -> None:
    """Child process: prints one JSON line per layout for `variant`."""
    import json

    if "NATIVE_PLAN=0" in variant:
        os.environ["EXECUTORCH_TENSORRT_NATIVE_PLAN"] = "0"  # read when executors are made
    import executorch_tensorrt  # noqa: F401 - registers the backend
    path = folder / f"{VARIANTS[variant]}.pte"
    for _, threads, programs in LAYOUTS:
        methods = [load(path) for _ in range(programs)]
        runs = [calls_per_second(methods, threads, calls) for _ in range(repeat)]
        print(json.dumps([statistics.median(r for r, _ in runs), sum(f for _, f in runs)]),
              flush=True)  # one line per cell: a crash later keeps the cells before it
    os._exit(0)  # an overlap can leave std::cerr dangling (docs/concurrency.md)


def main() -> int:
    import json
    import subprocess

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per thread")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.variant:
        run_variant(options.variant, Path(options.folder), options.calls, options.repeat)
    folder = Path(tempfile.mkdtemp(prefix="bench_threads_"))
    for name, path in export_all(folder).items():
        path.rename(folder / f"{name}.pte")
    print("| variant | " + " | ".join(name for name, _, _ in LAYOUTS) + " |")
    print("| --- |" + " --- |" * len(LAYOUTS))
    for variant in VARIANTS:
        # One process per variant: a crash (see docs/concurrency.md) ends one row.
        done = subprocess.run([sys.executable, __file__, "--variant", variant, "--folder",
                               str(folder), "--calls", str(options.calls), "--repeat",
                               str(options.repeat)], capture_output=True, text=True)
        cells = [f"{rate:,.0f}" + (f" ({failed} failed)" if failed else "")
                 for rate, failed in map(json.loads, done.stdout.splitlines())]
        if len(cells) < len(LAYOUTS):
            cells += [f"process died (exit {done.returncode})"]
            cells += [""] * (len(LAYOUTS) - len(cells))
        print(f"| {variant} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
