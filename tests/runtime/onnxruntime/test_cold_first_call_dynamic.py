"""Cold first calls of a partition with dynamic shapes (issue #19, part 2;
docs/concurrency.md): the onnxruntime executor hands the adapter a plan with
per-argument bounds at init, so every call the Python gate would accept, the
first one included and whatever its batch size, runs onnxruntime from C++
(native/src/native_plan.cpp, plan_signature.cpp, native_plan_outputs.cpp);
a call outside the bounds goes to the Python executor, which refuses it in
its own words.

Real programs (an MLP exported with a dynamic batch, 3..8), the real
ExecuTorch runtime and onnxruntime. The instrumentation is a pass-through
wrapper around the Python executor's execute that counts entries; in the
threaded child it holds the first entrant inside until every other thread has
returned, which forces the interleaving that crashed: no race decides it."""
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
from executorch_tensorrt.runtime import native_plan
from executorch_tensorrt.runtime.onnxruntime import executor as ort_executor
from executorch_tensorrt.runtime.onnxruntime.executor import OnnxRuntimeExecutor

PLAN_ENV = "EXECUTORCH_TENSORRT_NATIVE_PLAN"
THREADS = 8
BATCH_MIN, BATCH_MAX = 3, 8


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    torch.manual_seed(0)
    model = Mlp().eval()
    path = tmp_path_factory.mktemp("cold_dynamic") / "mlp_dynamic.pte"
    batch = torch.export.Dim("batch", min=BATCH_MIN, max=BATCH_MAX)
    executorch_tensorrt.export(model, (torch.randn(4, 64),), path, progress=None,
                               dynamic_shapes=({0: batch},))
    return model, path


@pytest.fixture
def entries(monkeypatch):
    """Calls that entered the Python executor, as (publish_plans, batch)."""
    seen = []
    original = OnnxRuntimeExecutor.execute

    def counting(self, args, num_args=None):
        seen.append((self.publish_plans, args[0].sizes[0]))
        return original(self, args, num_args)

    monkeypatch.setattr(OnnxRuntimeExecutor, "execute", counting)
    return seen


def _load(path):
    from executorch.runtime import Runtime

    return Runtime.get().load_program(path).load_method("forward")


def test_every_shape_in_bounds_runs_without_python_and_equals_the_python_path(
        mlp, allow_fallback, monkeypatch, entries):
    model, path = mlp
    native = _load(path)
    monkeypatch.setenv(PLAN_ENV, "0")
    python = _load(path)
    monkeypatch.delenv(PLAN_ENV)
    torch.manual_seed(3)
    # min and max of the bound, shapes that shrink and grow the output, repeats
    for batch in (BATCH_MIN, BATCH_MAX, 4, 4, 5, BATCH_MIN, 7, BATCH_MAX):
        x = torch.randn(batch, 64)
        got, want = native.execute([x])[0], python.execute([x])[0]
        assert got.shape == (batch, 16) and torch.equal(got, want), batch
        with torch.no_grad():
            assert torch.allclose(got, model(x), atol=1e-5, rtol=1e-5), batch
    assert [b for planned, b in entries if planned] == [], "a call in bounds entered Python"
    assert len([1 for planned, _ in entries if not planned]) == 8  # the counter counts


def test_a_shape_outside_the_bounds_goes_to_python_which_refuses_it(mlp, allow_fallback,
                                                                    entries):
    _, path = mlp
    method = _load(path)
    # ExecuTorch lets a bounded input shrink below the export's min: the plan's
    # bounds (the profile's) do not match, so the executor's gate answers.
    with pytest.raises(RuntimeError):
        method.execute([torch.randn(BATCH_MIN - 1, 64)])
    cause = executorch_tensorrt.last_error()
    assert f"[{BATCH_MIN - 1}, 64]" in cause and f"min [{BATCH_MIN}, 64]" in cause, cause
    assert entries == [(True, BATCH_MIN - 1)]
    # The plan made at init outlives a refused call: the adapter takes it
    # back after the refusal too (executor_table.h, "Lifetime"), so the next
    # calls, from any thread, run no Python; the refusal keeps its cause.
    for batch in (BATCH_MIN, BATCH_MAX, BATCH_MIN):
        method.execute([torch.randn(batch, 64)])
    assert entries == [(True, BATCH_MIN - 1)]


