"""ExecuTorch's own LLM runner (`TextLLMRunner` of the executorch wheel) runs
programs written by `executorch_tensorrt.llm.export`: greedy tokens equal
eager greedy on the same prompt, `reset()` between prompts equals a fresh
runner, with the weights inside the .pte (Llama, in-process export) and in a
.ptd (Qwen2, through the `llm-export` command). TensorRT partitions run
through the onnxruntime fallback (no GPU here)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from executorch_tensorrt import llm
from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.llm.greedy_decode import greedy_decode
from executorch_tensorrt.quantization.formats.int4 import Int4Embedding
from runner_helpers import (CONFIGS, EOS, TINY_MAX_CONTEXT, TINY_MAX_SEQ, VOCAB, encode,
                            runner_tokens, write_char_tokenizer)
from tests.helpers import cli_main, tensorrt_blobs

MAX_SEQ, MAX_CONTEXT, NEW = TINY_MAX_SEQ, TINY_MAX_CONTEXT, 12
PROMPT = "Hello,TensorRT!"      # 15 tokens: the runner prefills it in chunks of 4
OTHER = "abc"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return write_char_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="module")
def llama(tiny_llama_pte):
    return tiny_llama_pte, None, llm.causal_lm(CONFIGS["llama"])


@pytest.fixture(scope="module")
def qwen2_ptd(tmp_path_factory):
    """Through the command line, float16, weights in a .ptd."""
    out = tmp_path_factory.mktemp("qwen2") / "qwen2.pte"
    code, stdout, stderr = cli_main(
        "llm-export", out, "--config", json.dumps(CONFIGS["qwen2"]), "--max-seq-len", MAX_SEQ,
        "--max-context-len", MAX_CONTEXT, "--external-weights", "--dtype", "float16")
    assert code == 0, stderr[-3000:]
    assert "partition report" in stderr and "get_max_seq_len=4" in stderr
    ptd = out.with_suffix(".ptd")
    assert f"wrote {out} + {ptd}" in stdout
    # The memory report ends the export: its KV cache is the float16 cache's bytes.
    assert "memory (GPU" in stdout and "KV cache: " in stdout and "activation" in stdout
    return out, ptd, llm.causal_lm(CONFIGS["qwen2"], dtype=torch.float16)


@pytest.fixture(params=["llama", "qwen2_ptd"])
def program(request):
    return request.getfixturevalue(request.param)


def _runner(pte, ptd, tokenizer):
    from executorch.extension.llm.runner import TextLLMRunner

    return TextLLMRunner(str(pte), str(tokenizer), str(ptd) if ptd else None)


def _eager(model, text: str) -> list[int]:
    return greedy_decode(llm.eager_decoder(model, MAX_CONTEXT), encode(text), NEW).tokens


def _until_eos(tokens: list[int]) -> list[int]:
    return tokens[:tokens.index(EOS) + 1] if EOS in tokens else tokens


def test_runner_generates_eager_greedy_tokens(program, tokenizer, allow_fallback):
    pte, ptd, model = program
    got = runner_tokens(_runner(pte, ptd, tokenizer), PROMPT, NEW)
    want = _until_eos(_eager(model, PROMPT))
    assert got == want[:len(got)] and len(got) >= min(len(want), NEW - 1)
    assert len(set(got)) > 1  # a real sequence, not one repeated token


# Wide enough that weights, not the graph (~40 kB of ONNX and program), are the
# artifact: 1.23M parameters, 4.9 MB of fp32 weights.
WIDE = {**CONFIGS["llama"], "hidden_size": 256, "intermediate_size": 512}


@pytest.fixture(scope="module")
def llama_int4(tmp_path_factory):
    """WIDE, int4 weight-only, weights in a .ptd."""
    out = tmp_path_factory.mktemp("llama-int4") / "llama-int4.pte"
    result = llm.export(WIDE, max_seq_len=MAX_SEQ, max_context_len=MAX_CONTEXT,
                        quantize="int4_weight_only", external_weights=True, output=out,
                        progress=None)
    return result.path, result.data_paths[0]


def test_int4_weight_only_decoder_runs_in_the_runner_as_the_eager_quantized_model(
        llama_int4, tokenizer, allow_fallback):
    """quantize="int4_weight_only": every Linear (the head too) and the token
    embedding stored int4; the runner's greedy tokens are the eager quantized
    model's (llm.quantized, the same weights), and the .pte + .ptd are at most
    0.2x the fp32 weights alone (so below 0.2x an fp32 export)."""
    pte, ptd = llama_int4
    fp32 = llm.causal_lm(WIDE)
    reference = llm.quantized(fp32, "int4_weight_only")
    assert isinstance(reference.model.embed_tokens, Int4Embedding)
    got = runner_tokens(_runner(pte, ptd, tokenizer), PROMPT, NEW)
    want = _until_eos(_eager(reference, PROMPT))
    assert got == want[:len(got)] and len(got) >= min(len(want), NEW - 1)
    fp32_weight_bytes = 4 * sum(p.numel() for p in fp32.parameters())
    size = pte.stat().st_size + ptd.stat().st_size
    assert size <= 0.2 * fp32_weight_bytes, (size, fp32_weight_bytes)
    (blob,) = tensorrt_blobs(pte)
    stored = read_blob(blob).metadata["weights"]
    table = [w for w in stored if "embed_tokens" in w["name"]]
    assert [(w["dtype"], w["nbytes"]) for w in table] == [("int4", VOCAB * 256 // 2)]


def test_a_token_outside_the_vocabulary_is_refused_by_the_quantized_table(llama_int4,
                                                                           allow_fallback):
    """The per-call index check still finds the Gather over the dequantized table."""
    import executorch_tensorrt
    from executorch.runtime import Runtime

    pte, ptd = llama_int4
    method = Runtime.get().load_program(pte, data_path=ptd).load_method("forward")
    with pytest.raises(RuntimeError):
        method.execute([torch.tensor([[VOCAB]]), torch.tensor([0])])
    assert f"outside its valid range [0, {VOCAB})" in executorch_tensorrt.last_error()
    assert method.execute([torch.tensor([[5]]), torch.tensor([0])])[0].shape == (1, 1, VOCAB)


def test_a_ptd_of_another_export_is_refused_naming_the_missing_weight(
        qwen2_ptd, llama_int4, tokenizer, allow_fallback):
    import executorch_tensorrt

    pte, _, _ = qwen2_ptd
    with pytest.raises(RuntimeError) as e:
        runner = _runner(pte, llama_int4[1], tokenizer)
        runner_tokens(runner, PROMPT, NEW)
    cause = executorch_tensorrt.last_error()
    assert "belongs to another program" in cause, (str(e.value), cause)


def test_reset_between_prompts_equals_a_fresh_runner(program, tokenizer, allow_fallback):
    pte, ptd, model = program
    runner = _runner(pte, ptd, tokenizer)
    runner_tokens(runner, PROMPT, NEW)
    runner.reset()
    after_reset = runner_tokens(runner, OTHER, NEW)
    fresh = runner_tokens(_runner(pte, ptd, tokenizer), OTHER, NEW)
    assert after_reset == fresh
    assert fresh == _until_eos(_eager(model, OTHER))[:len(fresh)]


def test_constant_methods_are_what_the_runner_reads(llama, allow_fallback):
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(llama[0])
    value = lambda name: program.load_method(name).execute([])  # noqa: E731
    got = {name: value(name) for name in ("get_max_seq_len", "get_max_context_len",
                                          "get_vocab_size", "use_kv_cache",
                                          "enable_dynamic_shape", "get_bos_id",
                                          "get_eos_ids")}
    cfg = CONFIGS["llama"]
    assert got == {"get_max_seq_len": [MAX_SEQ], "get_max_context_len": [MAX_CONTEXT],
                   "get_vocab_size": [cfg["vocab_size"]], "use_kv_cache": [True],
                   "enable_dynamic_shape": [True], "get_bos_id": [cfg["bos_token_id"]],
                   "get_eos_ids": [cfg["eos_token_id"]]}


@pytest.mark.parametrize("kwargs, words", [
    ({"dtype": "float8"}, "dtype='float8' is not supported; use one of float32, float16, "
                          "bfloat16"),
    ({"quantize": "int2_weight_only"},
     "supported: None (no quantization), 'int8_weight_only', 'int4_weight_only'"),
    ({"max_context_len": 65}, "max_context_len=65 is beyond the model's 64 positions"),
    ({"max_seq_len": 64, "max_context_len": 48}, "need 1 <= max_seq_len <= max_context_len"),
    ({"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
])
def test_bad_arguments_name_the_limit(kwargs, words, tmp_path):
    args = {"max_seq_len": MAX_SEQ, "max_context_len": MAX_CONTEXT, **kwargs}
    with pytest.raises(ValueError) as e:
        llm.export(CONFIGS["llama"], output=tmp_path / "x.pte", progress=None, **args)
    assert words in str(e.value)
    assert not (tmp_path / "x.pte").exists()


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "executorch_tensorrt.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_inspect_reports_cache_bytes_half_in_float16(llama, qwen2_ptd):
    """Same cache shapes (2 layers, 2 KV heads of 8, 48 positions): float32
    4 bytes an element, float16 2, read back from each program's blobs."""
    import re

    totals = {}
    for name, (pte, ptd, _) in {"float32": llama, "float16": qwen2_ptd}.items():
        done = _cli("inspect", pte, *(["--data", ptd] if ptd else []))
        assert done.returncode == 0, done.stderr[-2000:]
        caches = re.findall(r"key_cache_\d+: (\w+) \[1, 2, 48, 8\]", done.stdout)
        assert caches == [name, name], done.stdout
        per_token, total = re.search(r"total: (\d+) bytes/token, (\d+) bytes at 48 positions",
                                     done.stdout).groups()
        totals[name] = (int(per_token), int(total))
    assert totals["float32"] == (256, 256 * 48)
    assert totals["float16"][0] / totals["float32"][0] == 0.5


