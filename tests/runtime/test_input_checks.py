"""Inputs eager PyTorch refuses are refused by the delegate too (issue 19):
index values outside the range recorded at export ("index_range") and input
dimensions that must agree ("equal_dims"), on the native-plan path (the
adapter, no Python) and on the Python path (EXECUTORCH_TENSORRT_NATIVE_PLAN=0),
before anything is written.

Real programs (a small embedding + index model, the hand-written cached
decoder), each lowered once per module, run through executorch.runtime with
the onnxruntime fallback; the only instrumentation is a pass-through counter
around the executor's execute. The device-resident branch of the gate is
driven with a labelled stand-in for the CUDA copy (no GPU here)."""
from __future__ import annotations

import copy
import gc

import numpy as np
import pytest
import torch

import executorch_tensorrt
from executorch_tensorrt.blob import BlobError, read_blob, write_blob
from executorch_tensorrt.examples import llm as lm
from executorch_tensorrt.runtime import state as rt_state
from executorch_tensorrt.runtime.adapter import abi
from executorch_tensorrt.runtime.arguments import ArgumentError, check_args, split_bindings
from executorch_tensorrt.runtime.input_checks import InputChecks
from helpers import Args, lower_to_buffer, new_state, tensorrt_blobs

PLAN_ENV = "EXECUTORCH_TENSORRT_NATIVE_PLAN"
VOCAB, ROWS = 32, 10
INT64 = 4  # ExecuTorch ScalarType::Long


