"""Out-of-memory risk, said before it happens.

An export that runs out of memory is killed by the kernel with no message,
often after minutes, and can take other processes on the machine with it.
So export() estimates its peak need above what the process already holds
(the weights times the factor measured by tools/bench/big_models.py, see
docs/big-models.md) and fails at once, naming both numbers, when the need is
clearly more than the memory available (MemAvailable). `check_memory=False`
skips the check (for instance where swap or a later free-up makes it fit).

Weights mapped from a file on disk (a checkpoint transformers loads in its
own dtype: safetensors shards are mapped, not read) are counted apart: the
kernel drops their pages and reads them again under pressure, and what the
export adds for them is its own working memory (MAPPED_FACTOR).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Iterable, Mapping

import torch

from ...errors import ExportError
from ...tensorrt.engine_builder import Progress

# Peak RSS above the pre-export baseline / weight bytes, measured on the
# benchmark's models (docs/big-models.md), rounded up. Inline weights copy
# them into the ONNX model and the engine, several times over.
NAMED_DATA_FACTOR = 1.0  # measured 0.02-0.7
INLINE_FACTOR = 8.0      # measured 6.5 (100 MB model)
# Anonymous memory an export adds per byte of file-mapped weights (named
# data): measured 0.16-0.20 on an 8B-shaped bf16 checkpoint at 2-32 layers
# (docs/llm.md, "An 8B-shaped bf16 export on this machine").
MAPPED_FACTOR = 0.25
# File systems whose pages live in memory: a file there is not a disk copy.
_IN_MEMORY_FS = {"tmpfs", "ramfs", "hugetlbfs"}
# "Clearly more": the estimate is a measurement on other models, not a bound.
MARGIN = 1.25


@dataclass(frozen=True)
class WeightBytes:
    total: int   # distinct tensors' bytes (shared storages counted once)
    mapped: int  # of which mapped from a file on disk (_FileMappings)


def weight_bytes(state: Iterable[Mapping[str, object]]) -> WeightBytes:
    seen: set[tuple[int, int]] = set()
    total = mapped = 0
    files = _FileMappings.of_this_process()
    for d in state:
        for v in d.values():
            if isinstance(v, torch.Tensor) and v.device.type != "meta":
                key = (v.untyped_storage().data_ptr(), v.untyped_storage().nbytes())
                if key not in seen:
                    seen.add(key)
                    total += key[1]
                    mapped += key[1] if files.covers(*key) else 0
    return WeightBytes(total, mapped)


class _FileMappings:
    """This process's mappings of regular files on disk (/proc/self/maps),
    without device files, deleted files and in-memory file systems."""

    def __init__(self, ranges: list[tuple[int, int]]):
        self.ranges = sorted(ranges)
        self.starts = [lo for lo, _ in self.ranges]

    @classmethod
    def of_this_process(cls) -> "_FileMappings":
        try:
            with open("/proc/self/maps") as f:
                lines = f.read().splitlines()
            in_memory = _in_memory_mounts()
        except OSError:
            return cls([])
        ranges = []
        for line in lines:
            fields = line.split(maxsplit=5)
            path = fields[5] if len(fields) == 6 else ""
            if (not path.startswith("/") or path.startswith("/dev/")
                    or path.endswith("(deleted)") or _under(path, in_memory)):
                continue
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            ranges.append((lo, hi))
        return cls(ranges)

    def covers(self, address: int, nbytes: int) -> bool:
        """Whether [address, address + nbytes) lies inside one file mapping
        (a tensor of a checkpoint lies inside its shard's)."""
        i = bisect.bisect_right(self.starts, address) - 1
        return i >= 0 and address + nbytes <= self.ranges[i][1]


def _in_memory_mounts() -> list[str]:
    with open("/proc/self/mounts") as f:
        return [fields[1] for fields in (line.split() for line in f)
                if len(fields) > 2 and fields[2] in _IN_MEMORY_FS]


def _under(path: str, mounts: list[str]) -> bool:
    return any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts)


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
    # Inline weights are copied into the ONNX model and the engine, mapped or not.
    mapped_factor = factor if inline_weights else MAPPED_FACTOR
    need = int((weights.total - weights.mapped) * factor + weights.mapped * mapped_factor)
    available = available_bytes()
    mapped = (f" ({weights.mapped / 1e9:.2f} GB mapped from files on disk)"
              if weights.mapped else "")
    if progress:
        progress(f"weights {weights.total / 1e9:.2f} GB{mapped}; export needs about "
                 f"{need / 1e9:.2f} GB more memory"
                 + (f" ({available / 1e9:.1f} GB available)" if available else ""))
    if available is not None and need > available * MARGIN:
        if weights.mapped and not inline_weights:
            how = (f"{(weights.total - weights.mapped) / 1e9:.2f} GB of weights in memory x "
                   f"{factor} and {weights.mapped / 1e9:.2f} GB mapped from files x "
                   f"{mapped_factor}, measured peak factors")
        else:
            how = (f"{weights.total / 1e9:.2f} GB of weights x {factor} measured peak factor"
                   f"{' with inline_weights' if inline_weights else ''}")
        raise ExportError(
            f"this export needs about {need / 1e9:.1f} GB of memory ({how}), but only "
            f"{available / 1e9:.1f} GB is available (MemAvailable), so it would "
            "most likely be killed for lack of memory. Free memory, use a larger machine"
            + (", drop inline_weights=True (weights in named data need far less)"
               if inline_weights else "")
            + ", or pass check_memory=False to try anyway.")
