"""A fuzz slice per checkpoint format (tools/fuzz/checkpoint_fuzz.py): mutated
GPTQ, AWQ (gemm, gemv), compressed-tensors (zero points, act-order groups) and
GGUF files (llama 32-blocks and K-quants, qwen3, phi3, gemma3) are read or refused with
CheckpointError; no other exception, no hang. The longer run is documented in
docs/checkpoints.md."""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "fuzz"))
import checkpoint_fuzz  # noqa: E402

CASES = 60 * len(checkpoint_fuzz.FORMATS)


def test_mutated_checkpoints_are_read_or_refused_by_name():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # overflow in gguf's dequantization of mutated bytes
        summary = checkpoint_fuzz.fuzz(cases=CASES, seed=1, case_time=10.0)
    assert summary["cases"] == CASES
    assert summary["findings"] == [], summary["findings"][:5]
    for fmt, counts in summary["by_format"].items():
        assert counts.get("refused", 0) >= 15, (fmt, counts)  # the mutations do reach checks
        assert set(counts) <= {"accepted", "refused"}, (fmt, counts)
