"""Mixture-of-experts decoders with transformers' default experts code
(grouped_mm, an opaque custom op on the CPU) export through llm.export fully
on TensorRT and decode with eager's greedy tokens, through greedy_decode and
ExecuTorch's TextLLMRunner; routing with tied router scores stays exact.
TensorRT partitions run through the onnxruntime fallback (no GPU here)."""
from __future__ import annotations

import pytest
import torch

from executorch_tensorrt import llm
from executorch_tensorrt.llm.greedy_decode import greedy_decode
from runner_helpers import _COMMON, EOS, encode, runner_tokens, write_char_tokenizer

MAX_SEQ, MAX_CONTEXT, NEW = 4, 32, 8
PROMPT = "MoE,hi!"
_SMALL = {**_COMMON, "num_hidden_layers": 1}
MOE_CONFIGS = {
    "qwen3_moe": {"model_type": "qwen3_moe", **_SMALL, "head_dim": 8, "num_experts": 4,
                  "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                  "decoder_sparse_step": 1, "mlp_only_layers": []},
    "mixtral": {"model_type": "mixtral", **_SMALL, "num_local_experts": 4,
                "num_experts_per_tok": 2, "sliding_window": None},
}


def _tie_router_rows(model) -> None:
    """Router rows of experts 0 and 1 equal, and of 2 and 3: every token's
    top-2 is a tied pair (never a tie across the top-k boundary)."""
    for layer in model.model.layers:
        gate = layer.mlp.gate.weight.data
        gate[1], gate[3] = gate[0], gate[2]


@pytest.fixture(scope="module", params=sorted(MOE_CONFIGS))
def moe(request, tmp_path_factory):
    """(pte, eager model, export result); qwen3_moe's router has tied rows."""
    model = llm.causal_lm(MOE_CONFIGS[request.param])
    assert model.get_experts_implementation()[""] in (None, "grouped_mm")  # the default code
    if request.param == "qwen3_moe":
        _tie_router_rows(model)
    out = tmp_path_factory.mktemp(request.param) / f"{request.param}.pte"
    result = llm.export(model, max_seq_len=MAX_SEQ, max_context_len=MAX_CONTEXT, output=out,
                        progress=None)
    assert model.get_experts_implementation()[""] in (None, "grouped_mm")  # switched back
    return request.param, result.path, model, result


def _method(pte):
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(str(pte))
    return program, program.load_method("forward")


def test_moe_fully_on_tensorrt(moe):
    _, _, _, result = moe
    report = result.export.report
    assert result.export.backends["forward"] == ["TensorRTBackend"]
    assert not report.rejected, report.main_reasons()
    assert report.ops_of  # TensorRT took every node of a real graph


def test_moe_greedy_tokens_equal_eager(moe, allow_fallback):
    _, pte, model, result = moe
    program, method = _method(pte)
    got = greedy_decode(method, encode(PROMPT), NEW, limits=result.metadata)
    want = greedy_decode(llm.eager_decoder(model, MAX_CONTEXT), encode(PROMPT), NEW,
                         limits=result.metadata)
    assert got.tokens == want.tokens
    assert len(set(want.tokens)) > 1  # a real sequence, not one repeated token
    for a, b in zip(got.logits, want.logits):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_moe_routing_ties_exact(moe, allow_fallback):
    """Tied router scores (qwen3_moe's tied rows): eager's top-2 really ties,
    and the program's logits equal eager's at every step."""
    name, pte, model, result = moe
    if name != "qwen3_moe":
        return  # the tied router is qwen3_moe's
    probs = []
    hook = model.model.layers[0].mlp.gate.register_forward_hook(
        lambda _m, _i, out: probs.append(out[0].detach()))
    want = greedy_decode(llm.eager_decoder(model, MAX_CONTEXT), encode(PROMPT), NEW,
                         limits=result.metadata)
    hook.remove()
    top = torch.cat(probs).topk(2, dim=-1).values
    assert torch.equal(top[:, 0], top[:, 1])  # every token's two experts tie
    _, method = _method(pte)
    got = greedy_decode(method, encode(PROMPT), NEW, limits=result.metadata)
    assert got.tokens == want.tokens
    for a, b in zip(got.logits, want.logits):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_moe_text_llm_runner(moe, tmp_path, allow_fallback):
    from executorch.extension.llm.runner import TextLLMRunner

    name, pte, model, result = moe
    if name != "mixtral":
        return  # one family through the runner keeps the suite short
    runner = TextLLMRunner(str(pte), str(write_char_tokenizer(tmp_path)), None)
    got = runner_tokens(runner, PROMPT, NEW)
    want = greedy_decode(llm.eager_decoder(model, MAX_CONTEXT), encode(PROMPT), NEW,
                         limits=result.metadata).tokens
    want = want[:want.index(EOS) + 1] if EOS in want else want
    assert got and got == want[:len(got)] and len(got) >= min(len(want), NEW - 1)
