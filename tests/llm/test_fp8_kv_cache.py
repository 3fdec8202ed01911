"""An fp8 (e4m3) KV cache (`llm-export --kv-cache-dtype fp8`, aot/state/fp8_cache.py):
half of float16's KV bytes per token in the program's memory report, every
node on TensorRT, the engine built for SM89 by TensorRT-RTX's builder (the
activation figure it recorded), and ExecuTorch's TextLLMRunner generating
the tokens of eager with each key and value rounded to fp8 as it is written
(a float32 model: the program's logits are eager's with the rounded cache,
not without it); the onnxruntime fallback holds the cache in fp8 buffers. Targets below SM89
and other combinations that cannot work are refused before anything is
exported."""
from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import onnx
import pytest

from executorch_tensorrt import llm
from executorch_tensorrt.aot.partition.report import read_report
from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.errors import ExportError
from executorch_tensorrt.llm.greedy_decode import greedy_decode
from executorch_tensorrt.llm.metadata import LLMMetadata
from executorch_tensorrt.program.memory_report import memory_report_of
from runner_helpers import CONFIGS, EOS, encode, runner_tokens, write_char_tokenizer
from tests.helpers import cli_main, new_state, tensorrt_blobs

MAX_SEQ, MAX_CONTEXT, NEW = 4, 48, 12
PROMPT = "Hello,TensorRT!"


@pytest.fixture(scope="module")
def fp8_llama(tmp_path_factory):
    """Through the command line, float32 weights (the fallback computes as
    eager does), the cache in fp8, for SM89."""
    out = tmp_path_factory.mktemp("fp8") / "llama-fp8.pte"
    code, stdout, stderr = cli_main(
        "llm-export", out, "--config", json.dumps(CONFIGS["llama"]), "--max-seq-len", MAX_SEQ,
        "--max-context-len", MAX_CONTEXT, "--kv-cache-dtype", "fp8",
        "--compute-capability", "SM89")
    assert code == 0, stderr[-3000:]
    assert "KV cache float8_e4m3fn (scale 1.0)" in stderr
    return out


@pytest.fixture(scope="module")
def fp16_llama(tmp_path_factory):
    """The same model with its float16 cache (the report only: no run check)."""
    out = tmp_path_factory.mktemp("fp16") / "llama-fp16.pte"
    llm.export(CONFIGS["llama"], max_seq_len=MAX_SEQ, max_context_len=MAX_CONTEXT,
               dtype="float16", output=out, progress=None, run_check=False,
               record_memory=False)
    return out


def test_fp8_cache_is_half_of_float16s_bytes_per_token_all_on_tensorrt(fp8_llama, fp16_llama):
    fp8, fp16 = memory_report_of(fp8_llama), memory_report_of(fp16_llama)
    assert fp8.kv.caches and {c.dtype for c in fp8.kv.caches} == {"float8"}
    assert {c.dtype for c in fp16.kv.caches} == {"float16"}
    assert fp8.kv.bytes_per_token * 2 == fp16.kv.bytes_per_token  # 0.5
    assert fp8.kv.total_bytes * 2 == fp16.kv.total_bytes
    # TensorRT-RTX's builder built the fp8 graph for SM89 (its activation figure).
    assert fp8.activation_bytes > 0 and not fp8.unmeasured
    forward = read_report(fp8_llama)["methods"]["forward"]
    assert forward["nodes"] == forward["nodes_on_tensorrt"] > 0
    assert all(row["elsewhere"] == 0 for row in forward["ops"])
    (blob,) = tensorrt_blobs(fp8_llama)
    parsed = read_blob(blob)
    caches = [s for s in parsed.metadata["state"] if s["dtype"] == "float8"]
    assert len(caches) == 4 and {s["update"] for s in caches} == {"rewrite_in_place"}
    assert parsed.metadata["compute_capabilities"] == ["SM89"]
    model = onnx.load_model_from_string(parsed.onnx)
    ops = [n.op_type for n in model.graph.node]
    # The one form TensorRT-RTX builds: dequantize, ScatterElements, quantize.
    assert "TensorScatter" not in ops and ops.count("ScatterElements") == 4
    fp8_type = onnx.TensorProto.FLOAT8E4M3FN
    assert sum(v.type.tensor_type.elem_type == fp8_type for v in model.graph.input) == 4
    assert sum(v.type.tensor_type.elem_type == fp8_type for v in model.graph.output) == 4


