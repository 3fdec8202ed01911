"""LLM decoding with the KV cache inside the TensorRT partition (issue 13).

Both flows users run: a hand-written decoder with register_buffer caches and
input_pos, and transformers' own ExecuTorch export of a tiny random Llama.
Each is lowered once per module; the checks read the program itself.
"""
from __future__ import annotations

import copy

import pytest
import torch
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

from executorch_tensorrt.aot.partition.partitioner import TensorRTPartitioner
from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.llm.greedy_decode import greedy_decode
from executorch_tensorrt.examples import llm as lm
from executorch_tensorrt.llm.hf_export import export_hf
from helpers import new_state, tensorrt_blobs

PROMPT = list(range(3, 11))  # 8 tokens
NEW_TOKENS = 32


def _lower(ep, **options):
    partitioner = TensorRTPartitioner(progress=None, **options)
    edge = to_edge_transform_and_lower(
        ep, partitioner=[partitioner],
        compile_config=EdgeCompileConfig(_check_ir_validity=False))
    return edge.to_executorch(), partitioner.report


@pytest.fixture(scope="module")
def decoder():
    torch.manual_seed(0)
    model = lm.CachedDecoder().eval().requires_grad_(False)
    eager = copy.deepcopy(model)
    program, report = _lower(lm.export_cached_decoder(model))
    return eager, program, report


@pytest.fixture(scope="module")
def hf_llama():
    wrapper = lm.hf_tiny_llama()
    wrapper.requires_grad_(False)
    eager = copy.deepcopy(wrapper)
    program, report = _lower(export_hf(wrapper))
    return (lambda t, p: eager.model(input_ids=t, cache_position=p)), program, report


FLOWS = ["decoder", "hf_llama"]


def _flow(request, name):
    return request.getfixturevalue(name)


def _non_delegate_instructions(plan) -> list[str]:
    return [type(i.instr_args).__name__ for chain in plan.chains for i in chain.instructions
            if type(i.instr_args).__name__ != "DelegateCall"]


@pytest.mark.parametrize("flow", FLOWS)
def test_no_cache_copy_outside_the_delegate(flow, request):
    _eager, program, report = _flow(request, flow)
    plan = program.executorch_program.execution_plan[0]
    assert [op.name for op in plan.operators] == []
    assert _non_delegate_instructions(plan) == []
    assert [d.id for d in plan.delegates] == ["TensorRTBackend"]
    # The delegate call passes the user arguments only: tokens, positions -> logits.
    calls = [i.instr_args for c in plan.chains for i in c.instructions]
    assert len(calls) == 1 and len(calls[0].args) == 3
    assert report.state and all(v.startswith("owned by TensorRT") for v in report.state.values())
    assert "state layers.0.k_cache: owned by TensorRT" in report.to_table() or flow != "decoder"


@pytest.mark.parametrize("flow", FLOWS)
def test_blob_states_are_in_place_tensor_scatter(flow, request):
    _eager, program, _ = _flow(request, flow)
    blob = read_blob(program.executorch_program.backend_delegate_data[0].data)
    caches = [e for e in blob.state if "cache" in e["fqn"]]
    assert len(caches) == 4
    assert all(e["update"] == "in_place" and e["positions"]["axis"] == 2 for e in caches)
    assert [b["is_input"] for b in blob.io_bindings] == [True, True, False]
    import onnx
    ops = [n.op_type for n in onnx.load_model_from_string(blob.onnx).graph.node]
    assert ops.count("TensorScatter") == 4 and "ScatterND" not in ops


def test_tensorrt_builds_kv_cache_update_layers(decoder):
    """TensorRT-RTX's parser turns the TensorScatter into KV_CACHE_UPDATE layers
    in the network the engine is built from (at load: no GPU here, engine "none";
    the weights, in named data, only need an address of the right size here)."""
    import numpy as np

    from executorch_tensorrt.tensorrt.engine_builder import parse_network
    from executorch_tensorrt.tensorrt.flavor import load_tensorrt

    blob = read_blob(decoder[1].executorch_program.backend_delegate_data[0].data)
    assert blob.engine_kind == "none" and blob.weights
    zeros = {w["name"]: np.zeros(w["nbytes"], np.uint8) for w in blob.weights}
    weights = [(name, z.ctypes.data, z.nbytes) for name, z in zeros.items()]
    _builder, network, _parser, _logger = parse_network(load_tensorrt(), blob.onnx, weights)
    kinds = [str(network.get_layer(i).type) for i in range(network.num_layers)]
    assert sum("KV_CACHE_UPDATE" in k for k in kinds) == 4


