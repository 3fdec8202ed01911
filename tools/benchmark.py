"""Times export and run of built-in models through this backend and through
ExecuTorch's XNNPACK path, in the same process, and writes docs/benchmarks.md.

No machine here runs TensorRT engines: the TensorRT partitions run through the
onnxruntime fallback on the CPU, so the run column compares *that* path with
XNNPACK. Ratios, not absolute times, are the result (these machines are noisy).

    .venv/bin/python tools/benchmark.py [--models cnn transformer add] [--runs 200]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

os.environ.setdefault("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")

import torch  # noqa: E402
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner  # noqa: E402
from executorch.exir import to_edge_transform_and_lower  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402

import executorch_tensorrt  # noqa: E402
from executorch_tensorrt.tools.models import example  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def export_xnnpack(model, inputs, path: Path) -> float:
    t = time.perf_counter()
    edge = to_edge_transform_and_lower(torch.export.export(model, inputs),
                                       partitioner=[XnnpackPartitioner()])
    path.write_bytes(edge.to_executorch().buffer)
    return time.perf_counter() - t


def export_tensorrt(model, inputs, path: Path) -> float:
    t = time.perf_counter()
    executorch_tensorrt.export(model, inputs, path, progress=None)
    return time.perf_counter() - t


def time_runs(path: Path, inputs, runs: int, repeats: int = 5) -> tuple[float, float]:
    """Median ms/call over `repeats` batches of `runs` calls, and the max |diff| check value."""
    method = Runtime.get().load_program(str(path)).load_method("forward")
    args = list(inputs)
    for _ in range(10):
        out = method.execute(args)
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(runs):
            method.execute(args)
        samples.append((time.perf_counter() - t) / runs * 1e3)
    return statistics.median(samples), out[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["cnn", "transformer", "add"])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            print(f"[benchmark] {name}: exporting...", file=sys.stderr)
            model, inputs = example(name)
            with torch.no_grad():
                eager = model(*inputs)
            trt_pte, xnn_pte = Path(tmp, f"{name}-trt.pte"), Path(tmp, f"{name}-xnn.pte")
            trt_export = export_tensorrt(model, inputs, trt_pte)
            xnn_export = export_xnnpack(model, inputs, xnn_pte)
            print(f"[benchmark] {name}: running...", file=sys.stderr)
            trt_ms, trt_out = time_runs(trt_pte, inputs, args.runs)
            xnn_ms, xnn_out = time_runs(xnn_pte, inputs, args.runs)
            rows.append((name, trt_export, xnn_export, trt_ms, xnn_ms,
                         float((trt_out - eager).abs().max()), float((xnn_out - eager).abs().max())))
    lines = [
        "# Benchmarks", "",
        f"Measured {date.today()} by `tools/benchmark.py` on {platform.machine()} "
        f"({os.cpu_count()} CPU cores, no GPU), torch {torch.__version__}, one process, "
        "median of 5 batches. TensorRT engines are really built, but no machine here can "
        "run one: the TensorRT partitions run through the onnxruntime fallback on the CPU. "
        "So the run column compares this backend's CPU stand-in with XNNPACK, not TensorRT "
        "with XNNPACK; it bounds the adapter's and executor's overhead, it does not predict "
        "GPU speed.", "",
        "| model | export: TensorRT path (s) | export: XNNPACK (s) | export ratio | "
        "run: TensorRT path via onnxruntime (ms) | run: XNNPACK (ms) | run ratio | "
        "max diff vs eager (ours / XNNPACK) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, te, xe, tr, xr, td, xd in rows:
        lines.append(f"| {name} | {te:.2f} | {xe:.2f} | {te / xe:.1f}x | {tr:.3f} | {xr:.3f} | "
                     f"{tr / xr:.2f}x | {td:.1e} / {xd:.1e} |")
    lines += ["", "Ratios above 1 mean this backend's path is slower. Export includes "
              "partitioning with TensorRT's parser, ONNX export and real engine builds."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
