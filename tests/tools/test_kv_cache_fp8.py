"""The small version of tools/bench/kv_cache_fp8.py: what TensorRT-RTX's
builder does with an fp8 KV-cache state (docs/llm.md, "An fp8 KV cache"),
and the one form it builds, run by onnxruntime over a whole decode."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "bench"))
import kv_cache_fp8 as bench  # noqa: E402


def test_builder_refuses_an_fp8_cache_write_and_builds_a_requantized_one():
    assert "not consumed by" in bench.build(bench.model("scatter-fp8"), "SM89")
    assert "must have type Float" in bench.build(bench.model("tensorscatter-fp8"), "SM89")
    requantized = bench.model("dequantize-scatter-quantize")
    assert bench.build(requantized, "SM89").startswith("builds")
    assert "HW-specific datatypes: fp8" in bench.build(requantized, "SM86")


def test_fp8_cache_halves_the_bytes_within_its_rounding():
    r = bench.decode(bench.model("dequantize-scatter-quantize"))
    assert r["bytes_per_token_fp8"] * 2 == r["bytes_per_token_fp16"]
    # e4m3 keeps 3 mantissa bits: about 2^-4 per key, far coarser than float16.
    assert r["fp16_vs_fp32"] < 1e-3 < r["fp8_vs_fp32"] < 0.06
