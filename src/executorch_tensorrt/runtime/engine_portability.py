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

from ..tensorrt.flavor import TensorRT
from ..blob import Blob
from ..errors import EngineBuildError
from .engine_cache import EngineCache

CACHE_ENV = "EXECUTORCH_TENSORRT_CACHE_DIR"


class RebuildImpossible(RuntimeError):
    """The engine cannot be rebuilt here; the message says why."""


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "executorch_tensorrt")


def built_here(blob: Blob, trt: TensorRT, capability: str) -> bool:
    """Whether the blob's engine is this TensorRT's, for a set of GPUs including this one."""
    meta = blob.metadata
    if meta.get("trt_flavor") != trt.flavor or meta.get("trt_version") != trt.version:
        return False
    built = meta.get("compute_capabilities")
    return not trt.is_rtx or built == "all" or capability in (built or [])


def _profiles(meta: dict):
    from ..aot.shapes import InputProfile

    return [InputProfile(tuple(p["min"]), tuple(p["opt"]), tuple(p["max"]))
            for p in meta.get("profiles", [])] or None


def rebuilt_engine(blob: Blob, trt: TensorRT, capability: str) -> bytes:
    """This TensorRT's engine for the blob's ONNX model and `capability` (e.g. "SM90")."""
    if blob.onnx is None:
        raise RebuildImpossible("the blob carries no ONNX model to rebuild the engine from")
    meta = blob.metadata
    key_data = json.dumps([trt.flavor, trt.version, capability, meta.get("profiles"),
                           meta.get("precision")], sort_keys=True).encode()
    key = hashlib.sha256(blob.onnx + key_data).hexdigest()
    # --- begin: verified, locked cache (engine_cache.py) ---
    def build() -> bytes:
        from ..aot.compile_spec import TensorRTCompileSpec
        from ..tensorrt.engine_builder import build_engine, stderr_progress

        if trt.is_rtx and capability not in trt.module.ComputeCapability.__members__:
            raise RebuildImpossible(f"TensorRT-RTX {trt.version} cannot build for {capability}")
        # The embedded ONNX already has the partition's precision in its types.
        spec = TensorRTCompileSpec(compute_capabilities=(capability,) if trt.is_rtx else None)
        try:
            return build_engine(blob.onnx, spec, label="a rebuilt partition",
                                profiles=_profiles(meta), progress=stderr_progress,
                                trt=trt).engine
        except EngineBuildError as e:
            raise RebuildImpossible(str(e)) from None

    try:
        return EngineCache(cache_dir()).get_or_build(key, build)
    except RebuildImpossible as e:
        raise RebuildImpossible("; ".join([str(e), *getattr(e, "__notes__", [])])) from None
    # --- end: verified, locked cache ---