class Lookup(torch.nn.Module):
    """Token ids through an embedding; row indices through index.Tensor."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 8)
        self.register_buffer("table", torch.randn(ROWS, 8))

    def forward(self, ids, rows):
        return self.embed(ids) * 2.0, self.table[rows] + 1.0


@pytest.fixture(scope="module")
def lookup():
    torch.manual_seed(0)
    model = Lookup().eval().requires_grad_(False)
    example = (torch.tensor([[1, 2, 3, 4]]), torch.tensor([0, 1, 2]))
    return model, lower_to_buffer(torch.export.export(model, example))


@pytest.fixture(scope="module")
def decoder(cached_decoder):
    """In-place KV caches only (lowered once per session: conftest.py)."""
    return cached_decoder


_loaded: list = []


@pytest.fixture(autouse=True)
def _release_programs():
    yield
    _loaded.clear()
    gc.collect()


def _load(buffer: bytes, monkeypatch, plans: bool):
    from executorch.runtime import Runtime

    if not plans:
        monkeypatch.setenv(PLAN_ENV, "0")
    program = Runtime.get().load_program(buffer)
    _loaded.append(program)
    method = program.load_method("forward")
    monkeypatch.delenv(PLAN_ENV, raising=False)
    return method


def _refusal(method, inputs) -> str:
    with pytest.raises(RuntimeError):
        method.execute(inputs)
    return executorch_tensorrt.last_error()


def test_export_records_the_ranges_and_equal_dims_eager_checks(lookup, decoder):
    meta = read_blob(tensorrt_blobs(lookup[1])[0]).metadata
    ranges = {b["name"]: b.get("index_range") for b in meta["io_bindings"] if b["is_input"]}
    assert ranges == {"arg_0": [0, VOCAB], "arg_1": [-ROWS, ROWS]}  # embedding; index.Tensor
    assert "equal_dims" not in meta  # static shapes: nothing to record
    meta = read_blob(tensorrt_blobs(decoder[1])[0]).metadata
    inputs = [b for b in meta["io_bindings"] if b["is_input"]]
    assert len(inputs) == 2  # tokens, input_pos (the exporter names them arg_4, arg_5)
    assert inputs[0]["index_range"] == [0, 96]
    assert "index_range" not in inputs[1]  # index_put's positions: the state's own checks
    assert meta["equal_dims"] == [[[0, 1], [1, 0]]]  # tokens [1, S] and input_pos [S]


@pytest.mark.parametrize("plans", [True, False], ids=["native-plan", "python"])
@pytest.mark.parametrize("ids,rows,words", [
    ([1, 2, -1, 4], [0, 1, 2], "input 0 ('arg_0') holds -1 at position [0, 2], outside its valid "
                               "range [0, 32): the values index a dimension of size 32 (an "
                               "embedding or gather: token ids must be < vocabulary size 32)"),
    ([32, 2, 3, 4], [0, 1, 2], "input 0 ('arg_0') holds 32 at position [0, 0], outside its valid "
                               "range [0, 32)"),
    ([1, 2, 3, 37], [0, 1, 2], "holds 37 at position [0, 3]"),
    ([1, 2, 3, 4], [0, -11, 2], "input 1 ('arg_1') holds -11 at position [1], outside its valid "
                                "range [-10, 10): the values index a dimension of size 10 "
                                "(negative values count from its end)"),
    ([1, 2, 3, 4], [0, 1, 10], "input 1 ('arg_1') holds 10 at position [2]"),
])
def test_out_of_range_indices_are_refused_on_both_paths(lookup, allow_fallback, monkeypatch,
                                                        python_calls, plans, ids, rows, words):
    model, buffer = lookup
    method = _load(buffer, monkeypatch, plans)
    good = [torch.tensor([[1, 2, 3, 4]]), torch.tensor([0, -10, 9])]  # -10: eager takes it
    got = method.execute(good)
    want = model(*good)
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(got, want))
    entered = sum(python_calls.values())
    for bad in ([torch.tensor([ids]), torch.tensor(rows)],):
        with pytest.raises(IndexError):
            model(*bad)  # eager refuses it too
        cause = _refusal(method, bad)
        assert words in cause, cause
        assert cause.startswith("TensorRTBackend execute: ")
    # Static shapes: the adapter's plan runs every call, refusals included.
    assert (sum(python_calls.values()) == entered) == plans
    again = method.execute(good)
    assert all(torch.equal(a, b) for a, b in zip(again, got))


def _caches(method_state):
    return {s.fqn: method_state.value(s.fqn).copy() for s in method_state.specs}


@pytest.mark.parametrize("plans", [True, False], ids=["native-plan", "python"])
def test_decoder_refuses_bad_tokens_and_mismatched_counts_cache_unchanged(
        decoder, allow_fallback, monkeypatch, python_calls, plans):
    fresh, buffer = decoder
    before = rt_state.live_states("forward")
    method = _load(buffer, monkeypatch, plans)
    state = new_state(before)
    eager = fresh()
    prompt = (torch.tensor([[3, 4, 5]]), torch.tensor([0, 1, 2]))
    step1, step2 = (torch.tensor([[6]]), torch.tensor([3])), (torch.tensor([[7]]), torch.tensor([4]))
    with torch.no_grad():
        eager(*prompt)
        eager(*step1)
        want = eager(*step2)
    method.execute(list(prompt))
    method.execute(list(step1))  # Python; with plans, the next [1, 1] call is the adapter's
    caches = _caches(state)
    entered = sum(python_calls.values())
    tok, pos = [b["name"] for b in read_blob(tensorrt_blobs(buffer)[0]).metadata["io_bindings"]
                if b["is_input"]]  # the ONNX exporter's names
    for bad, words in [
        ((torch.tensor([[96]]), torch.tensor([3])),
         f"input 0 ({tok!r}) holds 96 at position [0, 0], outside its valid range [0, 96)"),
        ((torch.tensor([[-1]]), torch.tensor([3])), f"input 0 ({tok!r}) holds -1"),
        ((torch.tensor([[6, 7]]), torch.tensor([3])),
         f"input 0 ({tok!r}) dimension 1 has size 2 but input 1 ({pos!r}) dimension 0 "
         "has size 1"),
    ]:
        cause = _refusal(method, list(bad))
        assert words in cause, cause
        assert all(np.array_equal(state.value(f), v) for f, v in caches.items()), \
            "a refused call wrote into the cache"
    if plans:  # the single-token refusals never entered Python; the 2-token one did
        assert sum(python_calls.values()) == entered + 1
    got = method.execute(list(step2))[0]  # the cache is as the good calls left it
    assert float((got - want).abs().max() / want.abs().max()) < 1e-4


# -- the gate itself: device-resident inputs --------------------------------------
def _gate(index_range):
    meta = {"io_bindings": [
        {"name": "ids", "dtype": "int64", "shape": [4], "is_input": True,
         "index_range": index_range},
        {"name": "y", "dtype": "float32", "shape": [4], "is_input": False}]}
    inputs, outputs = split_bindings(meta)
    return inputs, outputs, InputChecks.from_metadata(meta, ["ids"])


def test_device_resident_index_inputs_are_read_and_checked():
    """The TensorRT executor's CUDA inputs: the gate reads them through the
    executor's copy (here a labelled stand-in for cuMemcpyDtoH, which needs
    a GPU) and refuses what eager would; without a reader it refuses the call."""
    inputs, outputs, checks = _gate([0, 8])
    a = Args()
    device_ids = np.array([1, 2, 9, 3], np.int64)  # "device memory": only the stand-in reads it
    arg = a.tensor(device_ids, is_input=True, dtype=INT64, shape=(4,))
    arg.device_type = abi.ETRT_DEVICE_CUDA
    out = a.tensor(np.zeros(4, np.float32), is_input=False, shape=(4,))
    args = a.array(arg, out)
    reads = []

    def stand_in_copy(arg, shape):  # STAND-IN for the CUDA device-to-host copy
        reads.append(shape)
        return device_ids.copy().reshape(shape)

    with pytest.raises(ArgumentError, match=r"input 0 \('ids'\) holds 9 at position \[2\]"):
        check_args(args, 2, inputs, outputs, checks=checks, read_device=stand_in_copy)
    assert reads == [(4,)]
    with pytest.raises(ArgumentError, match="cannot read device memory"):
        check_args(args, 2, inputs, outputs, checks=checks)
    device_ids[2] = 7
    assert check_args(args, 2, inputs, outputs, checks=checks,
                      read_device=stand_in_copy).shapes == ((4,),)


# -- the schema: malformed values are untrusted input -------------------------------
def _meta(index_range=None, equal_dims=None, dtype="int64", is_input=True):
    meta = {"io_bindings": [
        {"name": "a", "dtype": dtype, "shape": [1, -1], "is_input": is_input},
        {"name": "b", "dtype": "int64", "shape": [-1], "is_input": True},
        {"name": "y", "dtype": "float32", "shape": [-1], "is_input": False}]}
    if index_range is not None:
        meta["io_bindings"][0]["index_range"] = index_range
    if equal_dims is not None:
        meta["equal_dims"] = equal_dims
    return meta


@pytest.mark.parametrize("meta,words", [
    (_meta([5, 5]), "lo < hi"),
    (_meta([6, 2]), "lo < hi"),
    (_meta([0]), "index_range must be"),
    (_meta([0, 2**63]), "64-bit"),
    (_meta([0, 1.5]), "index_range must be"),
    (_meta("0,5"), "index_range must be"),
    (_meta([0, 5], dtype="float32"), "only integer inputs"),
    (_meta([0, 5], is_input=False), "only an input's values"),
    (_meta(equal_dims=[[[0, 1]]]), "at least 2"),
    (_meta(equal_dims=[[[0, 1], [2, 0]]]), "names input 2"),
    (_meta(equal_dims=[[[0, 1], [1, 1]]]), "dimension 1 of input 1"),
    (_meta(equal_dims=[[[0, 1], [0, 1]]]), "twice"),
    (_meta(equal_dims=[[[0, 1], [1, "0"]]]), "two integers"),
    (_meta(equal_dims={"a": 1}), "array of groups"),
])
def test_schema_refuses_malformed_values(meta, words):
    with pytest.raises(BlobError) as e:
        write_blob(b"\0" * 16, meta)
    assert words in str(e.value), str(e.value)


def test_schema_accepts_the_written_form_and_reads_it_back():
    blob = write_blob(b"\0" * 16, _meta([-3, 3], [[[0, 1], [1, 0]]]))
    meta = read_blob(blob).metadata
    checks = InputChecks.from_metadata(meta, ["a", "b"])
    assert [(r.input, r.lo, r.hi) for r in checks.ranges] == [(0, -3, 3)]
    assert checks.equal_dims == (((0, 1), (1, 0)),)


# -- last_error(): ExecuTorch's own refusals ------------------------------------------
@pytest.mark.parametrize("bad,words", [
    ([torch.ones(1, 4), torch.tensor([0, 1, 2])],
     "ExecuTorch refused input 0: dtype float32, the program takes int64."),
    ([torch.tensor([[1, 2, 3, 4, 5]]), torch.tensor([0, 1, 2])],
     "ExecuTorch refused input 0: shape [1, 5], the program plans [1, 4]"),
    ([torch.tensor([[1, 2, 3, 4]]), torch.tensor([[0, 1, 2]])],
     "ExecuTorch refused input 1: shape [1, 3], the program plans [3]"),
])
def test_the_runner_names_executorchs_own_refusal_not_a_stale_backend_cause(
        lookup, allow_fallback, monkeypatch, bad, words):
    """set_inputs refuses these before our backend runs (ExecuTorch only logs
    why); last_error() still holds the previous, unrelated backend failure,
    which the runner must not quote."""
    from executorch_tensorrt.cli.runner import RunError, execute
    from executorch_tensorrt.program import tensor_file as tf

    method = _load(lookup[1], monkeypatch, plans=False)
    stale = _refusal(method, [torch.tensor([[1, 2, 3, 99]]), torch.tensor([0, 1, 2])])
    with pytest.raises(RunError) as e:
        execute(method, [tf.from_torch(f"input.{i}", t) for i, t in enumerate(bad)])
    assert "set_inputs" in str(e.value) and words in str(e.value), str(e.value)
    assert executorch_tensorrt.last_error() == stale  # ours, untouched: the backend never ran
    assert "holds 99" not in str(e.value)


@pytest.fixture(scope="module")
def dynamic_lookup():
    """Lookup with dynamic lengths (separate symbols: no equal_dims), so its
    fallback gets a plan with bounds at init (any length within them)."""
    torch.manual_seed(0)
    model = Lookup().eval().requires_grad_(False)
    example = (torch.tensor([[1, 2, 3, 4]]), torch.tensor([0, 1, 2]))
    dims = ({1: torch.export.Dim("s", min=2, max=8)}, {0: torch.export.Dim("r", min=2, max=8)})
    return model, lower_to_buffer(torch.export.export(model, example, dynamic_shapes=dims))


def test_plan_with_bounds_checks_the_values_of_each_calls_shape(dynamic_lookup, allow_fallback,
                                                                 monkeypatch, python_calls):
    """The index check reads the call's own shape, not the plan's signature:
    a bad id at the last position of a longer call is refused in the adapter."""
    model, buffer = dynamic_lookup
    method = _load(buffer, monkeypatch, plans=True)
    for n in (2, 5, 8):
        good = [torch.arange(n).reshape(1, n), torch.arange(n) % ROWS]
        got = method.execute(good)
        assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(got, model(*good)))
    bad = [torch.tensor([[1, 2, 3, 4, 5, 6, 7, VOCAB]]), torch.tensor([0, 1])]
    cause = _refusal(method, bad)
    assert f"holds {VOCAB} at position [0, 7]" in cause, cause
    assert sum(python_calls.values()) == 0  # every call, the refusal included, in the adapter
