"""Out-of-memory risk, said before it happens.

An export that runs out of memory is killed by the kernel with no message,
often after minutes, and can take other processes on the machine with it.
So export() estimates its peak need above what the process already holds
(the weights times the factor measured by tools/bench/big_models.py, see
docs/big-models.md) and fails at once, naming both numbers, when the need is
clearly more than the memory available (MemAvailable). `check_memory=False`
skips the check (for instance where swap or a later free-up makes it fit).
"""
from __future__ import annotations

from typing import Iterable, Mapping

import torch

from ..errors import ExportError
from ..tensorrt.engine_builder import Progress

# Peak RSS above the pre-export baseline / weight bytes, measured on the
# benchmark's models (docs/big-models.md), rounded up. Inline weights copy
# them into the ONNX model and the engine, several times over.
NAMED_DATA_FACTOR = 1.0  # measured 0.02-0.7
INLINE_FACTOR = 8.0      # measured 6.5 (100 MB model)
# "Clearly more": the estimate is a measurement on other models, not a bound.
MARGIN = 1.25


def weight_bytes(state: Iterable[Mapping[str, object]]) -> int:
    """Bytes of the distinct tensors (shared storages counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for d in state:
        for v in d.values():
            if isinstance(v, torch.Tensor) and v.device.type != "meta":
                key = (v.untyped_storage().data_ptr(), v.untyped_storage().nbytes())
                if key not in seen:
                    seen.add(key)
                    total += key[1]
    return total


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_export_memory(state: Iterable[Mapping[str, object]], inline_weights: bool,
                        progress: Progress | None) -> None:
    weights = weight_bytes(state)
    factor = INLINE_FACTOR if inline_weights else NAMED_DATA_FACTOR
    need = int(weights * factor)
    available = available_bytes()
    if progress:
        progress(f"weights {weights / 1e9:.2f} GB; export needs about {need / 1e9:.2f} GB more "
                 "memory" + (f" ({available / 1e9:.1f} GB available)" if available else ""))
    if available is not None and need > available * MARGIN:
        raise ExportError(
            f"this export needs about {need / 1e9:.1f} GB of memory ({weights / 1e9:.2f} GB of "
            f"weights x {factor} measured peak factor{' with inline_weights' if inline_weights else ''}"
            f"), but only {available / 1e9:.1f} GB is available (MemAvailable), so it would "
            "most likely be killed for lack of memory. Free memory, use a larger machine"
            + (", drop inline_weights=True (weights in named data need far less)"
               if inline_weights else "")
            + ", or pass check_memory=False to try anyway.")
