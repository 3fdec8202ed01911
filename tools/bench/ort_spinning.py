"""Wall and CPU time per call of a program's TensorRT partition in onnxruntime,
by thread count and spinning (EXECUTORCH_TENSORRT_ORT_SPINNING, docs/benchmarks.md).

    nice -n 10 .venv/bin/python tools/bench/ort_spinning.py model.pte [--rounds 6]

Takes the first TensorRT partition's embedded ONNX with its named-data weights
put back inline, makes three onnxruntime sessions in this process (2 threads
spinning while a run lasts, 2 threads never spinning, 1 thread; all stop
spinning when a run returns, so no session's pool runs during another's
batch), and alternates 3-call batches between them. Wall time is the median
batch; CPU time is this process's over all batches (spinning burns it). Not a
test: timing on a shared machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.deploy.prepare import program_named_data
from executorch_tensorrt.program.info import read_pte
from executorch_tensorrt.runtime.named_data import blob_weights

VARIANTS = {"2 threads, spinning": (2, "1"), "2 threads, not spinning": (2, "0"),
            "1 thread": (1, "1")}


def partition_onnx(pte: str) -> bytes:
    """The first TensorRT partition's ONNX, weights inline."""
    pte_file = read_pte(pte)
    program = pte_file.program
    data = next(bytes(program.backend_delegate_data[d.processed.index].data)
                for plan in program.execution_plan for d in plan.delegates
                if d.id == "TensorRTBackend")
    blob = read_blob(data)
    model = onnx.load_from_string(blob.onnx)
    weights = {w.name: w for w in blob_weights(blob, program_named_data(pte_file, None))}
    for init in model.graph.initializer:
        if init.name in weights:
            w = weights[init.name]
            array = np.frombuffer(w.view, dtype=w.dtype).reshape(w.shape)
            init.CopyFrom(numpy_helper.from_array(array.copy(), init.name))
    return model.SerializeToString()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pte")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    model = partition_onnx(args.pte)
    sessions = {}
    for name, (threads, spin) in VARIANTS.items():
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.add_session_config_entry("session.intra_op.allow_spinning", spin)
        options.add_session_config_entry("session.force_spinning_stop", "1")
        sessions[name] = ort.InferenceSession(model, options,
                                              providers=["CPUExecutionProvider"])
    first = next(iter(sessions.values()))
    feed = {i.name: np.random.default_rng(0).standard_normal(
        [d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)
        for i in first.get_inputs()}
    wall = {name: [] for name in sessions}
    cpu = dict.fromkeys(sessions, 0.0)
    for session in sessions.values():
        session.run(None, feed)
    for _ in range(args.rounds):
        for name, session in sessions.items():
            c, t = time.process_time(), time.perf_counter()
            for _ in range(3):
                session.run(None, feed)
            wall[name].append((time.perf_counter() - t) / 3 * 1e3)
            cpu[name] += time.process_time() - c
    for name in sessions:
        print(f"| {name} | {statistics.median(wall[name]):.1f} | "
              f"{cpu[name] / (3 * args.rounds) * 1e3:.1f} |")
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
