"""EXECUTORCH_TENSORRT_ORT_THREADS: onnxruntime's intra-op threads for the
fallback's sessions (docs/llm.md, "Cost per token")."""
from __future__ import annotations

import pytest
import torch

import executorch_tensorrt
from executorch_tensorrt.errors import ArgumentError
from executorch_tensorrt.runtime.onnxruntime.executor import ORT_THREADS_ENV, ort_intra_op_threads
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


def test_a_one_thread_session_runs_the_program(tmp_path, allow_fallback, monkeypatch):
    from executorch.runtime import Runtime

    model, inputs = example("add")
    path = executorch_tensorrt.export(model, inputs, tmp_path / "add.pte", progress=None)
    monkeypatch.setenv(ORT_THREADS_ENV, "1")
    program = Runtime.get().load_program(path)
    method = program.load_method("forward")
    for _ in range(3):
        x = torch.randn_like(inputs[0])
        assert torch.allclose(method.execute([x])[0], model(x))
