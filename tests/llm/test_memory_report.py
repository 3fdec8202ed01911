"""The memory report of an LLM program (program/memory_report.py) and
`llm.export(memory_budget=...)` (llm/memory_budget.py): weights and KV cache
read from the program equal what the config gives by hand, in float32 and
float16; TensorRT's activation memory is the builder's own figure recorded
at export; a budget chooses the context that fits or refuses before
anything is written."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from executorch_tensorrt import llm
from executorch_tensorrt.llm.memory_budget import MemoryBudgetError, parse_size
from executorch_tensorrt.program.memory_report import memory_report_of
from runner_helpers import CONFIGS
from tests.helpers import cli_main

CONFIG = CONFIGS["llama"]
MAX_SEQ, MAX_CONTEXT = 4, 48
SIZES = {"float32": 4, "float16": 2}


def _model(dtype: str):
    """The tiny llama with distinct norm weights: equal tensors are stored
    once (named data and the ONNX optimizer both deduplicate), so the
    transformers default of all-ones norms would count once."""
    model = llm.causal_lm(CONFIG, dtype=getattr(torch, dtype))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


def _by_hand(dtype: str) -> tuple[int, int]:
    """(weight bytes, KV cache bytes) from the config alone."""
    c, size = CONFIG, SIZES[dtype]
    head_dim = c["hidden_size"] // c["num_attention_heads"]
    kv_width = c["num_key_value_heads"] * head_dim
    per_layer = (c["hidden_size"] * c["hidden_size"] * 2          # q, o
                 + c["hidden_size"] * kv_width * 2                 # k, v
                 + c["hidden_size"] * c["intermediate_size"] * 3   # gate, up, down
                 + c["hidden_size"] * 2)                           # two RMSNorms
    weights = (c["num_hidden_layers"] * per_layer
               + c["vocab_size"] * c["hidden_size"] * 2            # embedding, untied head
               + c["hidden_size"])                                 # final norm
    kv = c["num_hidden_layers"] * 2 * c["num_key_value_heads"] * head_dim * MAX_CONTEXT
    return weights * size, kv * size


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """dtype -> (the tiny llama's .pte, its export result), exported once."""
    done = {}

    def get(dtype: str):
        if dtype not in done:
            out = tmp_path_factory.mktemp(dtype) / "llama.pte"
            done[dtype] = out, llm.export(_model(dtype), max_seq_len=MAX_SEQ,
                                          max_context_len=MAX_CONTEXT, dtype=dtype,
                                          output=out, progress=None, run_check=False)
        return done[dtype]
    return get


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_memory_report_equals_the_config_by_hand(dtype, exported):
    out, result = exported(dtype)
    weights, kv = _by_hand(dtype)
    report = result.memory
    assert report.kv.total_bytes == kv
    assert report.kv.bytes_per_token == kv // MAX_CONTEXT
    # Besides the model's tensors, the graph keeps RoPE's inverse frequencies,
    # a few scalars (eps, masks) and int64 shape constants: under 1 KiB here.
    assert 0 <= report.weights_by_dtype[dtype] - weights < 200, report.weights_by_dtype
    assert 0 <= report.weights_bytes - weights < 1024, report.weights_by_dtype
    # TensorRT's own figure, recorded by the builder at export (no engine ships here).
    assert report.activation_bytes > 0 and not report.unmeasured
    assert report.total_bytes == report.weights_bytes + report.kv_bytes + report.activation_bytes
    # The same figures from the file, in inspect and in the report JSON.
    assert memory_report_of(out).to_json() == report.to_json()
    assert json.loads(out.with_suffix(".report.json").read_text())["memory"] == report.to_json()
    code, stdout, _ = cli_main("inspect", out)
    assert code == 0
    assert f"KV cache: " in stdout and f"({kv} bytes;" in stdout
    assert f"({report.total_bytes} bytes)" in stdout
    # The fallback's own line: weights once, the cache, and onnxruntime's
    # packed copy of the MatMul weights (a partition this small is prepacked).
    assert f"on the onnxruntime fallback (CPU): " in stdout
    assert f"({report.fallback_bytes} bytes: weights once + KV cache" in stdout
    assert report.fallback_bytes == report.weights_bytes + report.kv_bytes + report.fallback.total
    assert report.fallback.packed > 0


@pytest.mark.parametrize("text, expected", [
    ("8GB", 8 * 10**9), ("7.5GiB", int(7.5 * 2**30)), ("512MiB", 512 << 20), ("4096", 4096),
    ("1.5 gb", 1_500_000_000)])
def test_sizes_parse(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["8 G", "eight GB", "-1GB", "0MB", "8GB!", ""])
def test_bad_sizes_are_refused_by_name(text):
    with pytest.raises(ValueError, match="memory budget"):
        parse_size(text)


def test_budget_chooses_the_largest_context_that_fits(tmp_path):
    # Weights 97 KiB, 256 bytes of KV per position, an activation estimate of
    # 8 MiB + 11 KiB + 128 bytes per position: room for a few dozen positions,
    # not for the model's 64.
    out = tmp_path / "llama.pte"
    budget = (8 << 20) + (120 << 10)
    result = llm.export(CONFIG, max_seq_len=MAX_SEQ, memory_budget=budget, output=out,
                        progress=None, run_check=False)
    chosen = result.metadata.max_context_len
    assert MAX_SEQ <= chosen < CONFIG["max_position_embeddings"]
    assert result.memory.kv.total_bytes == 256 * chosen  # the program has what was chosen
    # The program's own figures (TensorRT's activation included) fit the budget.
    assert result.memory.total_bytes <= budget
    # One position more would not have fitted the estimate.
    from executorch_tensorrt.llm.memory_budget import plan_memory

    model = llm.causal_lm(CONFIG)
    plan = plan_memory(model, model.config, budget, max_seq_len=MAX_SEQ, max_context_len=None,
                       batch_size=1, dtype=torch.float32, quantize=None)
    assert plan.max_context_len == chosen
    assert plan.total(chosen) <= budget < plan.total(chosen + 1)


def test_budget_too_small_is_refused_before_export(tmp_path):
    out = tmp_path / "llama.pte"
    code, stdout, stderr = cli_main("llm-export", out, "--config", json.dumps(CONFIG),
                                    "--max-seq-len", MAX_SEQ, "--memory-budget", "64KiB")
    assert code != 0 and not out.exists()
    for part in ("64.00 KiB", "weights 96.", "KV cache", "activation estimate",
                 "int4_weight_only", "max_seq_len"):
        assert part in stderr, stderr[-2000:]
    with pytest.raises(MemoryBudgetError, match="Nothing was exported"):
        llm.export(CONFIG, max_seq_len=MAX_SEQ, memory_budget="64KiB", output=out,
                   progress=None)


def test_bad_budget_is_refused_by_name(tmp_path):
    code, _, stderr = cli_main("llm-export", tmp_path / "x.pte", "--config", json.dumps(CONFIG),
                               "--max-seq-len", MAX_SEQ, "--memory-budget", "8 gigs")
    assert code != 0 and "--memory-budget" in stderr and "'8 gigs'" in stderr


CHILD = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[2])
from proc_status import reset_peak, status
import executorch_tensorrt
from executorch.runtime import Runtime

