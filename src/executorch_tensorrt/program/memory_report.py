"""The GPU memory a saved program asks for, read from its TensorRT blobs
(docs/llm.md, "Memory"): weights as stored (per dtype), the KV cache (its
state entries at full length: program/cache_report.py), TensorRT's
activation (scratch) memory per optimization profile as the builder
reported it at export (the blob's "activation_bytes"), and their sum.

Nothing is recomputed from a model config: every figure is the program's.
The activation term is the largest over every partition and profile,
because the runtime gives all contexts on a GPU one shared scratch area
sized for the largest (runtime/tensorrt/context.py SharedScratch).

The onnxruntime fallback (CPU) holds other things: the weights once, read in
place from the loaded program, the state (in fp32 when the partition computes
in fp32), onnxruntime's and our copies of some weights, and no TensorRT
scratch (runtime/onnxruntime/host_memory.py). Its line predicts the peak
resident growth of a process that loads and runs the program, above the
libraries' own FALLBACK_FIXED (tools/bench/ort_memory.py measures both).
"""
from __future__ import annotations

from dataclasses import astuple, dataclass, field

from ..runtime.onnxruntime.host_memory import FallbackCopies
from .cache_report import CacheReport, cache_report
from .info import MethodInfo

# What loading the fallback's first session adds whatever the model
# (onnxruntime's library, its environment and thread pools), measured by
# tools/bench/ort_memory.py as the intercept over several model sizes.
FALLBACK_FIXED = 37 << 20


@dataclass(frozen=True)
class ActivationEntry:
    method: str
    delegate: int
    per_profile: tuple[int, ...]   # bytes, engine profile order


@dataclass(frozen=True)
class MemoryReport:
    weights_by_dtype: dict[str, int]
    kv: CacheReport
    activation: list[ActivationEntry]
    # TensorRT partitions whose blob recorded no activation figure (exported
    # without record_memory and without a GPU, or by an older version).
    unmeasured: list[str] = field(default_factory=list)
    inline_weights: list[str] = field(default_factory=list)  # not counted (inside the plan)
    fallback: FallbackCopies = FallbackCopies()  # the onnxruntime fallback's extra, all partitions

    @property
    def weights_bytes(self) -> int:
        return sum(self.weights_by_dtype.values())

    @property
    def kv_bytes(self) -> int:
        return self.kv.total_bytes + self.kv.other_state_bytes

    @property
    def activation_bytes(self) -> int:
        return max((n for a in self.activation for n in a.per_profile), default=0)

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.activation_bytes

    @property
    def fallback_bytes(self) -> int:
        """The onnxruntime fallback's host memory: weights once, state, its copies."""
        return self.weights_bytes + self.kv_bytes + self.fallback.total

    def to_json(self) -> dict:
        return {
            "weights_bytes": self.weights_bytes, "weights_by_dtype": dict(self.weights_by_dtype),
            "kv_cache_bytes": self.kv.total_bytes,
            "kv_cache_bytes_per_token": self.kv.bytes_per_token,
            "kv_cache_positions": sorted({c.length for c in self.kv.caches}),
            "other_state_bytes": self.kv.other_state_bytes,
            "activation_bytes": self.activation_bytes,
            "activation_per_profile": [{"method": a.method, "delegate": a.delegate,
                                        "bytes": list(a.per_profile)} for a in self.activation],
            "activation_unmeasured": list(self.unmeasured),
            "total_bytes": self.total_bytes,
            "fallback_bytes": self.fallback_bytes,
            "fallback_extra": {"packed": self.fallback.packed, "copies": self.fallback.copies,
                               "cast_scratch": self.fallback.cast_scratch,
                               "state_growth": self.fallback.state_growth},
            "fallback_fixed_bytes": FALLBACK_FIXED,
        }


