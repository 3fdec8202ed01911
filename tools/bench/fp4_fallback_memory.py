"""What the onnxruntime fallback holds for FP4 weights: the process's resident
memory growth while one fallback executor of a Linear(d, d) fp4 partition
(weights in named data, held in memory before the measurement) is built.

    nice -n 10 .venv/bin/python tools/bench/fp4_fallback_memory.py [--width 4096]

Resident memory is read from /proc/self/statm; it counts what onnxruntime's
allocator keeps, not only live tensors, so the figure is an upper bound per
weight. Not a test.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--width", type=int, default=4096, help="d, a multiple of 16")
    d = ap.parse_args().width
    import executorch_tensorrt  # noqa: F401 - registers the backend
    from executorch_tensorrt.aot.export import export_program
    from executorch_tensorrt.blob import read_blob
    from executorch_tensorrt.quantization import quantize
    from executorch_tensorrt.runtime.choose import create_executor
    from executorch_tensorrt.runtime.named_data import InMemoryNamedData
    sys.path.insert(0, str(ROOT))
    from tests.helpers import tensorrt_blobs

    torch.manual_seed(0)
    model = quantize(torch.nn.Sequential(torch.nn.Linear(d, d, bias=False)).eval(),
                     scheme="fp4_weight_only")
    with tempfile.TemporaryDirectory(prefix="etrt-fp4-memory-") as tmp:
        path = Path(tmp) / "fp4.pte"
        export_program(model, (torch.randn(2, d),), path, progress=None, run_check=False,
                       compute_capabilities=("SM120",), write_expected_file=False)
        (blob_bytes,) = tensorrt_blobs(path)
    blob = read_blob(blob_bytes)
    state = model.state_dict()
    entries = {w.key: state[w.name].contiguous().numpy().tobytes() for w in blob.meta.weights}
    gc.collect()
    before = resident()
    executor = create_executor(blob, "onnxruntime", InMemoryNamedData(entries))
    grown = resident() - before
    print(f"Linear({d}, {d}) fp4: {d * d:,} weights, {d * d // 2:,} packed bytes; resident "
          f"memory grown by building the fallback: {grown:,} B = {grown / (d * d):.2f} B per "
          f"weight; decoded by the fallback: {executor.weights.copied_bytes:,} B; load average "
          f"{os.getloadavg()[0]:.1f}")
    executor.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
