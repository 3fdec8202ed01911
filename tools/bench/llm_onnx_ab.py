"""The LLM benchmark's decode partitions as ONNX, and onnxruntime's time per
decode call of two versions of one partition in one process (docs/llm.md,
"Fewer nodes per decode step").

    .venv/bin/python tools/bench/llm_onnx_ab.py dump OUT_DIR
    nice -n 10 .venv/bin/python tools/bench/llm_onnx_ab.py compare A.onnx B.onnx \
        [--calls 2000] [--rounds 15] [--position 20]

`dump` lowers tools/bench/llm.py's two models (CachedDecoder, transformers'
tiny Llama) with TensorRTPartitioner and writes each one's TensorRT partition
(the one method's, weights put back inline) to OUT_DIR/<model>.onnx, with its
node count by op. Run it from two checkouts (or installs) to get a before and
an after. `compare` makes one single-threaded onnxruntime session per model
and alternates blocks of `--calls` decode calls (one token at `--position`,
random caches: the same feeds for both) for `--rounds` rounds, timing each
block in this thread's CPU time; it prints the median per-call time of each
side, their ratio, whether the outputs are bitwise equal, and the load
average. Not a test: timing on a shared machine.
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")
sys.path.insert(0, str(Path(__file__).resolve().parent))


def dump(out_dir: Path) -> None:
    import onnx

    import llm as bench
    from ort_spinning import partition_onnx

    out_dir.mkdir(parents=True, exist_ok=True)
    for name, _module, export, _vocab in bench.models():
        program = bench.lower(export(), "tensorrt")
        with tempfile.TemporaryDirectory() as tmp:
            pte = Path(tmp) / "model.pte"
            pte.write_bytes(program.buffer)
            model_bytes = partition_onnx(str(pte))
        path = out_dir / f"{name.split()[0]}.onnx"
        path.write_bytes(model_bytes)
        ops = collections.Counter(n.op_type for n in onnx.load_from_string(model_bytes).graph.node)
        print(f"{path}: {sum(ops.values())} nodes {dict(ops.most_common())}", flush=True)


def _feeds(session, position: int) -> dict:
    rng = np.random.default_rng(0)
    feeds = {}
    for i in session.get_inputs():
        shape = [1 if isinstance(d, str) or d is None else d for d in i.shape]
        if i.type == "tensor(int64)":  # tokens [1, S], positions [S], scalar counters
            feeds[i.name] = (np.full(shape, position, np.int64) if len(shape) <= 1
                             else rng.integers(0, 90, shape).astype(np.int64))
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def compare(paths: list[str], calls: int, rounds: int, position: int) -> None:
    import onnxruntime as ort

    sessions = {}
    for path in paths:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3  # TensorScatter's copy notice, once per call
        sessions[path] = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feeds = _feeds(sessions[paths[0]], position)
    outputs = [s.run(None, feeds) for s in sessions.values()]
    equal = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(*outputs))
    per_call = {path: [] for path in paths}
    load = [os.getloadavg()[0]]
    for _ in range(rounds):
        for path, session in sessions.items():
            start = time.thread_time()
            for _ in range(calls):
                session.run(None, feeds)
            per_call[path].append((time.thread_time() - start) / calls * 1e6)
        load.append(os.getloadavg()[0])
    medians = [statistics.median(per_call[p]) for p in paths]
    for path, median in zip(paths, medians):
        print(f"{path}: {median:.1f} us per call (thread CPU time, median of {rounds} blocks "
              f"of {calls})")
    print(f"ratio {medians[1] / medians[0]:.3f} (second / first); outputs bitwise equal: "
          f"{equal}; load average {min(load):.2f}-{max(load):.2f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("dump").add_argument("out_dir", type=Path)
    ab = commands.add_parser("compare")
    ab.add_argument("models", nargs=2)
    ab.add_argument("--calls", type=int, default=2000)
    ab.add_argument("--rounds", type=int, default=15)
    ab.add_argument("--position", type=int, default=20)
    args = parser.parse_args(argv)
    if args.command == "dump":
        dump(args.out_dir)
    else:
        compare(args.models, args.calls, args.rounds, args.position)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
