"""`executorch-tensorrt bench`: trtexec-style figures for a .pte through
ExecuTorch's own runtime (docs/profiling.md, "Benchmarking a program").

Load time, first call, then latency percentiles and throughput over N calls
after a warm-up, the process's peak host memory, device memory in use where
a GPU is present, which executor ran the TensorRT partitions (TensorRT, or
the onnxruntime fallback: said as such), and with --partitions each TensorRT
partition's own time from ExecuTorch's delegate events. `--compare OTHER.pte`
runs a second program (say, the XNNPACK export of the same model) in the same
process, the two alternating call by call, and prints the ratios.
"""
from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..program import tensor_file as tf
from ..runtime.executor import STAND_IN_ENV
from .runner import UsageError, choose_inputs, load_method, method_input_specs, run_method

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Latency:
    calls: int
    min_ms: float
    median_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float

    @property
    def throughput(self) -> float:
        """Calls per second, back to back."""
        return 1e3 / self.mean_ms if self.mean_ms > 0 else math.inf

    @classmethod
    def of(cls, samples_ms: list[float]) -> "Latency":
        ordered = sorted(samples_ms)

        def pct(p: int) -> float:  # nearest rank: a sample that was measured
            return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]

        return cls(len(ordered), ordered[0], pct(50), pct(90), pct(99), ordered[-1],
                   statistics.fmean(ordered))


@dataclass
class ProgramBench:
    program: str
    method: str
    inputs: str                 # where the inputs came from
    load_ms: float              # program + method load (engines deserialized or built)
    first_call_ms: float
    latency: Latency
    executors: list[str]        # kinds that ran the TensorRT partitions
    peak_rss_mb: float          # this process, so far (VmHWM)
    device_used_mb: float | None = None   # whole GPU, after the calls; None: no GPU
    engines: list[str] = field(default_factory=list)  # what the load did per partition
    partitions_ms: list[float] = field(default_factory=list)  # median per TensorRT partition

    @property
    def on_fallback(self) -> bool:
        return "onnxruntime" in self.executors

    def as_dict(self) -> dict:
        d = asdict(self)
        d["latency"]["throughput_per_s"] = self.latency.throughput
        d["on_fallback"] = self.on_fallback
        return d


class _Runner:
    """One loaded method with its inputs, timed call by call."""

    def __init__(self, pte: Path, method: str, data: Path | None, inputs_file: Path | None):
        from ..deploy.prepare import first_load, format_first_load
        from ..runtime import callbacks

        # Said before loading: ship an engine, use a prepared one, or build.
        self.engines = format_first_load(first_load(pte)).splitlines()[1:]
        before = {id(e) for e in callbacks.install().live_executors()}
        start = time.perf_counter()
        self.method = load_method(pte, method, data)
        self.load_ms = (time.perf_counter() - start) * 1e3
        inputs, self.where = choose_inputs(method_input_specs(self.method), inputs_file, None,
                                           pte.with_suffix(".expected.etensors"))
        self.inputs = [tf.to_torch(t) for t in inputs]
        self.first_call_ms = self.call()
        self.executors = sorted({e.kind for e in callbacks.install().live_executors()
                                 if id(e) not in before})
        self.samples: list[float] = []

    def call(self) -> float:
        start = time.perf_counter()
        run_method(self.method, self.inputs)
        return (time.perf_counter() - start) * 1e3


def _peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return math.nan


def _device_used_mb() -> float | None:
    """Memory in use on the current GPU (all processes), or None without one."""
    try:
        from ..runtime.cuda import driver

        free, total = driver.mem_get_info()
    except Exception:  # noqa: BLE001 - no driver, no GPU, no context: nothing to report
        return None
    return (total - free) / 2**20


