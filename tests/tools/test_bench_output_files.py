"""The small version of tools/bench/output_files.py: an export over an
earlier program peaks at no more disk than the earlier set plus the new one,
and leaves nothing of its staging behind. Time is measured by the benchmark
(docs/evidence/output-files.md), never asserted here."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "bench"))
import output_files as bench  # noqa: E402


def test_an_export_over_an_earlier_set_peaks_at_the_two_sets(tmp_path, allow_fallback):
    result = bench.measure("mlp67m", 1, tmp_path)
    (run,) = result["runs"]
    assert run["leftovers"] == []
    # The earlier set and the new one have the same model: equal sizes.
    assert abs(run["new_bytes"] - run["earlier_bytes"]) < 0.01 * run["earlier_bytes"]
    assert run["new_bytes"] > result["weights_bytes"]  # the weights are in the set, once
    assert run["new_bytes"] < 1.1 * result["weights_bytes"]
    # The staged set sits beside the earlier one, never more (no third copy).
    assert run["earlier_bytes"] + 0.9 * run["new_bytes"] <= run["peak_bytes"]
    assert run["peak_over_earlier_plus_new"] <= 1.02
    assert 0 < run["staging_s"] < run["total_s"]
    # The table the record is made of reads back its figures.
    assert "| 1 |" in bench.table(result)
