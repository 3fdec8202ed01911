"""EXECUTORCH_TENSORRT_ORT_THREADS: onnxruntime's intra-op threads for the
fallback's sessions (docs/llm.md, "Cost per token"), and EXECUTORCH_TENSORRT_ORT_SPINNING:
what their idle threads do (runtime/onnxruntime/threads.py)."""
from __future__ import annotations

import pytest
import torch

import executorch_tensorrt
from executorch_tensorrt.errors import ArgumentError
from executorch_tensorrt.runtime.onnxruntime.threads import (ORT_SPINNING_ENV, ORT_THREADS_ENV,
                                                         SPINNING_MODES, OrtThreads,
                                                         ort_intra_op_threads)
from executorch_tensorrt.examples.models import example


@pytest.mark.parametrize("text,threads", [("", 0), ("0", 0), ("1", 1), (" 3 ", 3)])
def test_thread_counts(monkeypatch, text, threads):
    monkeypatch.setenv(ORT_THREADS_ENV, text)
    assert ort_intra_op_threads() == threads


@pytest.mark.parametrize("text", ["-1", "two", "1.5"])
def test_a_bad_value_names_the_variable(monkeypatch, text):
    monkeypatch.setenv(ORT_THREADS_ENV, text)
    with pytest.raises(ArgumentError, match=f"{ORT_THREADS_ENV}=.*not a thread count"):
        ort_intra_op_threads()


@pytest.fixture(scope="module")
def add_program(tmp_path_factory):
    model, inputs = example("add")
    path = executorch_tensorrt.export(model, inputs, tmp_path_factory.mktemp("threads") / "add.pte",
                                      progress=None)
    return model, inputs, path


def test_a_one_thread_session_runs_the_program(add_program, allow_fallback, monkeypatch):
    from executorch.runtime import Runtime

    model, inputs, path = add_program
    monkeypatch.setenv(ORT_THREADS_ENV, "1")
    program = Runtime.get().load_program(path)
    method = program.load_method("forward")
    for _ in range(3):
        x = torch.randn_like(inputs[0])
        assert torch.allclose(method.execute([x])[0], model(x))


@pytest.mark.parametrize("text,mode", [("", "off"), ("off", "off"), (" RUN ", "run"),
                                       ("on", "on")])
def test_spinning_modes(monkeypatch, text, mode):
    monkeypatch.setenv(ORT_SPINNING_ENV, text)
    assert OrtThreads.from_environment().spinning == mode


def test_a_bad_spinning_mode_names_the_variable_and_the_choices(monkeypatch):
    monkeypatch.setenv(ORT_SPINNING_ENV, "fast")
    with pytest.raises(ArgumentError, match=f"{ORT_SPINNING_ENV}='fast' is not a spinning "
                                            "mode: set one of off, run, on"):
        OrtThreads.from_environment()


@pytest.mark.parametrize("mode", SPINNING_MODES)
def test_each_spinning_mode_runs_the_program_on_two_threads(add_program, allow_fallback,
                                                           monkeypatch, mode):
    """onnxruntime takes each mode's session options and its 2-thread pool
    computes what eager does."""
    from executorch.runtime import Runtime

    model, inputs, path = add_program
    monkeypatch.setenv(ORT_THREADS_ENV, "2")
    monkeypatch.setenv(ORT_SPINNING_ENV, mode)
    method = Runtime.get().load_program(path).load_method("forward")
    x = torch.randn_like(inputs[0])
    assert torch.allclose(method.execute([x])[0], model(x))
