"""TensorRT-RTX's runtime cache kept on disk (runtime/tensorrt/rtx_runtime_cache.py).

TensorRT-RTX's IRuntimeConfig and IRuntimeCache need a GPU it supports (none
is reachable), so a labelled stand-in config hands out a stand-in cache with
the same three calls (serialize, deserialize, and the config's
create_runtime_cache); the files, folder checks and keys are real.
"""
from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from executorch_tensorrt.runtime.tensorrt.rtx_runtime_cache import KernelCache
from executorch_tensorrt.runtime.tensorrt.portability import CACHE_ENV

RTX = SimpleNamespace(flavor="tensorrt_rtx", version="1.7.1.116", is_rtx=True)


class StandInRuntimeCache:
    """FAKE IRuntimeCache: holds bytes; `accept` says whether deserialize takes them."""

    def __init__(self, accept: bool = True) -> None:
        self.content, self.loaded, self.accept = b"", [], accept

    def serialize(self) -> bytes:
        return self.content

    def deserialize(self, data: bytes) -> bool:
        self.loaded.append(bytes(data))
        if self.accept:
            self.content = bytes(data)
        return self.accept


class StandInConfig:
    def __init__(self, accept: bool = True) -> None:
        self.accept = accept

    def create_runtime_cache(self) -> StandInRuntimeCache:
        return StandInRuntimeCache(self.accept)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_kernels_compiled_in_one_process_are_loaded_by_the_next(cache_dir):
    first = KernelCache(RTX, b"engine bytes", "NVIDIA RTX 4090")
    cache = first.open(StandInConfig())
    assert cache.loaded == []  # nothing on disk yet
    cache.content = b"jit kernels"
    first.save()
    assert len(list((cache_dir / "runtime").glob("*.engine"))) == 1
    second = KernelCache(RTX, b"engine bytes", "NVIDIA RTX 4090").open(StandInConfig())
    assert second.loaded == [b"jit kernels"]


def test_another_engine_or_gpu_does_not_share_the_entry():
    first = KernelCache(RTX, b"engine bytes", "NVIDIA RTX 4090")
    first.open(StandInConfig()).content = b"k"
    first.save()
    for engine, gpu in ((b"other engine", "NVIDIA RTX 4090"), (b"engine bytes", "NVIDIA L4")):
        assert KernelCache(RTX, engine, gpu).open(StandInConfig()).loaded == []


def test_a_cache_tensorrt_rtx_rejects_starts_empty(caplog):
    first = KernelCache(RTX, b"e", "gpu")
    first.open(StandInConfig()).content = b"from another driver"
    first.save()
    with caplog.at_level(logging.DEBUG, logger="executorch_tensorrt.runtime.tensorrt.rtx_runtime_cache"):
        cache = KernelCache(RTX, b"e", "gpu").open(StandInConfig(accept=False))
    assert cache.loaded == [b"from another driver"] and cache.content == b""
    assert any("rejected the runtime cache" in r.getMessage() for r in caplog.records)


def test_standard_tensorrt_has_no_runtime_cache():
    standard = SimpleNamespace(flavor="tensorrt", version="10.13", is_rtx=False)
    kernel_cache = KernelCache(standard, b"e", "gpu")
    assert kernel_cache.open(StandInConfig()) is None
    kernel_cache.save()  # nothing to write, no error
