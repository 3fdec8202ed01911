"""TensorRT-RTX's runtime cache: the kernels it compiles just in time on the
user's GPU, kept on disk beside the rebuilt-engine cache so that the next
process skips the compilation (docs/gpu-runtime.md).

GPU-only and unverified: TensorRT-RTX never ran an engine on a reachable GPU
(it refuses the data-centre GPUs the tests reach). Thin and guarded by hasattr, so standard TensorRT (no
runtime cache) passes through. Entries go through engine_cache.py's checks
(our folder, our files, length and SHA-256 verified, atomic writes);
TensorRT-RTX validates the content itself against this GPU, driver and
version, and rejects a mismatch by returning False, which leaves the cache
empty.
"""
from __future__ import annotations

import hashlib
import logging
import os

from .engine_cache import CacheUnusable, EngineCache
from .portability import cache_dir

__all__ = ["KernelCache"]

log = logging.getLogger(__name__)


class KernelCache:
    """A runtime cache object for one engine, loaded from disk, saved on close."""

    def __init__(self, trt, engine_bytes: bytes, device_name: str) -> None:
        self.cache = None
        # Only TensorRT-RTX has a runtime cache: hash a large engine only for it.
        self.key = hashlib.sha256(engine_bytes + f"|{trt.flavor}|{trt.version}|{device_name}"
                                  .encode()).hexdigest() if trt.is_rtx else ""
        self._store = EngineCache(cache_dir() / "runtime")

    def open(self, config) -> object | None:
        """A runtime cache created from `config` (TensorRT-RTX's IRuntimeConfig)
        and filled from disk when an entry exists; None without the API."""
        if not self.key or not hasattr(config, "create_runtime_cache"):
            return None
        self.cache = config.create_runtime_cache()
        try:
            fd, where = self._store._open_folder()  # verified folder (engine_cache.py)
            try:
                data = self._store._read(fd, self.key, where)
            finally:
                os.close(fd)
            if data is not None and not self.cache.deserialize(data):
                log.debug("TensorRT-RTX rejected the runtime cache %s (other GPU, driver or "
                          "version); starting empty", self.key)
        except (CacheUnusable, OSError) as e:
            log.debug("runtime cache not read: %s", e)
        return self.cache

    def save(self) -> None:
        """Writes the cache's current content (at close: what this process compiled)."""
        if self.cache is None:
            return
        try:
            data = bytes(self.cache.serialize())
            fd, _ = self._store._open_folder()
            try:
                self._store._write(fd, self.key, data)
            finally:
                os.close(fd)
        except (CacheUnusable, OSError) as e:
            log.debug("runtime cache not written: %s", e)
