"""Compares two output files of the reference runners (`--outputs FILE`), e.g. an
emulated aarch64 run against the x86_64 run of the same program
(docs/aarch64.md). Prints one line per output: bit-identical, or the largest
absolute difference; exits 1 if any output differs by more than --atol.

    python tools/release/compare_outputs.py x86.etensors arm.etensors [--atol 1e-6]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from executorch_tensorrt.program.tensor_file import read_tensors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reference")
    ap.add_argument("candidate")
    ap.add_argument("--atol", type=float, default=1e-6)
    args = ap.parse_args(argv)
    ref, got = read_tensors(args.reference), read_tensors(args.candidate)
    if len(ref) != len(got):
        print(f"{len(ref)} outputs in {args.reference}, {len(got)} in {args.candidate}")
        return 1
    bad = 0
    for i, (a, b) in enumerate(zip(ref, got)):
        if a.dtype != b.dtype or a.shape != b.shape:
            print(f"output[{i}]: {a.dtype}{a.shape} vs {b.dtype}{b.shape}")
            bad += 1
        elif a.array.tobytes() == b.array.tobytes():
            print(f"output[{i}] {a.dtype}{a.shape}: bit-identical")
        else:
            diff = float(np.max(np.abs(a.array.astype(np.float64) - b.array.astype(np.float64))))
            ok = diff <= args.atol
            bad += not ok
            print(f"output[{i}] {a.dtype}{a.shape}: max abs difference {diff:.3g}"
                  f" ({'within' if ok else 'over'} {args.atol:g})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
