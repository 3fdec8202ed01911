#!/usr/bin/env python3
"""read_blob time with and without the SHA-256 digest checks, for a blob
with an engine and an ONNX section of the given sizes (docs/blob-format.md).

    python tools/bench/blob_timing.py --engine-mb 50 --onnx-mb 50
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("EXECUTORCH_TENSORRT_SKIP_REGISTRATION", "1")  # the format only

from executorch_tensorrt.blob import read_blob, write_blob  # noqa: E402


def best_of(fn, repeats: int) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine-mb", type=float, default=50)
    p.add_argument("--onnx-mb", type=float, default=50)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    engine = os.urandom(int(args.engine_mb * 2**20))
    onnx = os.urandom(int(args.onnx_mb * 2**20))
    meta = {"io_bindings": [{"name": "x", "dtype": "float32", "shape": [1, 3], "is_input": True},
                            {"name": "y", "dtype": "float32", "shape": [1, 3], "is_input": False}]}
    data = write_blob(engine, meta, onnx)
    mb = len(data) / 2**20
    rows = [("read_blob (digests checked)", lambda: read_blob(data)),
            ("read_blob(check_digests=False)", lambda: read_blob(data, check_digests=False))]
    print(f"blob of {mb:.1f} MiB (engine {args.engine_mb} MiB, onnx {args.onnx_mb} MiB), "
          f"best and median of {args.repeats}")
    for label, fn in rows:
        best, median = best_of(fn, args.repeats)
        print(f"| {label} | {best * 1e3:.1f} ms | {median * 1e3:.1f} ms | "
              f"{mb / best / 1024:.2f} GiB/s |")


if __name__ == "__main__":
    main()