def _tampered(monkeypatch, change):
    """Plans made with bounds that `change` rewrites (what a broken or
    hostile executor could hand the adapter)."""
    original = native_plan.binding_bounds

    def tampered(inputs, outputs):
        bounds = original(inputs, outputs)
        return change(bounds) if bounds is not None else None

    monkeypatch.setattr(ort_executor, "binding_bounds", tampered)


def test_an_allocated_output_outside_its_bounds_is_refused_by_the_adapter(
        mlp, allow_fallback, monkeypatch, entries):
    """onnxruntime's output shape is checked against the output's bounds
    before ExecuTorch's output is resized or written."""
    _, path = mlp
    _tampered(monkeypatch, lambda b: [b[0], native_plan.ArgBounds(
        (0, 16), (4, 16), b[1].element_size, allocated=True)])
    method = _load(path)
    # The output starts at its upper bound, [8, 16], outside the tampered
    # bounds: the first call goes to Python, which resizes it to [4, 16].
    method.execute([torch.randn(4, 64)])
    assert entries == [(True, 4)]
    with pytest.raises(RuntimeError):
        method.execute([torch.randn(5, 64)])  # onnxruntime makes [5, 16]: outside [0..4, 16]
    cause = executorch_tensorrt.last_error()
    assert "output 0 with shape [5, 16], outside the bounds" in cause, cause
    assert entries == [(True, 4)]  # the refusal was the adapter's


def test_an_allocated_output_of_another_element_type_is_refused_by_the_adapter(
        mlp, allow_fallback, monkeypatch, entries):
    _, path = mlp
    types = OnnxRuntimeExecutor._bounded_plan

    def lying(self):  # the plan claims int64 for the float output
        plan = types(self)
        plan._element_types[1] = 7
        return plan

    monkeypatch.setattr(OnnxRuntimeExecutor, "_bounded_plan", lying)
    method = _load(path)
    with pytest.raises(RuntimeError):
        method.execute([torch.randn(BATCH_MIN, 64)])
    cause = executorch_tensorrt.last_error()
    assert "output 0 with element type 1; the partition declares 7" in cause, cause
    assert entries == []


CHILD = Path(__file__).with_name("cold_calls_child.py")


def test_cold_first_calls_of_many_shapes_from_eight_threads_give_the_right_outputs(mlp):
    """Each thread a different batch size (min to max), all first calls of
    one cold method at one barrier."""
    _, path = mlp
    env = dict(os.environ, EXECUTORCH_TENSORRT_FALLBACK="onnxruntime")
    done = subprocess.run([sys.executable, str(CHILD), str(path), str(THREADS),
                           str(BATCH_MIN), str(BATCH_MAX)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, f"the child died ({done.returncode}): {done.stderr[-3000:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"wrong": 0, "failed": 0, "entries": 0}, result


def test_dropping_the_last_references_during_a_call_destroys_only_after_it(
        mlp, allow_fallback, monkeypatch):
    """Another thread drops the last references to the Program and Method
    while a call runs inside the Python executor (held there by an event):
    the delegate is destroyed (the executor closed) only after the call has
    returned, with the right output. The running call's own reference keeps
    the method alive; nothing in the delegate has to."""
    import gc
    import threading

    model, path = mlp
    monkeypatch.setenv(PLAN_ENV, "0")  # every call enters the Python executor
    order, inside, dropped = [], threading.Event(), threading.Event()
    execute, close = OnnxRuntimeExecutor.execute, OnnxRuntimeExecutor.close

    def held(self, args, num_args=None):
        inside.set()
        assert dropped.wait(timeout=30)
        order.append("call returns")
        return execute(self, args, num_args)

    def closing(self):
        if self.session is not None:
            order.append("close")
        return close(self)

    monkeypatch.setattr(OnnxRuntimeExecutor, "execute", held)
    monkeypatch.setattr(OnnxRuntimeExecutor, "close", closing)
    from executorch.runtime import Runtime

    holder = [Runtime.get().load_program(path)]
    holder.append(holder[0].load_method("forward"))
    x, got = torch.randn(5, 64), []
    caller = threading.Thread(target=lambda method: got.append(method.execute([x])[0]),
                              args=(holder[1],))
    caller.start()
    assert inside.wait(timeout=30)
    holder.clear()  # the last references but the running call's
    gc.collect()
    order.append("dropped")
    dropped.set()
    caller.join(timeout=60)
    gc.collect()
    with torch.no_grad():
        assert torch.allclose(got[0], model(x), atol=1e-5, rtol=1e-5)
    assert order == ["dropped", "call returns", "close"], order