def memory_report(methods: list[MethodInfo]) -> MemoryReport:
    weights: dict[str, tuple[str, int]] = {}   # named-data key -> (dtype, bytes): stored once
    by_dtype: dict[str, int] = {}
    activation, unmeasured, inline = [], [], []
    fallback = FallbackCopies()
    for m in methods:
        for i, d in enumerate(m.delegates):
            if d.backend != "TensorRTBackend" or d.meta is None or d.error:
                continue
            where = f"{m.name}[{i}]"
            if d.meta.weights is None:
                inline.append(where)
            for w in d.meta.weights or ():
                weights[w.key] = (w.dtype, w.nbytes)
            if d.fallback is not None:
                fallback = FallbackCopies(*(a + b for a, b in zip(
                    astuple(fallback), astuple(d.fallback))))
            for dtype, nbytes in d.graph_constants.items():  # each partition its own
                by_dtype[dtype] = by_dtype.get(dtype, 0) + nbytes
            if d.meta.build.activation_bytes:
                activation.append(ActivationEntry(m.name, i, d.meta.build.activation_bytes))
            else:
                unmeasured.append(where)
    for dtype, nbytes in weights.values():
        by_dtype[dtype] = by_dtype.get(dtype, 0) + nbytes
    return MemoryReport(dict(sorted(by_dtype.items())), cache_report(methods), activation,
                        unmeasured, inline, fallback)


def size_text(nbytes: int) -> str:
    """Bytes in binary units, as GPU memory is sold (an 8 GB Jetson has 8 GiB)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} B"


def format_memory_report(report: MemoryReport) -> str:
    lines = ["memory (GPU, from the program's TensorRT blobs):"]
    dtypes = ", ".join(f"{k} {size_text(v)}" for k, v in report.weights_by_dtype.items())
    lines.append(f"  weights: {size_text(report.weights_bytes)} ({report.weights_bytes} bytes"
                 + (f"; {dtypes}" if dtypes else "") + ")")
    if report.inline_weights:
        lines.append(f"    not counted: weights inside the plans of {', '.join(report.inline_weights)}"
                     " (inline_weights)")
    positions = "/".join(str(n) for n in sorted({c.length for c in report.kv.caches}))
    lines.append(f"  KV cache: {size_text(report.kv.total_bytes)} ({report.kv.total_bytes} bytes"
                 + (f"; {report.kv.bytes_per_token} bytes/token x {positions} positions"
                    if report.kv.caches else "")
                 + (f"; + {report.kv.other_state_bytes} bytes of other state"
                    if report.kv.other_state_bytes else "") + ")")
    for a in report.activation:
        per = ", ".join(f"profile {k}: {size_text(n)}" for k, n in enumerate(a.per_profile))
        lines.append(f"  activation {a.method}[{a.delegate}]: {per}")
    lines.append(f"  activation (shared scratch, the largest): "
                 f"{size_text(report.activation_bytes)} ({report.activation_bytes} bytes)")
    if report.unmeasured:
        lines.append(f"    not recorded for {', '.join(report.unmeasured)}: export with "
                     "record_memory=True (llm.export does, up to 1 GiB of weights per "
                     "partition without a GPU) or on a machine with a GPU")
    lines.append(f"  total: {size_text(report.total_bytes)} ({report.total_bytes} bytes); "
                 "plus the CUDA context and TensorRT's runtime (not in the program)")
    f = report.fallback
    parts = [f"{what} {size_text(n)}" for what, n in (
        ("packed MatMul weights", f.packed), ("weight copies", f.copies),
        ("cast scratch", f.cast_scratch), ("state in fp32", f.state_growth)) if n]
    lines.append(f"  on the onnxruntime fallback (CPU): {size_text(report.fallback_bytes)} "
                 f"({report.fallback_bytes} bytes: weights once + KV cache"
                 + (" + " + " + ".join(parts) if parts else "") + f"); plus about "
                 f"{size_text(FALLBACK_FIXED)} for onnxruntime itself")
    return "\n".join(lines)


def memory_report_of(path) -> MemoryReport:
    """The memory report of a saved .pte (its blobs' metadata only)."""
    from .info import describe_program, read_pte

    return memory_report(describe_program(read_pte(path).program, str(path)))
