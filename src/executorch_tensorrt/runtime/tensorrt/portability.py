"""Engine portability: when the blob's engine was built by another TensorRT
(flavour or version) or for other compute capabilities, rebuild it from the
embedded ONNX with the TensorRT installed here, for this GPU, and cache the
result on disk (keyed by the ONNX's content hash, flavour, version, target
capability and build options), so only the first load pays for the build.

Cache folder: $EXECUTORCH_TENSORRT_CACHE_DIR, else ~/.cache/executorch_tensorrt.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable, Sequence

from ...blob import Blob
from ...errors import EngineBuildError, InvalidProgramError, RebuildImpossible
from ...tensorrt.engine_builder import build_engine, stderr_progress
from ...tensorrt.flavor import TensorRT
from ...tensorrt.options import BuildOptions, InputProfile
from ...blob.metadata import BlobMetadata
from .engine_cache import EngineCache
from ..named_data import WeightBuffer
from ..onnx_safety import self_contained_onnx

__all__ = ["CACHE_ENV", "RebuildImpossible", "built_here", "cache_dir", "rebuilt_engine"]

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


def cached_or_built(key: str, build: Callable[[], bytes]) -> bytes:
    """The engine cached under `key`, else `build()`'s, stored for next time
    (engine_cache.py: verified, locked, never through a symlink)."""
    try:
        return EngineCache(cache_dir()).get_or_build(key, build)
    except RebuildImpossible as e:  # the cache adds why it rejected an entry as notes
        raise RebuildImpossible("; ".join([str(e), *getattr(e, "__notes__", [])])) from None


def rebuilt_engine(blob: Blob, trt: TensorRT, capability: str,
                   weights: Sequence[WeightBuffer] = ()) -> bytes:
    """This TensorRT's engine for the blob's ONNX model and `capability` (e.g. "SM90").

    A blob whose weights are in named data ("engine": "none" builds here on
    every first load) needs them in `weights` (named_data.blob_weights): the
    parser reads them where they lie, so no ONNX with weights is formed. The
    cache key includes their keys, which are digests of their bytes."""
    if trt.is_rtx and capability not in trt.module.ComputeCapability.__members__:
        raise RebuildImpossible(f"TensorRT-RTX {trt.version} cannot build for {capability}")
    try:
        onnx_bytes = self_contained_onnx(blob)
    except InvalidProgramError as e:
        raise RebuildImpossible(str(e)) from None
    meta = blob.meta
    if len(weights) != len(meta.weights or ()):
        raise RebuildImpossible(f"the blob lists {len(meta.weights or ())} weights in named data, "
                                f"{len(weights)} were supplied to the build")
    json_form = meta.to_json()  # the cache key: what the blob records, as it records it
    weights_id = json.dumps([[w.name, w.key, w.nbytes] for w in weights])
    key_data = json.dumps([trt.flavor, trt.version, capability, json_form.get("profiles"),
                           meta.build.precision, weights_id]
                          + ([json_form["optimization_profiles"]]
                             if meta.optimization_profiles is not None else []),
                          sort_keys=True).encode()
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

    return cached_or_built(hashlib.sha256(onnx_bytes + key_data).hexdigest(), build)