def _method_and_limits(pte):
    from executorch.runtime import Runtime

    from executorch_tensorrt.llm.metadata import read_metadata

    program = Runtime.get().load_program(pte)
    return program.load_method("forward"), read_metadata(program)


def test_greedy_decode_chunks_a_prompt_of_four_times_the_bound(llama, allow_fallback):
    method, limits = _method_and_limits(llama[0])
    prompt = encode("Four-times-bnd!!")  # 16 tokens, max_seq_len 4
    assert len(prompt) == 4 * limits.max_seq_len
    with pytest.raises(RuntimeError):  # one call of 16 tokens: beyond the export's Dim
        greedy_decode(method, prompt, 2)
    method, limits = _method_and_limits(llama[0])  # a fresh cache
    got = greedy_decode(method, prompt, NEW, limits=limits)
    want = greedy_decode(llm.eager_decoder(llama[2], MAX_CONTEXT), prompt, NEW)
    assert got.tokens == want.tokens


@pytest.mark.parametrize("prompt, n, words", [
    (list(range(40)), 10, "needs 49 cache positions; the program's max_context_len is 48"),
    ([1, 2, 96], 2, "token id 96 is outside the vocabulary: ids are 0..95"),
    ([1, -1], 2, "token id -1 is outside the vocabulary"),
])
def test_greedy_decode_refuses_what_the_program_cannot_hold(llama, allow_fallback, prompt, n,
                                                            words):
    method, limits = _method_and_limits(llama[0])
    with pytest.raises(ValueError) as e:
        greedy_decode(method, prompt, n, limits=limits)
    assert words in str(e.value)
    # nothing ran: the cache is as it was, the next prompt decodes as on a fresh load
    assert (greedy_decode(method, encode(OTHER), 4, limits=limits).tokens
            == greedy_decode(llm.eager_decoder(llama[2], MAX_CONTEXT), encode(OTHER), 4).tokens)


