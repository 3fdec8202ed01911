"""Native plans of stateful partitions (issues 13, 24): the plan with bounds
made at init runs every call in the adapter (native/src/plans/native_plan.cpp),
which first checks the cache positions the way runtime/state.py does, then
runs onnxruntime over the state the executor bound, its logits bound in
place; without it, a call identical to a checked one runs there.

Real programs (the hand-written cached decoder, lowered once per module)
through the real ExecuTorch runtime and onnxruntime; the only instrumentation
is a pass-through wrapper around the executor's execute that counts how often
Python was entered."""
from __future__ import annotations

import copy
import gc

import numpy as np
import pytest
import torch

import executorch_tensorrt
from executorch_tensorrt.runtime import state as rt_state
from executorch_tensorrt.runtime.onnxruntime import run_plan
from executorch_tensorrt.llm.greedy_decode import greedy_decode
from executorch_tensorrt.examples import llm as lm
from executorch_tensorrt.llm.hf_export import export_hf
from helpers import lower_to_buffer, new_state

PLAN_ENV = "EXECUTORCH_TENSORRT_NATIVE_PLAN"
PROMPT = list(range(3, 11))  # 8 tokens
VOCAB = 96  # CachedDecoder's head


@pytest.fixture(scope="module")
def decoder(cached_decoder):
    """In-place KV caches only (lowered once per session: conftest.py)."""
    return cached_decoder


@pytest.fixture(scope="module")
def hf_llama():
    """In-place KV caches and two functional (ping-pong) scalar states."""
    wrapper = lm.hf_tiny_llama().requires_grad_(False)
    eager = copy.deepcopy(wrapper)

    def fresh():
        model = copy.deepcopy(eager).model
        return lambda t, p: model(input_ids=t, cache_position=p)

    return fresh, lower_to_buffer(export_hf(wrapper))


_loaded: list = []


@pytest.fixture(autouse=True)
def _release_programs():
    """Programs live until the test ends (a Method does not keep its Program
    alive), then go with their executors and states (reset_state and other
    tests look at the live ones)."""
    yield
    _loaded.clear()
    gc.collect()


def _load(buffer: bytes, monkeypatch, plans: bool = True, lasting: bool = True):
    """The method and its partition's state (one TensorRT partition).
    `lasting=False` withdraws the plan made at init (the one with bounds,
    which serves every call), leaving the per-call plans the executor hands
    out after each Python call: the path of partitions without bounds."""
    from executorch.runtime import Runtime

    before = rt_state.live_states("forward")
    if not plans:
        monkeypatch.setenv(PLAN_ENV, "0")
    program = Runtime.get().load_program(buffer)
    _loaded.append(program)  # a Method does not keep its Program alive
    method = program.load_method("forward")
    monkeypatch.delenv(PLAN_ENV, raising=False)
    state = new_state(before)
    if plans and not lasting:
        assert _executor(state).lasting_plan is not None
        _executor(state).withdraw_native_plan()
    return method, state, id(_executor(state))


def _executor(state):
    from executorch_tensorrt.runtime import callbacks

    [executor] = [e for e in callbacks.install().handles.values()
                  if getattr(e, "state", None) is state]
    return executor


@pytest.mark.parametrize("flow,vocab", [("decoder", VOCAB), ("hf_llama", 128)])
def test_decode_runs_in_the_adapter_and_matches_eager(flow, vocab, request, allow_fallback,
                                                      monkeypatch, python_calls):
    """The plan with bounds made at init serves the prompt and every token:
    no call enters Python, and the tokens and logits equal eager's and the
    Python path's. The logits follow the tokens' shape (output_shapes.py),
    so the adapter resizes and binds them in place: it copies no byte."""
    eager, buffer = request.getfixturevalue(flow)
    planned, state, planned_id = _load(buffer, monkeypatch)
    python, _, python_id = _load(buffer, monkeypatch, plans=False)
    executor = _executor(state)
    before = executor.copied_bytes
    got = greedy_decode(planned, PROMPT, 32)
    assert python_calls[planned_id] == 0, "a call entered Python"
    assert executor.copied_bytes - before == 0
    want = greedy_decode(eager(), PROMPT, 32)
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
    assert all(np.array_equal(state.value(fqn), v) for fqn, v in caches.items())
    # The plan is still good for a good call.
    planned.execute([tokens, torch.tensor(warm)])
    assert python_calls[planned_id] == entered


@pytest.mark.parametrize("flow,tokens", [("decoder", 4), ("decoder", 5), ("hf_llama", 4),
                                         ("hf_llama", 5)])
