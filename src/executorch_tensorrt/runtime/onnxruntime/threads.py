"""How the fallback's onnxruntime sessions use threads (docs/benchmarks.md,
"Vision models: fallback vs XNNPACK").

- EXECUTORCH_TENSORRT_ORT_THREADS: intra-op threads per session; unset or 0
  is onnxruntime's default (one per core). Tiny graphs (a small decoder's
  token) run faster on 1: waking the pool costs more than it saves.
- EXECUTORCH_TENSORRT_ORT_SPINNING: what the pool's idle threads do.
  "off" (the default): they never spin ("session.intra_op.allow_spinning" =
  0); each parallel operator wakes them. "run": they spin for work while a
  Run is in progress and stop when it returns ("session.force_spinning_stop").
  "on": onnxruntime's own default, they also go on spinning after Run
  returns. A spinning thread holds a core that a descheduled peer, the
  caller's next operator (ExecuTorch's kernels, XNNPACK's threads) or another
  process needs: on a busy 2-core machine a 2-thread session that spins was
  slower than a 1-thread one (docs/benchmarks.md); "run" or "on" can suit an
  otherwise idle many-core machine (not measured here).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ...errors import ArgumentError

ORT_THREADS_ENV = "EXECUTORCH_TENSORRT_ORT_THREADS"
ORT_SPINNING_ENV = "EXECUTORCH_TENSORRT_ORT_SPINNING"
SPINNING_MODES = ("off", "run", "on")


@dataclass(frozen=True)
class OrtThreads:
    """Intra-op thread count (0: onnxruntime's default) and spinning mode."""

    intra_op: int = 0
    spinning: str = "off"

    @classmethod
    def from_environment(cls) -> "OrtThreads":
        return cls(ort_intra_op_threads(), _spinning())

    def configure(self, api, options) -> None:
        """Sets these on onnxruntime session options (OrtSession calls it)."""
        api.check(api.SetIntraOpNumThreads(options, self.intra_op), "SetIntraOpNumThreads")
        entries = {"run": [(b"session.force_spinning_stop", b"1")],
                   "on": [],  # onnxruntime's defaults
                   "off": [(b"session.intra_op.allow_spinning", b"0")]}[self.spinning]
        for key, value in entries:
            api.check(api.AddSessionConfigEntry(options, key, value),
                      f"AddSessionConfigEntry({key.decode()}={value.decode()})")


def ort_intra_op_threads() -> int:
    """ORT_THREADS_ENV as a count, 0 when unset."""
    text = os.environ.get(ORT_THREADS_ENV, "").strip()
    if not text:
        return 0
    if not text.isdigit():
        raise ArgumentError(f"{ORT_THREADS_ENV}={text!r} is not a thread count: set a whole "
                            "number (1 for one thread; 0 or unset for onnxruntime's default, "
                            "one thread per core)")
    return int(text)


def _spinning() -> str:
    text = os.environ.get(ORT_SPINNING_ENV, "").strip().lower() or "off"
    if text not in SPINNING_MODES:
        raise ArgumentError(f"{ORT_SPINNING_ENV}={text!r} is not a spinning mode: set one of "
                            f"{', '.join(SPINNING_MODES)} (off: idle threads never spin, the "
                            "default; run: they spin only while a call runs; on: "
                            "onnxruntime's default, they keep spinning after it)")
    return text
