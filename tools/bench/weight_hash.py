#!/usr/bin/env python3
"""What verifying weights against their content keys costs, beside the load.

Every named-data weight's key is "etrt.<sha256 of its bytes>"; init hashes
each weight it is given (runtime/named_data.py, check_content). This exports
a model of Linear layers with its weights in a .ptd, then in one process and
one run: loads it (load_program + load_method: mapping, the index checks,
hashing, onnxruntime session) `--repeat` times, and hashes the same weights
alone from the mapped .ptd as often. Prints seconds per GB for each and their
ratio; the hash share is what turning the check off would save.

    nice -n 19 python tools/bench/weight_hash.py --mb 256 --repeat 5
"""
from __future__ import annotations

import argparse
import hashlib
import mmap
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")


def export(mb: int, out: Path) -> tuple[Path, Path]:
    import torch
    from torch import nn

    import executorch_tensorrt

    dim = 1024
    layers = max(1, (mb << 20) // (dim * dim * 4))
    model = nn.Sequential(*[nn.Linear(dim, dim) for _ in range(layers)]).eval()
    pte = out / "weights.pte"
    executorch_tensorrt.export(model, (torch.randn(1, dim),), pte, progress=None,
                               external_weights=True)
    return pte, pte.with_suffix(".ptd")


def segments(ptd: Path) -> list[tuple[int, int]]:
    """The .ptd's segment data, from its FH01 header: the weights init hashes
    (plus the alignment padding between them)."""
    with open(ptd, "rb") as f:
        head = f.read(48)
    _, _, base, size = struct.unpack_from("<QQQQ", head, 16)
    return [(base, size)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=int, default=256, help="weights to export, MiB")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    import executorch_tensorrt  # noqa: F401
    from executorch.runtime import Runtime

    with tempfile.TemporaryDirectory() as tmp:
        pte, ptd = export(args.mb, Path(tmp))
        gb = sum(s for _, s in segments(ptd)) / 1e9
        runtime = Runtime.get()
        load_s, hash_s = [], []
        for _ in range(args.repeat):
            t = time.perf_counter()
            method = runtime.load_program(str(pte), data_path=str(ptd)).load_method("forward")
            load_s.append(time.perf_counter() - t)
            del method
            with open(ptd, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                t = time.perf_counter()
                for off, size in segments(ptd):
                    hashlib.sha256(memoryview(m)[off:off + size]).digest()
                hash_s.append(time.perf_counter() - t)
        load, hashed = min(load_s), min(hash_s)
        print(f"weights: {gb:.3f} GB in {ptd.stat().st_size} bytes of .ptd; best of {args.repeat}")
        print("| step | s | s per GB |\n|---|---|---|")
        print(f"| load (incl. hashing) | {load:.3f} | {load / gb:.3f} |")
        print(f"| SHA-256 of the weights alone | {hashed:.3f} | {hashed / gb:.3f} |")
        print(f"| hash share of the load | {hashed / load:.1%} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
