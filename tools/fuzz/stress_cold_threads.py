"""Cold first calls from many threads: wrong / failed / crashed, per fresh load.

    .venv/bin/python tools/fuzz/stress_cold_threads.py [--programs 1] [--threads 8]
        [--loads 20] [--calls 10] [--switch-interval 1e-5] [--dynamic]

Each load is a fresh child process: it loads `--programs` copies of the MLP
program (fallback allowed), takes each one's method without calling it, and
starts `--threads` threads per program at one barrier, so the first calls of
every method race each other. Every output is compared with the result of a
separate, single-threaded program for the same input. A child killed by a
signal counts as one crash (its signal is listed). `--dynamic` exports the
MLP with a dynamic batch (3..8) and gives the inputs batch sizes 3 to 8, so
the partition has dynamic shapes (a plan with bounds). Not a test: a scheduler
decides how often calls collide; docs/concurrency.md has the table.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, os, sys, threading
import torch
import executorch_tensorrt
from executorch.runtime import Runtime

path, programs, threads, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
sys.setswitchinterval(float(sys.argv[5]))
batches = [int(b) for b in sys.argv[6].split(",")]
runtime = Runtime.get()
torch.manual_seed(1)
inputs = [torch.randn(batches[i % len(batches)], 64) for i in range(8)]
reference = runtime.load_program(path).load_method("forward")
expected = [reference.execute([x])[0].clone() for x in inputs]
methods = [runtime.load_program(path).load_method("forward") for _ in range(programs)]
wrong, failed = [0], [0]
count = threading.Lock()
start = threading.Barrier(programs * threads)

def worker(method, t):
    start.wait()
    for k in range(calls):
        i = (t + k) % len(inputs)
        try:
            ok = torch.equal(method.execute([inputs[i]])[0], expected[i])
        except RuntimeError:
            with count:
                failed[0] += 1
            continue
        if not ok:
            with count:
                wrong[0] += 1

workers = [threading.Thread(target=worker, args=(m, t)) for m in methods for t in range(threads)]
for w in workers:
    w.start()
for w in workers:
    w.join()
print(json.dumps({"wrong": wrong[0], "failed": failed[0]}), flush=True)
"""


DYNAMIC_BATCH = (3, 8)


def export_mlp(folder: Path, dynamic: bool = False) -> Path:
    import torch

    import executorch_tensorrt
    from executorch_tensorrt.examples.models import Mlp

    torch.manual_seed(0)
    path = folder / ("mlp_dynamic.pte" if dynamic else "mlp.pte")
    shapes = ({0: torch.export.Dim("batch", min=DYNAMIC_BATCH[0], max=DYNAMIC_BATCH[1])},)
    executorch_tensorrt.export(Mlp().eval(), (torch.randn(4, 64),), path, progress=None,
                               dynamic_shapes=shapes if dynamic else None)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=8, help="threads per program")
    parser.add_argument("--loads", type=int, default=20)
    parser.add_argument("--calls", type=int, default=10, help="calls per thread")
    parser.add_argument("--switch-interval", type=float, default=0.005)
    parser.add_argument("--program", help="an existing MLP .pte (default: export one)")
    parser.add_argument("--dynamic", action="store_true",
                        help="a dynamic batch (3..8): inputs of batch 3 to 8")
    options = parser.parse_args()
    path = Path(options.program) if options.program else export_mlp(
        Path(tempfile.mkdtemp(prefix="stress_cold_")), options.dynamic)
    lo, hi = DYNAMIC_BATCH
    batches = ",".join(map(str, range(lo, hi + 1))) if options.dynamic else "4"
    env = dict(os.environ, EXECUTORCH_TENSORRT_FALLBACK="onnxruntime")
    totals = {"wrong": 0, "failed": 0, "crashed": 0}
    signals: list[int] = []
    for _ in range(options.loads):
        done = subprocess.run([sys.executable, "-c", CHILD, str(path), str(options.programs),
                               str(options.threads), str(options.calls),
                               str(options.switch_interval), batches],
                              capture_output=True, text=True, env=env, timeout=300)
        lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
        if done.returncode != 0 or not lines:
            totals["crashed"] += 1
            signals.append(done.returncode)
        if lines:
            result = json.loads(lines[-1])
            totals["wrong"] += result["wrong"]
            totals["failed"] += result["failed"]
    print(json.dumps({"programs": options.programs, "threads": options.threads,
                      "loads": options.loads, "calls": options.calls,
                      "switch_interval": options.switch_interval,
                      "dynamic": options.dynamic, **totals,
                      "exit_codes": signals}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
