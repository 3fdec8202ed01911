"""The run check of a float16/bfloat16 LLM export compares with eager
computing in float32 over the same weights (llm/reference.py), allowing eager's
own rounding in the dtype twice over: at depth, eager bf16 drifts further from
the model's exact function than bf16's tolerance, and comparing with it failed
the fallback, which computes in fp32 (an 8B-shaped decoder at 32 layers)."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from executorch_tensorrt import llm
from executorch_tensorrt.aot.checks.run_check import TOLERANCE, load_program
from executorch_tensorrt.llm.hf_export import hf_example_inputs
from executorch_tensorrt.llm import reference

TESTS = Path(__file__).resolve().parents[1]
MAX_SEQ, MAX_CONTEXT = 8, 32
# Deep and with large weights for its size: eager bf16's rounding reaches
# 0.035 of the largest logit here, beyond bf16's 0.02 (a 6-layer model with
# transformers' default initializer_range: 0.004).
DEEP = dict(model_type="llama", vocab_size=512, hidden_size=64, intermediate_size=128,
            num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=64, initializer_range=0.3)


def _bf16(config=DEEP):
    return llm.causal_lm(config, dtype=torch.bfloat16)


def test_the_reference_is_a_float32_copy_of_the_model_rounded_to_its_dtype():
    model = _bf16()
    before = {k: (v.dtype, v.clone()) for k, v in model.state_dict().items()}
    inputs = hf_example_inputs(MAX_SEQ)
    exact = reference.measure(model, MAX_CONTEXT, 1, inputs)
    fp32_copy = copy.deepcopy(model).float()
    with torch.no_grad():
        want = llm.eager_decoder(fp32_copy, MAX_CONTEXT)(*inputs)
        in_bf16 = llm.eager_decoder(model, MAX_CONTEXT)(*inputs)
    assert exact.outputs[0].dtype == torch.bfloat16
    assert torch.equal(exact.outputs[0], want.to(torch.bfloat16))
    assert exact.rounding == pytest.approx(float((in_bf16.float() - want).abs().max()))
    # The model is as it was: its dtypes, values and forward.
    after = model.state_dict()
    assert all(after[k].dtype == d and torch.equal(after[k], v) for k, (d, v) in before.items())
    assert not [n for n, m in model.named_modules() if "forward" in m.__dict__]


def test_a_deep_bfloat16_export_passes_its_run_check_where_eager_bfloat16_would_fail(
        tmp_path, allow_fallback):
    out = tmp_path / "deep_bf16.pte"
    result = llm.export(DEEP, max_seq_len=MAX_SEQ, max_context_len=MAX_CONTEXT,
                        dtype="bfloat16", output=out, progress=None)
    [check] = [m for m in result.export.run_check.methods if m.method == "forward"]
    assert check.ok and check.compared and check.executors
    inputs = hf_example_inputs(MAX_SEQ)
    program = load_program(out, None).load_method("forward")
    got = program(list(inputs))[0].float()
    model = _bf16()
    exact = reference.measure(model, MAX_CONTEXT, 1, inputs)
    with torch.no_grad():
        in_bf16 = llm.eager_decoder(model, MAX_CONTEXT)(*inputs).float()
    scale = max(1.0, float(exact.outputs[0].float().abs().max()))
    # What the check compared: the program against the fp32 reference, well
    # inside bf16's own tolerance; against eager bf16 it is beyond it.
    assert check.max_abs_diff == pytest.approx(float((got - exact.outputs[0].float()).abs().max()))
    assert check.max_abs_diff < TOLERANCE["bf16"] * scale
    assert float((got - in_bf16).abs().max()) > TOLERANCE["bf16"] * scale
    assert check.tolerance == pytest.approx(exact.tolerance(TOLERANCE["bf16"]) * scale)


CHILD = r"""
import json, sys
sys.path[:0] = [sys.argv[1]]
import torch
from proc_status import reset_peak, status
from executorch_tensorrt import llm
from executorch_tensorrt.llm.hf_export import hf_decode_step, hf_example_inputs
from executorch_tensorrt.llm import reference

config = dict(model_type="llama", vocab_size=65536, hidden_size=1024, intermediate_size=256,
              num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=64, tie_word_embeddings=False)
model = llm.causal_lm(config, dtype=torch.bfloat16)
inputs = hf_example_inputs(4)
step = hf_decode_step(model, 16, 1, cache_dtype=torch.float32)
with torch.no_grad(), reference.float32_compute(model):
    step(*inputs)  # allocations of a first call, outside the measure
    rss = status("VmRSS")
    reset_peak()
    step(*inputs)
print(json.dumps({"peak": status("VmHWM") - rss,
                  "head_fp32": model.lm_head.weight.numel() * 4}))
"""


def test_computing_in_float32_casts_a_big_linear_in_blocks_never_whole():
    """The 8B head's fp32 cast is 2.1 GB: the reference casts 64 MiB of it at a
    time (here a 256 MiB head in 4 blocks; embedding rows only)."""
    run = subprocess.run([sys.executable, "-c", CHILD, str(TESTS)], capture_output=True,
                         text=True, timeout=600, env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-3000:]
    measured = json.loads(run.stdout.strip().splitlines()[-1])
    assert measured["peak"] < 0.5 * measured["head_fp32"], measured


def test_a_float32_model_exported_in_bfloat16_is_the_model_loaded_in_bfloat16():
    """export(model, dtype=...) converts as transformers' from_pretrained(dtype=)
    loads: weights in bf16, RoPE's inv_freq kept in fp32. nn.Module.to rounded
    inv_freq too, which turns each attention angle by (query - key distance) x
    the rounding: other logits than the model loaded in bf16 gives."""
    loaded = _bf16()
    converted = llm.in_dtype(llm.causal_lm(DEEP), torch.bfloat16)
    assert {p.dtype for p in converted.parameters()} == {torch.bfloat16}
    assert converted.model.rotary_emb.inv_freq.dtype == torch.float32
    tokens = torch.randint(0, DEEP["vocab_size"], (1, MAX_SEQ),
                           generator=torch.Generator().manual_seed(0))
    positions = torch.arange(MAX_SEQ)
    with torch.no_grad():
        want = llm.eager_decoder(loaded, MAX_CONTEXT)(tokens, positions)
        got = llm.eager_decoder(converted, MAX_CONTEXT)(tokens, positions)
    assert torch.equal(got, want)
