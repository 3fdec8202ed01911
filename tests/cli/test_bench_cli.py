"""`executorch-tensorrt bench`: latency percentiles, load and first-call
times, memory, which executor ran (the CPU fallback said as such), the
comparison with another program in the same process, and its refusals."""
from __future__ import annotations

import json
import re

import pytest

from executorch_tensorrt.cli.bench import Latency
from helpers import cli_main


def test_percentiles_are_measured_samples_by_nearest_rank():
    lat = Latency.of([float(v) for v in range(100, 0, -1)])  # 1..100 ms, unordered
    assert (lat.calls, lat.min_ms, lat.median_ms, lat.p90_ms, lat.p99_ms, lat.max_ms) == \
        (100, 1.0, 50.0, 90.0, 99.0, 100.0)
    assert lat.mean_ms == 50.5 and lat.throughput == pytest.approx(1e3 / 50.5)
    one = Latency.of([2.0])
    assert one.median_ms == one.p99_ms == one.max_ms == 2.0


def test_bench_reports_ordered_latencies_and_says_it_ran_the_fallback(exported,
                                                                       allow_fallback):
    _, _, path = exported("cnn")
    code, out, err = cli_main("bench", path, "--warmup", "2", "--iterations", "25")
    assert code == 0, err
    assert "TensorRT partitions ran on: onnxruntime" in out
    assert "the CPU fallback, not TensorRT" in out
    m = re.search(r"25 calls: min ([\d.]+), median ([\d.]+), p90 ([\d.]+), p99 ([\d.]+), "
                  r"max ([\d.]+) ms; ([\d.]+) calls/s", out)
    assert m, out
    values = [float(v) for v in m.groups()[:5]]
    assert values == sorted(values) and values[0] > 0
    assert re.search(r"load [\d.]+ ms, first call [\d.]+ ms", out)
    assert "engine forward[0]:" in out and "device memory not measured (no GPU)" in out


def test_bench_json_and_compare_alternate_in_one_process(exported, allow_fallback):
    _, _, cnn = exported("cnn")
    code, out, err = cli_main("bench", cnn, "--iterations", "10", "--warmup", "1",
                              "--compare", cnn, "--json", "--partitions")
    assert code == 0, err
    first, second = json.loads(out)
    for r in (first, second):
        assert r["latency"]["calls"] == 10 and r["on_fallback"] is True
        assert r["executors"] == ["onnxruntime"] and r["peak_rss_mb"] > 0
        assert len(r["partitions_ms"]) == 1 and r["partitions_ms"][0] > 0
        assert r["latency"]["min_ms"] <= r["latency"]["p99_ms"] <= r["latency"]["max_ms"]
    code, out, _ = cli_main("bench", cnn, "--iterations", "5", "--compare", cnn)
    assert code == 0 and re.search(r"ratio cnn-\d+\.pte / cnn-\d+\.pte: median [\d.]+", out), out


@pytest.mark.parametrize("args, message", [
    (["--iterations", "0"], "--iterations >= 1"),
    (["--compare", "missing.pte"], "missing.pte does not exist"),
])
def test_bench_refusals_are_usage_errors(exported, allow_fallback, args, message):
    _, _, path = exported("add")
    code, out, err = cli_main("bench", path, *args)
    assert code == 2 and message in err, (out, err)
