"""Cold first calls of a partition with dynamic shapes (issue #19, part 2;
docs/concurrency.md): the onnxruntime executor hands the adapter a plan with
per-argument bounds at init, so every call the Python gate would accept, the
first one included and whatever its batch size, runs onnxruntime from C++
(native/src/plans/native_plan.cpp, plan_signature.cpp, native_plan_outputs.cpp);
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
from executorch_tensorrt.runtime import callbacks
from executorch_tensorrt.runtime.onnxruntime import run_plan
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
    original = run_plan.binding_bounds

    def tampered(*args):
        bounds = original(*args)
        return change(bounds) if bounds is not None else None

    monkeypatch.setattr(ort_executor, "binding_bounds", tampered)


def test_an_allocated_output_outside_its_bounds_is_refused_by_the_adapter(
        mlp, allow_fallback, monkeypatch, entries):
    """onnxruntime's output shape is checked against the output's bounds
    before ExecuTorch's output is resized or written."""
    _, path = mlp
    _tampered(monkeypatch, lambda b: [b[0], run_plan.ArgBounds(
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


def _follows(bounds, rule):
    """The output's bounds with another ETRT_OUTPUT_FOLLOWS rule."""
    out = bounds[1]
    assert out.follows == ((0, 0), 16), out  # the batch of input 0, then 16 (output_shapes.py)
    return [bounds[0], run_plan.ArgBounds(out.min, out.max, out.element_size, follows=rule)]


def test_an_output_that_follows_its_input_is_bound_without_a_copy(mlp, allow_fallback,
                                                                 entries):
    """The output's shape is the input's batch: the adapter resizes it and
    onnxruntime writes it in place (the executor counts no copied byte)."""
    _, path = mlp
    method = _load(path)
    [executor] = [e for e in callbacks.install().live_executors()
                  if getattr(e, "lasting_plan", None) is not None][-1:]
    before = executor.copied_bytes
    for batch in (BATCH_MAX, BATCH_MIN, 5):
        assert method.execute([torch.randn(batch, 64)])[0].shape == (batch, 16)
    assert executor.copied_bytes == before and entries == []


def test_a_rule_that_grows_the_output_past_its_memory_plan_is_refused_by_the_adapter(
        mlp, allow_fallback, monkeypatch, entries):
    """A rule taking the output's batch from the input's 64 features: within
    the output's bounds, but more than ExecuTorch planned for it. The resize
    fails and nothing is written."""
    _, path = mlp
    _tampered(monkeypatch, lambda b: _follows(b, ((0, 1), 16)))
    method = _load(path)
    with pytest.raises(RuntimeError):
        method.execute([torch.randn(BATCH_MIN, 64)])
    cause = executorch_tensorrt.last_error()
    assert "cannot resize output 0 to the shape its inputs give it" in cause, cause
    assert entries == []


def test_a_rule_that_gives_a_wrong_shape_fails_the_call_in_onnxruntime(
        mlp, allow_fallback, monkeypatch, entries):
    """A static batch of 5 for every call: onnxruntime refuses to write a bound
    output of another shape than the one it computes."""
    _, path = mlp
    _tampered(monkeypatch, lambda b: _follows(b, (5, 16)))
    method = _load(path)
    with pytest.raises(RuntimeError):
        method.execute([torch.randn(4, 64)])
    cause = executorch_tensorrt.last_error()
    assert "onnxruntime Run failed (native plan" in cause, cause
    assert entries == []


@pytest.mark.parametrize("rule", [((1, 0), 16), ((0, 2), 16), ((0, -1), 16)],
                         ids=["the-output-itself", "no-such-dimension", "negative-dimension"])
def test_a_malformed_rule_makes_the_adapter_refuse_the_plan(rule, mlp, allow_fallback,
                                                           monkeypatch, entries):
    """A size taken from the output itself or from a dimension the input does
    not have: the adapter takes no plan, so every call goes to the executor,
    which answers it right."""
    model, path = mlp
    _tampered(monkeypatch, lambda b: _follows(b, rule))
    method = _load(path)
    x = torch.randn(4, 64)
    got = method.execute([x])[0]
    with torch.no_grad():
        assert torch.allclose(got, model(x), atol=1e-5, rtol=1e-5)
    assert entries == [(True, 4)]


def test_an_allocated_output_of_another_element_type_is_refused_by_the_adapter(
        mlp, allow_fallback, monkeypatch, entries):
    _, path = mlp
    types = OnnxRuntimeExecutor._lasting_plan

    # onnxruntime allocates the output (else it is bound in place, and
    # onnxruntime's wrap refuses the lie first: int64 needs twice the bytes).
    _tampered(monkeypatch, lambda b: [b[0], run_plan.ArgBounds(
        b[1].min, b[1].max, b[1].element_size, allocated=True)])

    def lying(self):  # the plan claims int64 for the float output
        plan = types(self)
        plan._element_types[1] = 7
        return plan

    monkeypatch.setattr(OnnxRuntimeExecutor, "_lasting_plan", lying)
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

    mine = []  # the executor of this test's call (other tests' may be collected here)

    def held(self, args, num_args=None):
        mine.append(id(self))
        inside.set()
        assert dropped.wait(timeout=30)
        order.append("call returns")
        return execute(self, args, num_args)

    def closing(self):
        if self.session is not None and id(self) in mine:
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
