"""Shared fixtures. Tests run against the installed package (tools/setup.sh)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["ci_guard", "blob_check"]

from executorch_tensorrt.runtime.executor import FALLBACK_ENV


@pytest.fixture
def allow_fallback(monkeypatch):
    """Lets TensorRT partitions run through onnxruntime (no GPU runs engines here)."""
    monkeypatch.setenv(FALLBACK_ENV, "onnxruntime")


@pytest.fixture
def no_fallback(monkeypatch):
    monkeypatch.delenv(FALLBACK_ENV, raising=False)


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """Exports each built-in example once per session: name -> (model, inputs, path)."""
    import executorch_tensorrt
    from executorch_tensorrt.examples.models import example

    out = tmp_path_factory.mktemp("exported")
    cache: dict = {}

    def get(name: str, **options):
        key = (name, tuple(sorted(options.items())))
        if key not in cache:
            model, inputs = example(name)
            path = executorch_tensorrt.export(model, inputs, out / f"{name}-{len(cache)}.pte",
                                              progress=None, **options)
            cache[key] = (model, inputs, Path(path))
        return cache[key]

    return get


@pytest.fixture
def python_calls(monkeypatch):
    """{id(executor): number of calls that entered that onnxruntime Python
    executor} (the native plans run the others; a module may count by
    another key with its own fixture of this name)."""
    import collections

    from executorch_tensorrt.runtime.onnxruntime.executor import OnnxRuntimeExecutor

    counts: collections.Counter = collections.Counter()
    original = OnnxRuntimeExecutor.execute

    def counting(self, args, num_args=None):
        counts[id(self)] += 1
        return original(self, args, num_args)

    monkeypatch.setattr(OnnxRuntimeExecutor, "execute", counting)
    return counts


@pytest.fixture(scope="session")
def cached_decoder():
    """The hand-written KV-cache decoder (examples/llm.py), lowered once per
    session: (a factory of pristine eager copies, the .pte bytes)."""
    import copy

    import torch

    from executorch_tensorrt.examples import llm as lm
    from helpers import lower_to_buffer

    torch.manual_seed(0)
    model = lm.CachedDecoder().eval().requires_grad_(False)
    eager = copy.deepcopy(model)  # pristine: each test copies it again
    return (lambda: copy.deepcopy(eager)), lower_to_buffer(lm.export_cached_decoder(model))


def pytest_report_header(config):
    return f"fallback env: {os.environ.get(FALLBACK_ENV, '(unset)')}"