def test_runner_tokens_equal_eager_with_the_cache_rounded_to_fp8(fp8_llama, tmp_path,
                                                                  allow_fallback):
    from executorch.extension.llm.runner import TextLLMRunner
    from executorch.runtime import Runtime
    from executorch_tensorrt.runtime.state import live_states

    model = llm.causal_lm(CONFIGS["llama"])
    limits = LLMMetadata.for_config(model.config, MAX_SEQ, MAX_CONTEXT, None, None)
    rounded = greedy_decode(llm.eager_decoder(model, MAX_CONTEXT, kv_cache_dtype="fp8"),
                            encode(PROMPT), NEW, limits=limits)
    # The program's logits over the whole decode are eager's with the rounded
    # cache (float32 both), and further from eager's float32 cache.
    method = Runtime.get().load_program(str(fp8_llama)).load_method("forward")
    program = greedy_decode(method, encode(PROMPT), NEW, limits=limits)
    unrounded = greedy_decode(llm.eager_decoder(model, MAX_CONTEXT), encode(PROMPT), NEW,
                              limits=limits)
    assert program.tokens == rounded.tokens
    assert _largest_difference(program, rounded) < 1e-5
    assert _largest_difference(program, unrounded) > 1e-4
    before = live_states()
    runner = TextLLMRunner(str(fp8_llama), str(write_char_tokenizer(tmp_path)), None)
    got = runner_tokens(runner, PROMPT, NEW)
    want = rounded.tokens[:rounded.tokens.index(EOS) + 1] if EOS in rounded.tokens \
        else rounded.tokens
    assert got == want[:len(got)] and len(got) >= min(len(want), NEW - 1)
    assert len(set(got)) > 1
    # The fallback reads and writes the cache in fp8 buffers: the prompt and
    # the generated tokens' positions hold values, the rest zeros.
    state = new_state(before, None)
    assert any(p.fqn == "key_cache_0" for p in state.specs)
    key = state.value("key_cache_0")
    assert key.dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    written = len(PROMPT) + len(got) - 1  # the last token is sampled, never fed
    filled = np.abs(key.astype(np.float32)).sum(axis=(0, 1, 3)) > 0
    assert filled[:written].all() and not filled[written + 1:].any()


def _largest_difference(a, b) -> float:
    return max(float((x.float() - y.float()).abs().max()) for x, y in zip(a.logits, b.logits))


def test_fp8_cache_refusals_name_the_cause(tmp_path):
    config = CONFIGS["llama"]
    common = dict(max_seq_len=MAX_SEQ, max_context_len=MAX_CONTEXT, output=tmp_path / "x.pte",
                  progress=None)
    # TensorRT-RTX's default targets reach SM75: FP8 needs SM89.
    with pytest.raises(ExportError, match=r"SM89 or newer .* SM75, SM80, SM86"):
        llm.export(config, kv_cache_dtype="float8_e4m3fn", **common)
    with pytest.raises(ExportError, match="targets SM86"):
        llm.export(config, kv_cache_dtype="fp8", compute_capabilities=("SM86", "SM89"),
                   **common)
    with pytest.raises(ExportError, match="precision='fp16'"):
        llm.export(config, kv_cache_dtype="fp8", compute_capabilities=("SM89",),
                   precision="fp16", **common)
    with pytest.raises(ValueError, match="kv_cache_dtype='int8' is not supported"):
        llm.export(config, kv_cache_dtype="int8", **common)
    from executorch_tensorrt.llm.multimodal import export_multimodal

    with pytest.raises(ValueError, match=r"llm.export \(text generation\) only"):
        export_multimodal({}, kv_cache_dtype="fp8", **common)
    assert not list(tmp_path.iterdir())  # nothing written
    code, _, stderr = cli_main(
        "llm-export", tmp_path / "y.pte", "--config", json.dumps(config), "--max-seq-len",
        MAX_SEQ, "--max-context-len", MAX_CONTEXT, "--kv-cache-dtype", "fp8",
        "--compute-capability", "SM86")
    assert code != 0 and "an fp8 KV cache needs compute capability SM89" in stderr


def test_memory_budget_counts_one_byte_per_cached_element():
    import torch

    from executorch_tensorrt.llm.memory_budget import MemoryBudgetError, plan_memory

    model = llm.causal_lm(CONFIGS["llama"])
    common = dict(max_seq_len=MAX_SEQ, max_context_len=None, batch_size=1,
                  dtype=torch.float32, quantize=None)
    fp32 = plan_memory(model, model.config, "8.5MiB", **common)
    fp8 = plan_memory(model, model.config, "8.5MiB", kv_cache_dtype="float8_e4m3fn", **common)
    assert fp8.kv_per_position * 4 == fp32.kv_per_position
    assert fp8.max_context_len >= fp32.max_context_len
    with pytest.raises(MemoryBudgetError, match="kv_cache_dtype='float8_e4m3fn'"):
        plan_memory(model, model.config, "64KiB", **common)