def test_the_llama_decode_step_is_rewritten_and_tensorrt_builds_it(hf_llama, tmp_path):
    """decoder_fusions.py on transformers' Llama (2 layers): each masked safe
    softmax in 4 nodes, SiLU as Swish, the value caches read by broadcasting
    (no Expand on that side), no Identity between nodes; 117 ONNX nodes before
    these rules. TensorRT-RTX builds the embedded ONNX with the blob's own
    profiles and the real weights, as the first load on a GPU does."""
    import collections

    import onnx

    from executorch_tensorrt.deploy.prepare import program_named_data
    from executorch_tensorrt.program.info import read_pte
    from executorch_tensorrt.runtime.named_data import blob_weights
    from executorch_tensorrt.runtime.tensorrt.portability import rebuild_for
    from executorch_tensorrt.tensorrt.flavor import load_tensorrt

    program = hf_llama[1]
    blob = read_blob(program.executorch_program.backend_delegate_data[0].data)
    ops = collections.Counter(n.op_type for n in onnx.load_model_from_string(blob.onnx).graph.node)
    assert (ops["Swish"], ops["Sigmoid"], ops["Not"], ops["Cast"]) == (2, 0, 0, 3), ops
    assert (ops["ReduceMax"], ops["Expand"], ops["Identity"]) == (2, 2, 1), ops
    assert sum(ops.values()) == 97, ops
    path = tmp_path / "llama.pte"
    path.write_bytes(program.buffer)
    weights = blob_weights(blob, program_named_data(read_pte(path), None))
    assert rebuild_for(blob, load_tensorrt(), "SM89", weights).build()


@pytest.mark.parametrize("flow", FLOWS)
def test_greedy_decode_matches_eager(flow, request, allow_fallback):
    from executorch.runtime import Runtime

    eager, program, _ = _flow(request, flow)
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    got = greedy_decode(method, PROMPT, NEW_TOKENS)
    want = greedy_decode(eager, PROMPT, NEW_TOKENS)
    assert got.tokens == want.tokens
    for a, b in zip(got.logits, want.logits):
        assert float((a - b).abs().max() / b.abs().max()) < 1e-4


def test_cache_is_not_copied_and_reset_restores_it(decoder, allow_fallback):
    from executorch.runtime import Runtime

    import executorch_tensorrt
    from executorch_tensorrt.runtime import state as rt_state

    eager, program, _ = decoder
    from executorch_tensorrt.runtime import callbacks

    before = rt_state.live_states("forward")
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    st = new_state(before)
    [executor] = [e for e in callbacks.install().handles.values()
                  if getattr(e, "state", None) is st]
    addresses = [b.ctypes.data for b in st.buffers]
    first = greedy_decode(method, PROMPT, 4)
    assert [b.ctypes.data for b in st.buffers] == addresses  # updated where it lies
    # A decode token copies nothing: no byte of the 24 KiB cache, and not the logits
    # ([1, 1, V]), which the first single-token call bound to ExecuTorch's output.
    before = executor.copied_bytes
    method.execute([torch.tensor([[first.tokens[-1]]]), torch.tensor([len(PROMPT) + 4])])
    assert executor.copied_bytes - before == 0
    assert sum(b.nbytes for b in st.buffers) == 4 * (1 * 4 * 48 * 8) * 4  # 24 KiB, not copied
    assert float(abs(st.value("layers.0.k_cache")[0, :, :len(PROMPT) + 3]).sum()) > 0
    assert executorch_tensorrt.reset_state("forward") >= 1
    assert float(abs(st.value("layers.0.k_cache")).sum()) == 0
    assert greedy_decode(method, PROMPT, 4).tokens == first.tokens


def test_bad_positions_are_refused_naming_the_limit(decoder, allow_fallback):
    from executorch.runtime import Runtime

    import executorch_tensorrt

    _eager, program, _ = decoder
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    cases = [
        (torch.tensor([[1, 2]]), torch.tensor([47, 48]), "cache position 48"),
        (torch.tensor([[1, 2]]), torch.tensor([-1, 0]), "cache position -1"),
        (torch.tensor([[1, 2]]), torch.tensor([3, 5]), "contiguous"),
    ]
    for tokens, positions, expected in cases:
        with pytest.raises(RuntimeError):
            method.execute([tokens, positions])
        cause = executorch_tensorrt.last_error()
        assert expected in cause, cause
        if "cache position" in expected:
            assert "valid positions are 0..47" in cause
    # A dtype mismatch never reaches the delegate: ExecuTorch checks the input's type.
    with pytest.raises(RuntimeError) as e:
        method.execute([torch.tensor([[1, 2]]), torch.tensor([3, 4], dtype=torch.int32)])
    print(e.value)
    # The cache was never written by the refused calls: the first real call still works.
    assert method.execute([torch.tensor([[1, 2]]), torch.tensor([0, 1])])[0].shape == (1, 2, 96)


def test_buffer_read_outside_tensorrt_stays_with_executorch(allow_fallback):
    """A cache whose reader TensorRT does not take is left to ExecuTorch (copied
    back each call), and the report says so."""
    class Toy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
            self.register_buffer("k", torch.zeros(1, 6, 8))

        def forward(self, x, pos):
            old = self.k.sum(1)  # the old value, read where TensorRT does not run
            self.k.index_copy_(1, pos, self.lin(x))
            return self.lin(old)

    model = Toy().eval().requires_grad_(False)
    ep = torch.export.export(model, (torch.randn(1, 2, 8), torch.arange(2)))
    program, report = _lower(ep, exclude_ops=["aten.sum.dim_IntList"])
    assert "stays with ExecuTorch" in report.state["k"]
    ops = [o.name for o in program.executorch_program.execution_plan[0].operators]
    assert "aten::copy_" in ops


