"""Times export and run of built-in models through this backend and through
ExecuTorch's XNNPACK path, in the same process, and writes docs/evidence/benchmarks.md.

No machine here runs TensorRT engines: the TensorRT partitions run through the
onnxruntime fallback on the CPU, so the run column compares *that* path with
XNNPACK. Ratios, not absolute times, are the result (these machines are noisy).

    .venv/bin/python tools/bench/models.py [--models cnn transformer add] [--runs 200]
    .venv/bin/python tools/bench/models.py --cli     # command-line start-up times only

Running, timing and comparing come from executorch_tensorrt.program (runner.py,
compare.py), the same functions the CLI and its demo use.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

os.environ.setdefault("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")

ROOT = Path(__file__).resolve().parents[2]  # tools/<role>/ -> the repository
CLI_CASES = (["--help"], ["--version"], ["run", "--help"], ["run"])


def cli_startup(repeats: int = 5) -> list[tuple[str, float, float]]:
    """(command, median seconds of the console script, median of a bare
    `python -c pass`) for commands that must answer without loading torch."""
    script = Path(sys.executable).parent / "executorch-tensorrt"

    def median_s(cmd: list[str]) -> float:
        samples = []
        for _ in range(repeats):
            t = time.perf_counter()
            subprocess.run(cmd, capture_output=True)
            samples.append(time.perf_counter() - t)
        return statistics.median(samples)

    bare = median_s([sys.executable, "-c", "pass"])
    return [(" ".join(["executorch-tensorrt", *case]), median_s([str(script), *case]), bare)
            for case in CLI_CASES]


def cli_table() -> list[str]:
    rows = cli_startup()
    lines = ["## Command-line start-up", "",
             f"Measured {date.today()} by `tools/bench/models.py --cli` ({os.cpu_count()} CPU cores, "
             "median of 5 runs of the installed console script). These commands answer without "
             "importing torch; a command that loads or exports a program pays torch's import "
             "(about 4 s here) on top.", "",
             "| command | wall time (s) | bare `python -c pass` (s) |", "|---|---|---|"]
    lines += [f"| `{cmd}` | {t:.3f} | {bare:.3f} |" for cmd, t, bare in rows]
    return lines


def export_xnnpack(model, inputs, path: Path) -> float:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    t = time.perf_counter()
    edge = to_edge_transform_and_lower(torch.export.export(model, inputs),
                                       partitioner=[XnnpackPartitioner()])
    path.write_bytes(edge.to_executorch().buffer)
    return time.perf_counter() - t


def export_tensorrt(model, inputs, path: Path) -> float:
    import executorch_tensorrt

    t = time.perf_counter()
    executorch_tensorrt.export(model, inputs, path, progress=None)
    return time.perf_counter() - t


def time_runs(path: Path, inputs, runs: int, repeats: int = 5):
    """Median ms/call (tools.runner.time_calls) and the first output."""
    from executorch_tensorrt.cli.runner import load_method, time_calls

    method = load_method(path)
    args = list(inputs)
    timing = time_calls(lambda: method.execute(args), calls=runs, repeats=repeats, warmup=10)
    return timing.median_ms, method.execute(args)[0]


def max_diff(got, want) -> float:
    from executorch_tensorrt.program.compare import compare_arrays

    return compare_arrays("out", want.numpy(), got.numpy(), 0.0, 0.0).max_abs_diff


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["cnn", "transformer", "add"])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--cli", action="store_true",
                        help="measure command-line start-up only and update that section")
    args = parser.parse_args()
    out = Path(args.out)
    if args.cli:
        text = out.read_text() if out.exists() else "# Benchmarks\n"
        text = text.split("## Command-line start-up")[0].rstrip() + "\n\n"
        table = "\n".join(cli_table())
        out.write_text(text + table + "\n")
        print(table)
        return 0
    import torch

    from executorch_tensorrt.examples.models import example

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
                         max_diff(trt_out, eager), max_diff(xnn_out, eager)))
    lines = [
        "# Benchmarks", "",
        f"Measured {date.today()} by `tools/bench/models.py` on {platform.machine()} "
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
    previous = out.read_text() if out.exists() else ""
    cli_section = ("\n## Command-line start-up" + previous.split("## Command-line start-up")[1]
                   if "## Command-line start-up" in previous else "")
    out.write_text("\n".join(lines) + "\n" + cli_section)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
