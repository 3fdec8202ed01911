"""A slice of ExecuTorch's backend suite on the TensorRT flow (tools/bench/backend_suite.py).

The suite's own operator tests, run through its conftest and runner with our
flow (the partitioner; TensorRT partitions run in onnxruntime here), for ops
whose every form TensorRT now takes: each case passes and in each subtest
TensorRT took every compute node (read from the lowered program). The full
run is the documented command in docs/coverage.md.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "bench" / "backend_suite.py"
sys.path.insert(0, str(TOOL.parent))
import backend_suite  # noqa: E402

# A few subtests each, of ops TensorRT took none of before aot/onnx/extra_ops.py:
# argmax over the flattened input, mean over every dimension, 3-D adaptive
# pools (max with its indices), index_put with accumulate.
SLICE = ["test_argmax_dtype", "test_mean_dtype", "test_adaptive_avgpool3d_dtype",
         "test_adaptive_maxpool3d_return_indices", "test_index_put_accumulate"]


@pytest.fixture(scope="module")
def slice_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("backend-suite")
    proc = subprocess.run(
        [sys.executable, str(TOOL), "-k", " or ".join(SLICE), "--json", str(out / "r.json"),
         "--workdir", str(out / "work")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "r.json").read_text())


def test_slice_passes_fully_on_tensorrt(slice_run):
    cases = slice_run["cases"]
    assert sorted(c["test"].split("::")[1].split("[")[0] for c in cases) == sorted(SLICE)
    for case in cases:
        assert case["outcome"] == "passed", case
        assert case["subtests"], case
        for sub in case["subtests"]:
            assert sub["result"] == "SUCCESS", sub
            assert sub["on_tensorrt"] == "full", sub
            assert sub["delegated"] and not sub["undelegated"], sub


def test_summary_counts_partial_and_failing_subtests():
    def sub(result, delegated, undelegated):
        share = backend_suite._share(backend_suite.Counter(delegated),
                                     backend_suite.Counter(undelegated))
        return backend_suite.Subtest("t[tensorrt]", 0, result, share, delegated, undelegated)
    cases = [backend_suite.TestCaseResult("a", "passed", subtests=[
                 sub("SUCCESS", {"aten::add": 1}, {}),
                 sub("SUCCESS", {"aten::add": 1}, {"aten::argmax": 1}),
                 sub("SUCCESS_UNDELEGATED", {}, {"aten::argmax": 2})]),
             backend_suite.TestCaseResult("b", "failed", subtests=[
                 sub("OUTPUT_MISMATCH_FAIL", {"aten::add": 1}, {})]),
             backend_suite.TestCaseResult("c", "skipped")]
    summary = backend_suite.summarize(cases)
    assert summary.cases == {"passed": 1, "failed": 1, "skipped": 1}
    assert summary.passing_subtests == {"full": 1, "part": 1, "none": 1}
    assert summary.failing_subtests == 1
    assert summary.left_out == {"t[tensorrt]": {"aten::argmax": 3}}


def test_a_subtest_that_never_lowered_has_nothing_on_tensorrt():
    # The suite leaves the op counts None when export or lowering failed.
    assert backend_suite._share(None, None) == "none"
    assert backend_suite._share(backend_suite.Counter({"aten::add": 1}), None) == "full"


def test_table_replaces_its_section_only(tmp_path):
    doc = tmp_path / "coverage.md"
    doc.write_text("# head\n\nkept\n")
    summary = backend_suite.summarize([])
    backend_suite.write_table(doc, backend_suite.table(summary, 1.0, None))
    backend_suite.write_table(doc, backend_suite.table(summary, 2.0, "x"))
    text = doc.read_text()
    assert text.startswith("# head\n\nkept\n")
    assert text.count(backend_suite.TABLE_BEGIN) == 1 and "in 2 s" in text and "in 1 s" not in text


def test_a_rerun_skips_the_cases_in_its_log_and_runs_only_its_shard(tmp_path):
    """Resumable and sharded: test_neg's first case is already in the log, so
    shard 1/2 runs its other cases (every second one) and appends them once;
    the table covers the whole log."""
    import re

    log = tmp_path / "log.jsonl"
    first = backend_suite.TestCaseResult("operators/test_neg.py::test_neg_dtype[tensorrt]",
                                         "passed")
    log.write_text(json.dumps(backend_suite.asdict(first)) + "\n")
    proc = subprocess.run(
        [sys.executable, str(TOOL), "test_neg.py", "--shard", "1/2", "--log", str(log),
         "--workdir", str(tmp_path / "work")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = int(re.search(r"(\d+) cases to run \(shard 1/2, 1 already in the log\)",
                        proc.stdout).group(1))
    tests = [c.test for c in backend_suite.read_log(log)]
    assert 1 <= ran and len(tests) == 1 + ran == len(set(tests)), tests
    assert tests[0] == first.test and all(t.startswith("operators/test_neg.py::") for t in tests)
    assert f"| {1 + ran} | {1 + ran} | 0 | 0 |" in proc.stdout  # cases, passed, failed, skipped