def test_nonzero_initial_state_comes_from_the_blob(allow_fallback):
    """A buffer that does not start at zero: its initial value travels in a blob
    section ("section:state_init.0"), the executor starts from it, and reset
    returns to it. (A rank-3 cache: the functional, ping-pong form.)"""
    from executorch.runtime import Runtime

    import executorch_tensorrt

    class Toy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
            self.register_buffer("k", torch.arange(48.0).reshape(1, 6, 8) / 48)

        def forward(self, x, pos):
            self.k.index_copy_(1, pos, self.lin(x))
            return self.k.sum(1)

    torch.manual_seed(0)
    model = Toy().eval().requires_grad_(False)
    eager = copy.deepcopy(model)
    program, _ = _lower(torch.export.export(model, (torch.randn(1, 2, 8), torch.arange(2))))
    blob = read_blob(program.executorch_program.backend_delegate_data[0].data)
    [entry] = blob.state
    assert entry["init"] == "section:state_init.0" and entry["update"] == "functional"
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    for _ in range(2):
        for pos in ([0, 1], [3, 4], [5, 0]):
            x = torch.randn(1, 2, 8)
            torch.testing.assert_close(method.execute([x, torch.tensor(pos)])[0],
                                       eager(x, torch.tensor(pos)))
        executorch_tensorrt.reset_state("forward")
        eager.k.copy_(torch.arange(48.0).reshape(1, 6, 8) / 48)


@pytest.mark.parametrize("precision,tolerance", [("fp16", 5e-3), ("bf16", 3e-2)])
@pytest.mark.parametrize("flow", FLOWS)
def test_reduced_precision_decode_keeps_eager_tokens(flow, precision, tolerance, request,
                                                      allow_fallback):
    """fp16/bf16 partitions with state, both flows: one DelegateCall per token,
    the caches owned by the delegate, eager's fp32 tokens. transformers'
    graph casts to fp32 where it recorded `x.dtype` (rotary tables); the
    re-export casts those operands where an op refuses mixed dtypes.
    Measured: logits within 4.7e-4 (fp16) and 3.7e-3 (bf16) of eager's
    largest, relative."""
    from executorch.runtime import Runtime

    eager, _, _ = _flow(request, flow)
    torch.manual_seed(0)
    if flow == "decoder":
        ep = lm.export_cached_decoder(lm.CachedDecoder().eval().requires_grad_(False))
    else:
        ep = export_hf(lm.hf_tiny_llama().requires_grad_(False))
    program, report = _lower(ep, precision=precision)
    plan = program.executorch_program.execution_plan[0]
    assert _non_delegate_instructions(plan) == [] and not plan.operators
    [blob] = tensorrt_blobs(program.buffer)
    assert read_blob(blob).metadata["precision"] == precision and read_blob(blob).metadata["state"]
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    got = greedy_decode(method, PROMPT, NEW_TOKENS)
    want = greedy_decode(eager, PROMPT, NEW_TOKENS)
    assert got.tokens == want.tokens
    worst = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(got.logits, want.logits))
    assert worst < tolerance, worst


def test_a_batch_of_two_prompts_decodes_each_row_as_eager(allow_fallback):
    """transformers' static cache with 2 rows: the cache writes stay in place
    (TensorScatter takes one write index per row, all at the shared position),
    and each row's greedy tokens and logits are eager's."""
    from executorch.runtime import Runtime

    wrapper = lm.hf_tiny_llama(batch_size=2).requires_grad_(False)
    eager = copy.deepcopy(wrapper)
    program, _ = _lower(export_hf(wrapper, batch_size=2))
    assert _non_delegate_instructions(program.executorch_program.execution_plan[0]) == []
    [blob] = tensorrt_blobs(program.buffer)
    caches = [s for s in read_blob(blob).metadata["state"] if s["dtype"] == "float32"]
    assert caches and all(s["shape"][0] == 2 and s["update"] == "in_place" for s in caches)
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    prompt = torch.tensor([PROMPT, [p + 40 for p in PROMPT]])
    got = method.execute([prompt, torch.arange(len(PROMPT))])[0]
    want = eager.model(input_ids=prompt, cache_position=torch.arange(len(PROMPT)))
    assert not torch.allclose(want[0, -1], want[1, -1])  # the rows are different prompts
    for step in range(12):
        assert float((got[:, -1] - want[:, -1]).abs().max() / want[:, -1].abs().max()) < 1e-4
        tokens = want[:, -1].argmax(-1)
        assert torch.equal(got[:, -1].argmax(-1), tokens), step
        position = torch.tensor([len(PROMPT) + step])
        got = method.execute([tokens[:, None], position])[0]
        want = eager.model(input_ids=tokens[:, None], cache_position=position)
