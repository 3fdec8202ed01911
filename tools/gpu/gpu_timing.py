"""The one timing loop of the GPU per-call measurements (tools/gpu/stand_in_engine.py's
raw peers, tools/bench/gpu.py's plan benchmark): both compare against peers timed
the same way in the same process. Not a test: timings on a shared machine."""
from __future__ import annotations

import time
from typing import Callable

import torch


def best_us_per_call(step: Callable[[int], object], calls: int, runs: int = 5) -> float:
    """Best of `runs` runs of `step(calls)` (calls back to back), the device
    synchronized after each run, in microseconds per call; a warm-up of
    calls // 10 first."""
    step(calls // 10)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        step(calls)
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t) / calls * 1e6)
    return best
