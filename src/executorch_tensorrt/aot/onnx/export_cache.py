"""The partitioner's ONNX exports, handed to preprocess through an explicit cache.

The partitioner exports each candidate partition to check it; preprocess then
gets the same partition and would export it again (about a second each). Each
`TensorRTPartitioner` owns one `OnnxExportCache`; the delegation spec it
returns names that cache by id in the compile spec `EXPORT_CACHE_KEY`, and
preprocess looks the id up (`cache_named_in`). That is the whole channel: no
module state but the registry of live caches, which holds them weakly.

Lifetime: an entry is taken (removed) by the preprocess that reuses it; a
cache keeps at most MAX_ENTRIES untaken ones (the oldest go first); the cache
goes with its partitioner (`export_program` also clears it after lowering).
An entry is an fp32 export whose weights were the real ones, keyed by the
graph's fingerprint, each weight named by its state-dict key and held weakly:
preprocess reuses it only for the same graph over the very same tensors.
The id means nothing outside the exporting process; the runtime ignores it.
"""
from __future__ import annotations

import hashlib
import itertools
import threading
import weakref

import torch
from executorch.exir.backend.compile_spec_schema import CompileSpec

from ..compile_spec import EXPORT_CACHE_KEY
from ..weights.content import Weight
from .export import OnnxExport

MAX_ENTRIES = 16

_ids = itertools.count(1)
_live: weakref.WeakValueDictionary[str, OnnxExportCache] = weakref.WeakValueDictionary()
_live_lock = threading.Lock()


def _fingerprint(ep: torch.export.ExportedProgram, precision: str) -> str:
    sig = ep.graph_signature
    vals = [(n.name, str(n.meta.get("val"))) for n in ep.graph.nodes if n.op == "placeholder"]
    text = repr((ep.graph_module.code, sig.input_specs, sig.output_specs, vals, precision))
    return hashlib.sha256(text.encode()).hexdigest()


def _tensors(ep: torch.export.ExportedProgram) -> dict[str, torch.Tensor]:
    return {k: v for d in (ep.state_dict, ep.constants) for k, v in d.items()
            if isinstance(v, torch.Tensor)}


class OnnxExportCache:
    """Checked partitions' exports, offered by the partitioner, taken by preprocess."""

    def __init__(self, max_entries: int = MAX_ENTRIES):
        self.max_entries = max_entries
        self.offered = 0  # exports kept (counters: tests and progress read them)
        self.reused = 0   # exports preprocess took
        self._entries: dict[str, tuple[OnnxExport, list[str], dict[str, weakref.ref]]] = {}
        self._lock = threading.Lock()
        with _live_lock:
            self.id = str(next(_ids))
            _live[self.id] = self

    def __len__(self) -> int:
        return len(self._entries)

    def compile_spec(self) -> CompileSpec:
        """The compile spec that names this cache to preprocess."""
        return CompileSpec(EXPORT_CACHE_KEY, self.id.encode())

    def offer(self, ep: torch.export.ExportedProgram, precision: str,
              exported: OnnxExport) -> None:
        """Keeps a checked partition's export for preprocess (fp32, real weights only)."""
        if precision != "fp32":
            return
        tensors = _tensors(ep)
        key_of = {id(v): k for k, v in tensors.items()}
        keys = [key_of.get(id(w.value)) for w in exported.weights]
        if None in keys:  # a weight the exporter derived (a folded constant)
            return
        refs = {k: weakref.ref(v) for k, v in tensors.items()}
        light = OnnxExport(exported.onnx_bytes, exported.edge_node_of,
                           [Weight(w.name, None, w.dtype, w.shape, w.nbytes)
                            for w in exported.weights])
        with self._lock:
            self._entries[_fingerprint(ep, precision)] = (light, keys, refs)
            self.offered += 1
            while len(self._entries) > self.max_entries:
                self._entries.pop(next(iter(self._entries)))

    def take(self, ep: torch.export.ExportedProgram, precision: str) -> OnnxExport | None:
        """The kept export of this very partition over these very weights, or
        None; the entry is removed either way."""
        with self._lock:
            entry = self._entries.pop(_fingerprint(ep, precision), None)
        if entry is None:
            return None
        light, keys, refs = entry
        tensors = _tensors(ep)
        if tensors.keys() != refs.keys() or any(refs[k]() is not v for k, v in tensors.items()):
            return None
        with self._lock:
            self.reused += 1
        weights = [Weight(w.name, tensors[k], w.dtype, w.shape, w.nbytes)
                   for w, k in zip(light.weights, keys)]
        return OnnxExport(light.onnx_bytes, dict(light.edge_node_of), weights)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def cache_named_in(compile_specs) -> OnnxExportCache | None:
    """The live cache the compile specs name, or None (none named, or its
    partitioner is gone: preprocess then exports again)."""
    for spec in compile_specs:
        if spec.key == EXPORT_CACHE_KEY:
            with _live_lock:
                return _live.get(bytes(spec.value).decode(errors="replace"))
    return None
