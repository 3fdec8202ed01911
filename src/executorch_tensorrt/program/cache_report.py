"""KV-cache sizes of a saved program, read from its TensorRT blobs' "state"
entries (docs/llm.md): per cache its dtype, shape and bytes per token, per
layer and in total, at the cache's full length (an LLM's max_context_len).

A cache is a state the partition writes at positions (the entry's
`positions.axis` is its length axis); other states (transformers' position
counters) are counted apart. `inspect` prints this report.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .info import MethodInfo


@dataclass(frozen=True)
class CacheEntry:
    method: str
    fqn: str
    dtype: str
    shape: tuple[int, ...]
    length: int          # positions (the length axis' size)
    nbytes: int

    @property
    def bytes_per_token(self) -> int:
        return self.nbytes // self.length if self.length else 0

    @property
    def layer(self) -> str:
        """The fqn's last number (key_cache_3, layers.3.k -> "3"), else the fqn."""
        numbers = re.findall(r"\d+", self.fqn)
        return numbers[-1] if numbers else self.fqn


@dataclass(frozen=True)
class CacheReport:
    caches: list[CacheEntry]
    other_state_bytes: int

    @property
    def bytes_per_token(self) -> int:
        return sum(c.bytes_per_token for c in self.caches)

    @property
    def total_bytes(self) -> int:
        return sum(c.nbytes for c in self.caches)


def cache_report(methods: list[MethodInfo]) -> CacheReport:
    caches, other = [], 0
    for m in methods:
        for d in m.delegates:
            for s in (d.meta.state or ()) if d.meta is not None else ():
                axis = s.positions.axis if s.positions is not None else None
                if axis is None or not 0 <= axis < len(s.shape):
                    other += s.nbytes
                    continue
                caches.append(CacheEntry(m.name, s.fqn, s.dtype, s.shape, s.shape[axis],
                                         s.nbytes))
    return CacheReport(caches, other)


def format_cache_report(report: CacheReport) -> str:
    if not report.caches:
        return "KV cache: none (no state written at positions)"
    lines = ["KV cache (owned by TensorRT partitions):"]
    layers: dict[str, int] = {}
    for c in report.caches:
        lines.append(f"  {c.method} {c.fqn}: {c.dtype} {list(c.shape)}, {c.nbytes} bytes, "
                     f"{c.bytes_per_token} bytes/token")
        layers[c.layer] = layers.get(c.layer, 0) + c.bytes_per_token
    per_layer = sorted(set(layers.values()))
    lengths = sorted({c.length for c in report.caches})
    lines.append(f"  per layer: {', '.join(map(str, per_layer))} bytes/token ({len(layers)} "
                 "layers)")
    lines.append(f"  total: {report.bytes_per_token} bytes/token, {report.total_bytes} bytes "
                 f"at {'/'.join(map(str, lengths))} positions"
                 + (f" (+ {report.other_state_bytes} bytes of other state)"
                    if report.other_state_bytes else ""))
    return "\n".join(lines)
