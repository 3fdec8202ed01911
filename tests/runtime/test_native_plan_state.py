"""Native plans of stateful partitions (issue 13): a decode call identical to
a checked one runs in the adapter (native/src/native_plan.cpp), which first
checks the cache positions the way runtime/state.py does, then runs
onnxruntime over the state the executor bound, and copies out the logits
(an output of dynamic shape).

Real programs (the hand-written cached decoder, lowered once per module)
through the real ExecuTorch runtime and onnxruntime; the only instrumentation
is a pass-through wrapper around the executor's execute that counts how often
Python was entered."""
from __future__ import annotations

import collections
import copy

import pytest
import torch

import executorch_tensorrt
from executorch_tensorrt.runtime import state as rt_state
from executorch_tensorrt.runtime.generate import greedy_decode
from executorch_tensorrt.runtime.onnxruntime_executor import OnnxRuntimeExecutor
from executorch_tensorrt.tools import llm_models as lm

PLAN_ENV = "EXECUTORCH_TENSORRT_NATIVE_PLAN"
PROMPT = list(range(3, 11))  # 8 tokens
VOCAB = 96  # CachedDecoder's head


@pytest.fixture
def python_calls(monkeypatch):
    """{id(executor): number of calls that entered that Python executor}."""
    counts: collections.Counter = collections.Counter()
    original = OnnxRuntimeExecutor.execute

    def counting(self, args, num_args=None):
        counts[id(self)] += 1
        return original(self, args, num_args)

    monkeypatch.setattr(OnnxRuntimeExecutor, "execute", counting)
    return counts


@pytest.fixture(scope="module")
def decoder():
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from executorch_tensorrt.aot.partitioner import TensorRTPartitioner

    torch.manual_seed(0)
    model = lm.CachedDecoder().eval().requires_grad_(False)
    eager = copy.deepcopy(model)  # pristine: each test copies it again
    edge = to_edge_transform_and_lower(
        lm.export_cached_decoder(model), partitioner=[TensorRTPartitioner(progress=None)],
        compile_config=EdgeCompileConfig(_check_ir_validity=False))
    return eager, edge.to_executorch().buffer


def _load(buffer: bytes, monkeypatch, plans: bool = True):
    """The method and its partition's state (one TensorRT partition)."""
    from executorch.runtime import Runtime

    before = set(map(id, rt_state.live_states("forward")))
    if not plans:
        monkeypatch.setenv(PLAN_ENV, "0")
    method = Runtime.get().load_program(buffer).load_method("forward")
    monkeypatch.delenv(PLAN_ENV, raising=False)
    [state] = [s for s in rt_state.live_states("forward") if id(s) not in before]
    return method, state, id(_executor(state))


def _executor(state):
    from executorch_tensorrt.runtime import backend_callbacks

    [executor] = [e for e in backend_callbacks.install().handles.values()
                  if getattr(e, "state", None) is state]
    return executor


def test_decode_runs_in_the_adapter_and_matches_eager(decoder, allow_fallback, monkeypatch,
                                                      python_calls):
    """Python runs the prompt and the first single token (each a new shape);
    every later token is the adapter's, with the same tokens and logits as
    eager and as the Python path, and only the logits copied."""
    eager, buffer = decoder
    planned, state, planned_id = _load(buffer, monkeypatch)
    python, _, python_id = _load(buffer, monkeypatch, plans=False)
    executor = _executor(state)
    before = executor.copied_bytes
    got = greedy_decode(planned, PROMPT, 32)
    assert python_calls[planned_id] == 2, "decode tokens entered Python"
    # Prompt logits [1, 8, V] and 31 single tokens, copied in by the adapter after the first.
    assert executor.copied_bytes - before == (len(PROMPT) + 31) * VOCAB * 4
    want = greedy_decode(copy.deepcopy(eager), PROMPT, 32)
    slow = greedy_decode(python, PROMPT, 32)
    assert python_calls[python_id] == 32
    assert got.tokens == want.tokens == slow.tokens
    for a, b, c in zip(got.logits, want.logits, slow.logits):
        assert torch.equal(a, c)
        assert float((a - b).abs().max() / b.abs().max()) < 1e-4


def _refusal(method, tokens, positions) -> str:
    with pytest.raises(RuntimeError):
        method.execute([tokens, positions])
    return executorch_tensorrt.last_error()


@pytest.mark.parametrize("warm,bad,words", [
    ([0], [48], "cache position 48 (index 0 of the positions input) is outside the cache"),
    ([0], [-1], "cache position -1"),
    ([0, 1], [47, 48], "cache position 48 (index 1"),
    ([0, 1], [3, 5], "cache positions must be contiguous"),
])
def test_a_bad_position_on_a_planned_call_is_refused_in_the_executors_words(
        decoder, allow_fallback, monkeypatch, python_calls, warm, bad, words):
    """After the plan for a shape is installed, a call of that shape with a bad
    position never enters Python: the adapter refuses it with the Python
    path's exact message and writes nothing into the cache."""
    _eager, buffer = decoder
    planned, state, planned_id = _load(buffer, monkeypatch)
    python, _, _ = _load(buffer, monkeypatch, plans=False)
    tokens = torch.tensor([[5] * len(warm)])
    planned.execute([tokens, torch.tensor(warm)])  # Python: checks, binds, plans
    planned.execute([tokens, torch.tensor(warm)])  # the plan
    entered = python_calls[planned_id]
    caches = {s.fqn: state.value(s.fqn) for s in state.specs}
    cause = _refusal(planned, tokens, torch.tensor(bad))
    assert python_calls[planned_id] == entered, "the bad call went to Python, not the plan"
    assert words in cause, cause
    assert cause == _refusal(python, tokens, torch.tensor(bad))  # same words, either side
    assert all(torch.equal(state.value(fqn), v) for fqn, v in caches.items())
    # The plan is still good for a good call.
    planned.execute([tokens, torch.tensor(warm)])
    assert python_calls[planned_id] == entered


def test_reset_with_a_plan_installed_starts_from_an_empty_cache(decoder, allow_fallback,
                                                                monkeypatch, python_calls):
    """reset_state rewrites the cache where it lies; the plan bound over it
    runs the next token on the reset cache (it caches nothing reset changes)."""
    eager, buffer = decoder
    planned, state, planned_id = _load(buffer, monkeypatch)
    first = greedy_decode(planned, PROMPT, 4)
    entered = python_calls[planned_id]
    assert executorch_tensorrt.reset_state("forward") >= 1
    assert all(float(state.value(s.fqn).abs().sum()) == 0 for s in state.specs)
    # One token at position 0, the shape of the installed plan: the adapter runs it.
    got = planned.execute([torch.tensor([[7]]), torch.tensor([0])])[0]
    assert python_calls[planned_id] == entered
    with torch.no_grad():
        want = copy.deepcopy(eager)(torch.tensor([[7]]), torch.tensor([0]))
    assert float((got - want).abs().max() / want.abs().max()) < 1e-4
    executorch_tensorrt.reset_state("forward")
    assert greedy_decode(planned, PROMPT, 4).tokens == first.tokens