torch.ones(1)
before = status("VmRSS")
reset_peak()
method = Runtime.get().load_program(sys.argv[1]).load_method("forward")
seq, ctx = int(sys.argv[3]), int(sys.argv[4])
method.execute((torch.arange(1, seq + 1).reshape(1, seq), torch.arange(seq)))
for pos in range(seq, ctx):  # the whole cache written
    method.execute((torch.tensor([[pos % 90 + 1]]), torch.tensor([pos])))
print(status("VmHWM") - before)
"""
WIDE = {**CONFIG, "hidden_size": 256, "intermediate_size": 1024, "vocab_size": 4096,
        "num_attention_heads": 8, "num_key_value_heads": 2}   # 16 MB of float32 weights


def _peak(pte: Path) -> int:
    """Peak resident growth of a child that loads `pte` and fills its cache
    through the onnxruntime fallback (VmHWM over VmRSS before the load)."""
    from executorch_tensorrt.runtime.executor import FALLBACK_ENV
    import os

    run = subprocess.run([sys.executable, "-c", CHILD, str(pte), str(Path(__file__).parents[1]),
                          str(MAX_SEQ), str(MAX_CONTEXT)], capture_output=True, text=True,
                         timeout=600, env={**os.environ, FALLBACK_ENV: "onnxruntime"})
    assert run.returncode == 0, run.stderr[-3000:]
    return int(run.stdout.split()[-1])


def test_cpu_fallback_peak_against_the_report(exported, tmp_path):
    """The report's line for the onnxruntime fallback predicts what a process
    that loads and runs the program reaches: from the tiny llama to one with
    16 MB of weights (prepacked: the packed copy is in the line), the peak
    resident growth grows by the line's growth within 10 %. The difference
    takes out what loading onnxruntime costs whatever the model
    (tools/bench/ort_memory.py measures it and other sizes)."""
    tiny_pte, tiny = exported("float32")
    wide_pte = tmp_path / "wide.pte"
    wide = llm.export(WIDE, max_seq_len=MAX_SEQ, max_context_len=MAX_CONTEXT, output=wide_pte,
                      progress=None, run_check=False, record_memory=False)
    predicted = wide.memory.fallback_bytes - tiny.memory.fallback_bytes
    assert wide.memory.fallback.packed > 10e6 and predicted > 25e6
    measured = _peak(wide_pte) - _peak(tiny_pte)
    assert abs(measured / predicted - 1) <= 0.10, (measured, predicted)


def test_report_counts_shared_weights_once_and_the_largest_scratch():
    """Two partitions reading one named-data weight, one of them without a
    recorded activation figure (exported with record_memory=False, no GPU)."""
    from executorch_tensorrt.blob.metadata import BlobMetadata
    from executorch_tensorrt.program.info import DelegateInfo, MethodInfo
    from executorch_tensorrt.program.memory_report import format_memory_report, memory_report

    w = {"name": "fc.weight", "key": "etrt.shared", "dtype": "float16", "shape": [4, 8],
         "nbytes": 64}
    io = [{"name": "x", "dtype": "float16", "shape": [1, 8], "is_input": True},
          {"name": "y", "dtype": "float16", "shape": [1, 4], "is_input": False}]

    def delegate(**extra):
        meta = BlobMetadata.from_json({"io_bindings": io, "weights_location": "named_data",
                                       "weights": [w], **extra})
        return DelegateInfo("TensorRTBackend", 0, meta, graph_constants={"float32": 12})

    methods = [MethodInfo("forward", delegates=[delegate(activation_bytes=[100, 300]),
                                                delegate()])]
    report = memory_report(methods)
    assert report.weights_by_dtype == {"float16": 64, "float32": 24}
    assert report.activation_bytes == 300 and report.unmeasured == ["forward[1]"]
    assert report.total_bytes == 64 + 24 + 300
    assert "not recorded for forward[1]" in format_memory_report(report)
