"""Load-time GPU options that are read without a GPU: the device override
and the CUDA-graph switch (docs/gpu-runtime.md)."""
from __future__ import annotations

import pytest

from executorch_tensorrt.errors import ArgumentError, EngineUnavailable
from executorch_tensorrt.runtime.cuda.device import DEVICE_ENV, chosen_device, parse_device
from executorch_tensorrt.runtime.cuda.graphs import CUDA_GRAPHS_ENV, cuda_graphs_enabled
from executorch_tensorrt.runtime.cuda.probe import cuda_unavailable_reason


@pytest.mark.parametrize("text, index", [("0", 0), ("3", 3), (" cuda:1 ", 1), ("CUDA:2", 2)])
def test_device_indices(text, index):
    assert parse_device(text, DEVICE_ENV) == index


@pytest.mark.parametrize("text", ["", "gpu", "-1", "cuda:", "1.0", "cuda:x"])
def test_a_bad_device_is_refused_naming_its_source(text, monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, text or " ")
    if not text:  # blank: not set, the program's device_id applies
        return
    with pytest.raises(ArgumentError, match=rf"{DEVICE_ENV} is .*expected a CUDA device index"):
        chosen_device({"device_id": 0})


def test_without_a_gpu_the_device_choice_says_why(monkeypatch):
    reason = cuda_unavailable_reason()
    if reason is None:
        pytest.skip("a GPU is present: tests/runtime/tensorrt/test_tensorrt_context_gpu.py covers it")
    monkeypatch.setenv(DEVICE_ENV, "1")
    with pytest.raises(EngineUnavailable, match="CUDA driver|libcuda"):
        chosen_device({"device_id": 0})


@pytest.mark.parametrize("env, option, enabled", [
    (None, None, True), ("0", None, False), ("off", None, False), ("1", None, True),
    ("0", "1", True), (None, "false", False)])
def test_cuda_graph_switch(env, option, enabled, monkeypatch):
    if env is None:
        monkeypatch.delenv(CUDA_GRAPHS_ENV, raising=False)
    else:
        monkeypatch.setenv(CUDA_GRAPHS_ENV, env)
    assert cuda_graphs_enabled(option) is enabled


def test_the_load_time_option_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "not a device")
    with pytest.raises(ArgumentError, match=r'the load-time backend option "device" is'):
        chosen_device({}, option="gpu0")
    if cuda_unavailable_reason() is not None:  # parsed fine, then: no GPU here
        with pytest.raises(EngineUnavailable):
            chosen_device({}, option="cuda:0")
