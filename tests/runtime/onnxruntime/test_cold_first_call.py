"""Cold first calls (issue #19, docs/concurrency.md): a partition with static
shapes gets its native plan at init, so even the first call of a freshly
loaded method runs onnxruntime without entering Python, and threads that all
make their first call at once cannot interleave inside one method.

Real programs, the real ExecuTorch runtime and onnxruntime. The instrumentation
is a pass-through wrapper around the Python executor's execute that counts
entries; in the threaded child it also holds the first entrant inside (an
event wait) until every other thread has made its call, which forces the
interleaving that crashed before: no race decides the outcome."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import executorch_tensorrt
from executorch_tensorrt.examples.models import Mlp
from executorch_tensorrt.runtime.onnxruntime.executor import OnnxRuntimeExecutor

THREADS = 8


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    torch.manual_seed(0)
    model = Mlp().eval()
    path = tmp_path_factory.mktemp("cold") / "mlp.pte"
    executorch_tensorrt.export(model, (torch.randn(4, 64),), path, progress=None)
    return model, path


def test_a_freshly_loaded_methods_first_call_enters_no_python(mlp, allow_fallback,
                                                               monkeypatch):
    from executorch.runtime import Runtime

    model, path = mlp
    entries = []
    original = OnnxRuntimeExecutor.execute

    def counting(self, args, num_args=None):
        entries.append(self)
        return original(self, args, num_args)

    monkeypatch.setattr(OnnxRuntimeExecutor, "execute", counting)
    method = Runtime.get().load_program(path).load_method("forward")
    x = torch.randn(4, 64)
    got = method.execute([x])[0]
    assert entries == [], "the first call of a freshly loaded method entered Python"
    with torch.no_grad():
        assert torch.allclose(got, model(x), atol=1e-5, rtol=1e-5)
    # The counter counts: with plans off the same first call enters the executor.
    monkeypatch.setenv("EXECUTORCH_TENSORRT_NATIVE_PLAN", "0")
    Runtime.get().load_program(path).load_method("forward").execute([x])
    assert len(entries) >= 1


CHILD = Path(__file__).with_name("cold_calls_child.py")  # batch 4..4: static


def test_cold_first_calls_from_eight_threads_give_the_right_outputs(mlp):
    _, path = mlp
    env = dict(os.environ, EXECUTORCH_TENSORRT_FALLBACK="onnxruntime")
    done = subprocess.run([sys.executable, str(CHILD), str(path), str(THREADS), "4", "4"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, f"the child died ({done.returncode}): {done.stderr[-3000:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"wrong": 0, "failed": 0, "entries": 0}, result