def test_reset_with_a_plan_installed_starts_from_an_empty_cache(
        flow, tokens, request, allow_fallback, monkeypatch, python_calls):
    """reset_state rewrites the states where they lie; the plan bound over them
    runs the next token on the reset state (it caches nothing reset changes),
    whichever ping-pong buffer the plan's runs left current (an odd and an
    even number of planned runs)."""
    eager, buffer = request.getfixturevalue(flow)
    planned, state, planned_id = _load(buffer, monkeypatch)
    first = greedy_decode(planned, PROMPT, tokens)
    entered = python_calls[planned_id]
    assert executorch_tensorrt.reset_state("forward") >= 1
    assert all(float(np.abs(state.value(s.fqn)).sum()) == 0 for s in state.specs)
    # One token at position 0, the shape of the installed plan: the adapter runs it.
    got = planned.execute([torch.tensor([[7]]), torch.tensor([0])])[0]
    assert python_calls[planned_id] == entered
    with torch.no_grad():
        want = eager()(torch.tensor([[7]]), torch.tensor([0]))
    assert float((got - want).abs().max() / want.abs().max()) < 1e-4
    executorch_tensorrt.reset_state("forward")
    assert greedy_decode(planned, PROMPT, tokens).tokens == first.tokens


@pytest.mark.parametrize("lasting", [True, False])
@pytest.mark.parametrize("flow", ["decoder", "hf_llama"])
def test_states_after_planned_runs_equal_the_python_paths(flow, lasting, request, allow_fallback,
                                                          monkeypatch, python_calls):
    """The same calls on a planned method and on one without plans: every
    state's value is the same after each call. With per-call plans Python
    also takes over after an odd number of planned runs (it must read the
    ping-pong buffer the adapter wrote last)."""
    _eager, buffer = request.getfixturevalue(flow)
    planned, state, planned_id = _load(buffer, monkeypatch, lasting=lasting)
    python, reference, _ = _load(buffer, monkeypatch, plans=False)
    calls = [[0, 1, 2], [3], [4], [5], [6, 7], [8], [9], [10, 11, 12], [13], [14]]
    for positions in calls:
        args = [torch.tensor([[(5 * p) % 97 for p in positions]]), torch.tensor(positions)]
        assert torch.equal(planned.execute(args)[0], python.execute(args)[0]), positions
        for spec in state.specs:
            assert np.array_equal(state.value(spec.fqn), reference.value(spec.fqn)), spec.fqn
    # every call ran in the adapter, or some did
    assert python_calls[planned_id] == 0 if lasting else python_calls[planned_id] < len(calls)


class _Scatter(torch.nn.Module):
    """A cache updated with index_copy_ (the functional, ping-pong form) whose
    every value reaches the output: a stale buffer shows in the result."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("k", torch.zeros(1, 6, 8))

    def forward(self, x, pos):
        self.k.index_copy_(1, pos, self.lin(x))
        return self.k.sum(1)


@pytest.mark.parametrize("lasting", [True, False])
def test_python_after_an_odd_number_of_planned_runs_reads_the_buffer_written_last(
        lasting, allow_fallback, monkeypatch, python_calls):
    """A functional state alternates two buffers; the adapter's plan swaps
    them per run (counting in state.swaps). When Python takes a call after
    an odd number of planned runs (per-call plans), it must continue from the
    buffer the adapter wrote last, and a plan made at either parity must
    start from the current one: every output equals eager's."""
    from executorch_tensorrt.blob import read_blob

    torch.manual_seed(0)
    model = _Scatter().eval().requires_grad_(False)
    eager = copy.deepcopy(model)
    s = torch.export.Dim("s", min=1, max=6)
    ep = torch.export.export(model, (torch.randn(1, 2, 8), torch.arange(2)),
                             dynamic_shapes=({1: s}, {0: s}))
    buffer = lower_to_buffer(ep)
    from executorch.exir._serialize._program import deserialize_pte_binary
    program = deserialize_pte_binary(buffer).program
    [entry] = read_blob(bytes(program.backend_delegate_data[0].data)).state
    assert entry["update"] == "functional"
    planned, state, planned_id = _load(buffer, monkeypatch, lasting=lasting)
    made = []
    original = run_plan.OrtRunPlan.__init__
    monkeypatch.setattr(run_plan.OrtRunPlan, "__init__",
                        lambda self, *a, **k: (made.append(1), original(self, *a, **k))[1])
    calls = [[0, 1], [2, 3], [4], [5], [0], [1, 2], [3, 4], [5, 0], [1]]
    for positions in calls:
        x = torch.randn(1, len(positions), 8)
        got = planned.execute([x, torch.tensor(positions)])[0]
        with torch.no_grad():
            want = eager(x, torch.tensor(positions))
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(torch.from_numpy(state.value("k")), eager.k)
    # Per-call plans: each new shape (the plans of earlier shapes are reused
    # at either parity); the rest ran in the adapter.
    entered = 0 if lasting else 4
    assert python_calls[planned_id] == entered
    assert len(made) == (0 if lasting else 2)  # one plan per shape, whatever the parity
    # Reset with the plan installed, with the value in one buffer and then in
    # the other (one run apart): the next planned run starts from zeros
    # (reset writes both buffers).
    parities = []
    for i in range(2):
        parities.append(state.swaps.value % 2)
        executorch_tensorrt.reset_state("forward")
        eager.k.zero_()
        x, where = torch.randn(1, 1, 8), torch.tensor([3 + i])
        got = planned.execute([x, where])[0]
        with torch.no_grad():
            torch.testing.assert_close(got, eager(x, where))
    assert sorted(parities) == [0, 1]
    assert python_calls[planned_id] == entered