@pytest.mark.parametrize("args, words", [
    ([], "give either --config"),
    (["--config", '{"hidden_size": 8}'], "a JSON object with a 'model_type'"),
    (["--config", "/nonexistent/config.json"], "no such file"),
    (["--model", "/nonexistent"], "not a folder"),
])
def test_llm_export_command_usage_errors(args, words, tmp_path):
    done = _cli("llm-export", tmp_path / "x.pte", "--max-seq-len", 4, "--max-context-len", 8,
                *args)
    assert done.returncode == 2 and words in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "x.pte").exists()


@pytest.fixture(scope="module")
def llama_batch2(tmp_path_factory):
    """A static batch of 2 rows, through `llm-export --batch-size 2`."""
    out = tmp_path_factory.mktemp("llama-b2") / "llama-b2.pte"
    code, _, stderr = cli_main(
        "llm-export", out, "--config", json.dumps(CONFIGS["llama"]), "--max-seq-len", MAX_SEQ,
        "--max-context-len", MAX_CONTEXT, "--batch-size", 2)
    assert code == 0, stderr[-3000:]
    return out


def test_a_batch_of_two_decodes_each_row_as_eager(llama_batch2, allow_fallback):
    """Two prompts of one length in one [2, S] call: each row's greedy tokens
    equal eager's for that prompt alone (batch 1) and eager's batch of 2; a
    batch-1 prompt is refused by the export's shape, the cache left as it was."""
    model = llm.causal_lm(CONFIGS["llama"])
    prompts = [encode(PROMPT), encode("TensorRT,Hello!")]
    method, limits = _method_and_limits(llama_batch2)
    with pytest.raises(RuntimeError):
        greedy_decode(method, [prompts[0]], 2, limits=limits)
    got = greedy_decode(method, prompts, NEW, limits=limits)
    eager = greedy_decode(llm.eager_decoder(model, MAX_CONTEXT, batch_size=2), prompts, NEW)
    assert got.rows == eager.rows
    assert got.rows == [_eager(model, PROMPT), _eager(model, "TensorRT,Hello!")]
    assert got.rows[0] != got.rows[1] and got.tokens == got.rows[0]
    assert got.logits[0].shape == (2, CONFIGS["llama"]["vocab_size"])


