"""Engine portability: when the blob's engine was built by another TensorRT
(flavour or version) or for other compute capabilities, rebuild it from the
embedded ONNX with the TensorRT installed here, for this GPU, and cache the
result on disk (keyed by the ONNX's content hash, flavour, version, target
capability and build options), so only the first load pays for the build.

Cache folder: $EXECUTORCH_TENSORRT_CACHE_DIR, else ~/.cache/executorch_tensorrt.
`engine_at_load` is the lookup the executor does at load; `prepare` (the
deploy package) fills the same entries ahead of time through `rebuild_for`.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ...blob import Blob
from ...errors import EngineBuildError, InvalidProgramError, RebuildImpossible
from ...tensorrt.engine_builder import build_engine, stderr_progress
from ...tensorrt.flavor import TensorRT
from ...tensorrt.options import BuildOptions, InputProfile
from ...blob.metadata import BlobMetadata
from .engine_cache import EngineCache, EntryFacts, Fetched
from ..named_data import WeightBuffer
from ..onnx_safety import self_contained_onnx

__all__ = ["CACHE_ENV", "LoadedEngine", "Rebuild", "RebuildImpossible", "built_here",
           "cache_dir", "engine_at_load", "rebuild_for", "rebuilt_engine"]

CACHE_ENV = "EXECUTORCH_TENSORRT_CACHE_DIR"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "executorch_tensorrt")


def built_here(blob: Blob, trt: TensorRT, capability: str) -> bool:
    """Whether the blob's engine is this TensorRT's, for a set of GPUs including this one."""
    facts = blob.meta.build
    if facts.trt_flavor != trt.flavor or facts.trt_version != trt.version:
        return False
    built = facts.compute_capabilities
    return not trt.is_rtx or built == "all" or capability in (built or [])


def _profiles(meta: BlobMetadata) -> list[dict[str, InputProfile]]:
    """Every optimization profile of the blob, rebuilt in the same order (the
    executor chooses among them by index), by input name; delegate-owned state
    inputs (not in the profiles: their shapes are static) at their shape."""
    state = {s.onnx_input: InputProfile(*(s.shape,) * 3) for s in meta.state or ()}
    return [{**{p.name: InputProfile(p.min, p.opt, p.max) for p in profile}, **state}
            for profile in meta.engine_profiles]


@dataclass(frozen=True)
class Rebuild:
    """How this TensorRT builds a blob's engine for one capability: the cache
    key, the facts its entry records, and the build itself."""

    key: str
    facts: EntryFacts
    build: Callable[[], bytes]
    check: Callable[[], object]  # refuses an ONNX model that must not be built

    def fetch(self, cache: EngineCache | None = None) -> Fetched:
        """The cached engine (checked against `facts`), else a build, stored."""
        cache = cache or EngineCache(cache_dir())
        # A hit was checked when it was built from the same bytes: no ONNX
        # parse at load. A miss checks the model before the cache is touched.
        found, _ = cache.peek(self.key, self.facts)
        if found is not None:
            return found
        self.check()
        try:
            return cache.fetch(self.key, self.build, self.facts)
        except RebuildImpossible as e:  # the cache adds why it rejected an entry as notes
            raise RebuildImpossible("; ".join([str(e), *getattr(e, "__notes__", [])])) from None


def program_key(blob: Blob, onnx_bytes: bytes,
                weights: Sequence[tuple[str, str, int]]) -> tuple[str, str]:
    """(the program digest, the weights' id) of a blob: what its engine is
    built from, whatever TensorRT or GPU builds it. `weights` are (ONNX name,
    named-data key, nbytes): the keys are digests of the bytes, so the digest
    needs no weight bytes (inspect computes it from the metadata alone)."""
    meta = blob.meta
    # The profiles as the blob records them (BlobMetadata.to_json's values for
    # these keys; the whole object is not formed: it was most of a load's lookup).
    profiles = None if meta.profiles is None else [p.to_json() for p in meta.profiles]
    weights_id = json.dumps([list(w) for w in weights])
    key_data = json.dumps([profiles, meta.build.precision, weights_id]
                          + ([[[p.to_json() for p in one] for one in meta.optimization_profiles]]
                             if meta.optimization_profiles is not None else []),
                          sort_keys=True).encode()
    digest = hashlib.sha256(onnx_bytes)
    digest.update(key_data)
    return digest.hexdigest(), weights_id


def cache_key(program: str, trt: TensorRT, capability: str) -> str:
    return hashlib.sha256(json.dumps([program, trt.flavor, trt.version, capability])
                          .encode()).hexdigest()


def embedded_onnx(blob: Blob) -> bytes:
    try:
        return self_contained_onnx(blob)
    except InvalidProgramError as e:
        raise RebuildImpossible(str(e)) from None


def rebuild_for(blob: Blob, trt: TensorRT, capability: str,
                weights: Sequence[WeightBuffer] = ()) -> Rebuild:
    """This TensorRT's build of the blob's ONNX model for `capability` (e.g. "SM90").

    A blob whose weights are in named data ("engine": "none" builds here on
    every first load) needs them in `weights` (named_data.blob_weights): the
    parser reads them where they lie, so no ONNX with weights is formed."""
    if trt.is_rtx and capability not in trt.module.ComputeCapability.__members__:
        raise RebuildImpossible(f"TensorRT-RTX {trt.version} cannot build for {capability}")
    if blob.onnx is None:
        embedded_onnx(blob)  # raises, saying why
    # The key hashes the bytes as they are; Rebuild.fetch checks them (parsed,
    # no external data) only when it has to build.
    onnx_bytes = blob.onnx
    meta = blob.meta
    if len(weights) != len(meta.weights or ()):
        raise RebuildImpossible(f"the blob lists {len(meta.weights or ())} weights in named data, "
                                f"{len(weights)} were supplied to the build")
    program, weights_id = program_key(blob, onnx_bytes, [(w.name, w.key, w.nbytes)
                                                         for w in weights])
    # The embedded ONNX already has the partition's precision in its types.
    options = BuildOptions(compute_capabilities=(capability,) if trt.is_rtx else None,
                           precision=meta.build.precision_or_default)

    def build() -> bytes:
        try:
            return build_engine(onnx_bytes, options, label="a rebuilt partition",
                                profiles=_profiles(meta), progress=stderr_progress,
                                trt=trt, weights_id=weights_id,
                                initializers=[(w.name, w.address, w.nbytes)
                                              for w in weights]).engine
        except EngineBuildError as e:
            raise RebuildImpossible(str(e)) from None

    return Rebuild(cache_key(program, trt, capability),
                   EntryFacts(program, capability, trt.flavor, trt.version), build,
                   lambda: embedded_onnx(blob))


def rebuilt_engine(blob: Blob, trt: TensorRT, capability: str,
                   weights: Sequence[WeightBuffer] = ()) -> bytes:
    """This TensorRT's engine for the blob and `capability`, from the cache or
    built and cached (rebuild_for)."""
    return rebuild_for(blob, trt, capability, weights).fetch().engine


@dataclass(frozen=True)
class LoadedEngine:
    """The engine a load uses and where it came from: "blob" (the program's
    own), "cache" (a prepared or earlier-built entry: no build) or "built"."""

    engine: bytes
    source: str
    facts: EntryFacts | None = None
    rejected: str | None = None


def engine_at_load(blob: Blob, trt: TensorRT, capability: str,
                   weights: Callable[[], Sequence[WeightBuffer]] = tuple) -> LoadedEngine:
    """The lookup TensorRTExecutor does at load, for a GPU of `capability`:
    the blob's engine if this TensorRT built it for this GPU, else the cached
    one for this program, GPU and TensorRT, else one built now and cached."""
    if blob.engine_kind != "none" and built_here(blob, trt, capability):
        return LoadedEngine(blob.engine, "blob")
    fetched = rebuild_for(blob, trt, capability, weights()).fetch()
    return LoadedEngine(fetched.engine, "built" if fetched.built else "cache", fetched.facts,
                        fetched.rejected)