def bench(pte: str | Path, *, method: str = "forward", data: str | Path | None = None,
          inputs_file: str | Path | None = None, warmup: int = 10, iterations: int = 100,
          compare: str | Path | None = None, compare_data: str | Path | None = None,
          partitions: bool = False) -> list[ProgramBench]:
    """Measures `pte` (and `compare`, alternating with it); one result each."""
    if warmup < 0 or iterations < 1:
        raise UsageError(f"--warmup must be >= 0 and --iterations >= 1 (got {warmup}, "
                         f"{iterations})")
    import executorch.runtime  # noqa: F401 - imports are not the load's time
    import executorch_tensorrt

    executorch_tensorrt.register()
    paths = [(Path(pte), data)] + ([(Path(compare), compare_data)] if compare else [])
    runners = [_Runner(p, method, Path(d) if d else None,
                       Path(inputs_file) if inputs_file else None) for p, d in paths]
    for _ in range(warmup):
        for r in runners:
            r.call()
    for _ in range(iterations):  # alternating: both see the same machine state
        for r in runners:
            r.samples.append(r.call())
    device = _device_used_mb()
    results = [ProgramBench(str(p), method, r.where, r.load_ms, r.first_call_ms,
                            Latency.of(r.samples), r.executors, _peak_rss_mb(), device,
                            r.engines)
               for (p, _), r in zip(paths, runners)]
    if partitions:
        for result, (p, d) in zip(results, paths):
            result.partitions_ms = _partition_medians(p, method, d, inputs_file,
                                                      max(iterations, 10))
    return results


def _partition_medians(pte: Path, method: str, data, inputs_file, calls: int) -> list[float]:
    """Each TensorRT partition's median call time, from ExecuTorch's delegate events."""
    from .profile import read_partitions, run_with_etdump

    with tempfile.TemporaryDirectory(prefix="etrt-bench-") as tmp:
        etdump = Path(tmp) / "bench.etdp"
        run_with_etdump(pte, etdump, calls=calls, method=method,
                        inputs_file=Path(inputs_file) if inputs_file else None, data_path=data)
        return [statistics.median(p.total.durations_ms) for p in read_partitions(etdump)
                if p.total is not None and p.total.durations_ms]


def format_bench(results: list[ProgramBench]) -> str:
    lines = []
    for r in results:
        lat = r.latency
        ran = ", ".join(r.executors) or "no TensorRT partition"
        fake = os.environ.get(STAND_IN_ENV)
        lines += [f"{r.program} ({r.method}; inputs: {r.inputs})",
                  f"  TensorRT partitions ran on: {ran}"
                  + (f"  (a FAKE, test-only stand-in for TensorRT's context: {STAND_IN_ENV}="
                     f"{fake})" if fake and "tensorrt" in r.executors else "")
                  + ("  (the CPU fallback, not TensorRT: these are not TensorRT figures)"
                     if r.on_fallback else ""),
                  f"  load {r.load_ms:.1f} ms, first call {r.first_call_ms:.3f} ms",
                  *(f"  engine {line.strip()}" for line in r.engines),
                  f"  {lat.calls} calls: min {lat.min_ms:.3f}, median {lat.median_ms:.3f}, "
                  f"p90 {lat.p90_ms:.3f}, p99 {lat.p99_ms:.3f}, max {lat.max_ms:.3f} ms; "
                  f"{lat.throughput:.1f} calls/s",
                  f"  peak host memory {r.peak_rss_mb:.0f} MB (this process); device memory "
                  + (f"{r.device_used_mb:.0f} MB in use" if r.device_used_mb is not None
                     else "not measured (no GPU)")]
        if r.partitions_ms:
            lines.append("  per TensorRT partition (median ms): "
                         + ", ".join(f"{ms:.3f}" for ms in r.partitions_ms))
    if len(results) == 2:
        a, b = results[0].latency, results[1].latency
        lines.append(f"ratio {Path(results[0].program).name} / {Path(results[1].program).name}"
                     f": median {a.median_ms / b.median_ms:.3f}, p90 {a.p90_ms / b.p90_ms:.3f}, "
                     f"p99 {a.p99_ms / b.p99_ms:.3f} (alternating calls, same process)")
    return "\n".join(lines)