@pytest.fixture(scope="module")
def llama_bf16(tmp_path_factory):
    out = tmp_path_factory.mktemp("llama_bf16") / "llama_bf16.pte"
    result = llm.export(CONFIGS["llama"], max_seq_len=MAX_SEQ, max_context_len=MAX_CONTEXT,
                        dtype="bfloat16", output=out, progress=None)
    return result.path, llm.causal_lm(CONFIGS["llama"], dtype=torch.bfloat16)


def test_a_bfloat16_program_runs_on_the_fallback_as_its_weights_in_fp32(llama_bf16,
                                                                       allow_fallback):
    """onnxruntime's CPU provider has no bf16 Mul: the fallback computes the bf16
    graph in fp32 (the bf16 weights upcast once, fp32 caches), so its tokens are
    eager's on the same bf16 weights computed in fp32, and its logits come back
    bf16 as the program says; eager bf16 (bf16 activations) agrees on the first."""
    pte, model = llama_bf16
    blobs = tensorrt_blobs(pte.read_bytes())
    assert "bfloat16" in {s.dtype for b in blobs for s in read_blob(b).meta.state or ()}
    method, limits = _method_and_limits(pte)
    prompt = encode(PROMPT)
    got = greedy_decode(method, prompt, NEW, limits=limits)
    as_fp32 = llm.causal_lm(CONFIGS["llama"], dtype=torch.bfloat16).float()
    fp32_compute = greedy_decode(llm.eager_decoder(as_fp32, MAX_CONTEXT), prompt, NEW)
    assert got.tokens == fp32_compute.tokens
    assert got.tokens[0] == greedy_decode(llm.eager_decoder(model, MAX_CONTEXT), prompt, 1).tokens[0]
    method, _ = _method_and_limits(pte)
    logits = method.execute([torch.tensor([prompt[:MAX_SEQ]]), torch.arange(MAX_SEQ)])[0]
    assert logits.dtype == torch.bfloat16 and logits.shape == (1, MAX_SEQ, VOCAB)


def test_a_bfloat16_program_with_its_weights_cast_where_used_decodes_the_same(
        llama_bf16, allow_fallback, monkeypatch):
    """What a partition whose fp32 weight copy would be over the fallback's
    limit gets (an 8B bf16 LLM: runtime/onnxruntime/upcast.py): each bf16
    weight read in place and cast where used. Same tokens as computing on the
    bf16 weights in fp32, and not one weight byte copied."""
    from executorch_tensorrt.runtime import callbacks
    from executorch_tensorrt.runtime.onnxruntime.where_used import UPCAST_ENV

    monkeypatch.setenv(UPCAST_ENV, "where-used")
    pte, _ = llama_bf16
    before = {id(e) for e in callbacks.install().live_executors()}
    method, limits = _method_and_limits(pte)
    prompt = encode(PROMPT)
    got = greedy_decode(method, prompt, NEW, limits=limits)
    [executor] = [e for e in callbacks.install().live_executors() if id(e) not in before]
    assert executor.weights.where_used and executor.weights.copied_bytes == 0
    as_fp32 = llm.causal_lm(CONFIGS["llama"], dtype=torch.bfloat16).float()
    fp32_compute = greedy_decode(llm.eager_decoder(as_fp32, MAX_CONTEXT), prompt, NEW)
    assert got.tokens == fp32_compute.tokens


def test_quantized_export_writes_the_quantization_section_of_the_report(llama_int4):
    """llm.export(quantize=...) writes what docs/quantization.md promises: each
    quantized layer, the head too, and how it runs, in model.report.json."""
    from executorch_tensorrt.aot.partition.report import read_report

    pte, _ = llama_int4
    section = read_report(pte)["methods"]["forward"]["quantization"]
    linears = [name for name, m in llm.causal_lm(WIDE).named_modules()
               if isinstance(m, torch.nn.Linear)]
    assert linears and set(linears) <= set(section), (linears, section)
    assert all(line.startswith("int4 weight-only") for line in section.values()), section
