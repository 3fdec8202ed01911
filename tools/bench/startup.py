"""Start-up of a C++ process that runs a program through the adapter's
embedded interpreter (examples/cpp_runner), before and after a change, and
the Python import times; writes the "Start-up of a C++ process" section of
docs/benchmarks.md.

Every sample is its own child process; the table holds medians. Wall time
and peak RSS (getrusage of the child) of `etrt_runner --model_path cnn.pte`
on the onnxruntime fallback, which is what runs on machines without a GPU.

    .venv/bin/python tools/bench/startup.py --runner BUILD/etrt_runner \\
        [--baseline-runner OLD_BUILD/etrt_runner --baseline-python OLD/.venv/bin/python] \\
        [--model cnn.pte] [--repeats 7] [--write]

A runner runs the package installed where it was built (its embedded
interpreter imports that site-packages), so "before" is a runner built
against an environment holding the old package (e.g. the main checkout's).
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

ROOT = Path(__file__).resolve().parents[2]  # tools/<role>/ -> the repository
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "## Start-up of a C++ process"
ENV = dict(os.environ, EXECUTORCH_TENSORRT_FALLBACK="onnxruntime")
ENV.pop("EXECUTORCH_TENSORRT_SKIP_REGISTRATION", None)

IMPORT_PACKAGE = ("import time; t = time.perf_counter(); import executorch_tensorrt; "
                  "print(time.perf_counter() - t)")
# What the embedded interpreter imports to load and run a program (no
# executorch.runtime: a C++ host has libexecutorch.so already).
IMPORT_RUNTIME = ("import os, time; os.environ['EXECUTORCH_TENSORRT_SKIP_REGISTRATION'] = '1'; "
                  "t = time.perf_counter(); import executorch_tensorrt.runtime.callbacks, "
                  "executorch_tensorrt.runtime.onnxruntime.executor, "
                  "executorch_tensorrt.runtime.tensorrt.executor; "
                  "print(time.perf_counter() - t)")


def child_stdout(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def runner_samples(runner: Path, model: Path, repeats: int) -> tuple[float, float]:
    """Median wall seconds and median peak RSS (MB) of the runner on `model`."""
    walls, rss = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        proc = subprocess.Popen([str(runner), "--model_path", str(model)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
        _, status, usage = os.wait4(proc.pid, 0)
        walls.append(time.perf_counter() - t0)
        if status != 0:
            raise RuntimeError(f"{runner} failed (status {status}): "
                               f"{proc.stderr.read().decode()[-2000:]}")
        proc.stderr.close()
        rss.append(usage.ru_maxrss / 1024)  # KB -> MB
    return statistics.median(walls), statistics.median(rss)


def import_seconds(python: str, code: str, repeats: int) -> float:
    return statistics.median(float(child_stdout([python, "-c", code]).strip().splitlines()[-1])
                             for _ in range(repeats))


def exported_cnn(python: str, workdir: Path) -> Path:
    path = workdir / "cnn.pte"
    subprocess.run([python, "-m", "executorch_tensorrt", "export", "--example", "cnn", str(path)],
                   check=True, env=ENV, cwd=workdir, capture_output=True)
    return path


def table(rows: list[tuple[str, str, str, str]]) -> str:
    lines = ["| measure | before | after | after / before |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(lines)


def write_section(text: str) -> None:
    doc = DOC.read_text()
    start = doc.find(SECTION)
    if start < 0:
        doc = doc.rstrip() + "\n\n" + text + "\n"
    else:
        end = doc.find("\n## ", start + len(SECTION))
        doc = doc[:start] + text + ("\n" + doc[end:] if end >= 0 else "\n")
    DOC.write_text(doc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runner", type=Path, required=True, help="etrt_runner (after)")
    parser.add_argument("--baseline-runner", type=Path, help="etrt_runner (before)")
    parser.add_argument("--baseline-python", default=None,
                        help="the Python of the environment the baseline runner uses")
    parser.add_argument("--model", type=Path, help="a .pte (default: the cnn example, exported)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--write", action="store_true", help=f"update {DOC.relative_to(ROOT)}")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or exported_cnn(sys.executable, Path(tmp))
        sides = [("after", args.runner, sys.executable)]
        if args.baseline_runner:
            sides.insert(0, ("before", args.baseline_runner, args.baseline_python or sys.executable))
        results = {}
        for name, runner, python in sides:
            wall, rss = runner_samples(runner, model, args.repeats)
            results[name] = (wall, rss, import_seconds(python, IMPORT_RUNTIME, args.repeats),
                             import_seconds(python, IMPORT_PACKAGE, args.repeats))
            print(f"{name}: runner {wall:.2f} s, {rss:.0f} MB; runtime modules "
                  f"{results[name][2]:.2f} s; import executorch_tensorrt {results[name][3]:.2f} s",
                  flush=True)
    if "before" not in results:
        return
    before, after = results["before"], results["after"]
    labels = ("C++ runner on the CNN: wall time (s)", "C++ runner on the CNN: peak RSS (MB)",
              "import of the runtime modules the embedded interpreter loads (s)",
              "`import executorch_tensorrt` in Python (s)")
    fmt = ("{:.2f}", "{:.0f}", "{:.2f}", "{:.2f}")
    rows = [(label, f.format(b), f.format(a), f"{a / b:.2f}")
            for label, f, b, a in zip(labels, fmt, before, after)]
    text = f"""{SECTION}

`tools/bench/startup.py` ({date.today()}, {platform.machine()}, {os.cpu_count()} CPUs, no GPU,
onnxruntime fallback; medians of {args.repeats} child processes each). "Before": the runtime
imported torch (state, arguments, executors); "after": numpy and the CUDA driver through ctypes
(runtime/cuda/driver.py, cuda_objects.py), and the TensorRT executor asks for a GPU before it
loads TensorRT, so the fallback never maps TensorRT's libraries.

{table(rows)}

In a Python process `import executorch_tensorrt` still imports torch: `executorch.runtime`
(ExecuTorch's Python runtime, which the package loads to share `libexecutorch.so`) does. The C++
runner's embedded interpreter skips it (the host already has `libexecutorch.so`), and
tests/native/test_cpp_runner_no_torch.py fails if torch comes back there.
"""
    print(text)
    if args.write:
        write_section(text.rstrip() + "\n")


if __name__ == "__main__":
    main()
