"""ExecuTorch's backend test suite (operator tests) on a TensorRT flow.

The executorch wheel ships its backend conformance suite
(`executorch.backends.test.suite`): operator tests run through a pytest
fixture, `test_runner`, whose flows come from the suite's own registry
(`flow.all_flows()`), which lists only ExecuTorch's backends and cannot be
extended from outside. This script defines the TensorRT flow (our
partitioner; TensorRT partitions run with the onnxruntime fallback here, as no
GPU can run the engines) and runs the suite's operator tests with it through
the suite's own conftest, runner and test classes: it replaces `all_flows`
with one that returns this flow before pytest imports the suite's conftest.

For every subtest it records the suite's result and what TensorRT took: every
compute node (full), some (part) or none, read from the lowered program
(the suite's delegated / undelegated op counts). `--table` writes the summary
into docs/coverage.md (between the backend-suite markers).

    nice -n 19 .venv/bin/python tools/bench/backend_suite.py --json /tmp/suite.json \
        --table docs/coverage.md
    .venv/bin/python tools/bench/backend_suite.py -k "amax or argmax" --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Before anything imports our runtime: TensorRT partitions run in onnxruntime.
os.environ.setdefault("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")

import pytest  # noqa: E402
import executorch.backends.test.suite as suite_pkg  # noqa: E402
from executorch.backends.test.suite import flow as suite_flow  # noqa: E402
from executorch.backends.test.harness import Tester  # noqa: E402
from executorch.backends.test.harness.stages import StageType, ToEdgeTransformAndLower  # noqa: E402
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower  # noqa: E402

# Importing the package registers TensorRTBackend with ExecuTorch's runtime.
from executorch_tensorrt import TensorRTPartitioner  # noqa: E402

SUITE_DIR = Path(suite_pkg.__file__).parent
TABLE_BEGIN = "<!-- backend-suite:begin (tools/bench/backend_suite.py --table) -->"
TABLE_END = "<!-- backend-suite:end -->"


class TensorRTLower(ToEdgeTransformAndLower):
    """The suite's lowering stage with our partitioner, as export_program uses
    it: a fresh partitioner per program, given the real weights, and ExecuTorch's
    portable kernels for whatever TensorRT leaves."""

    def __init__(self):
        super().__init__(partitioners=[], edge_compile_config=EdgeCompileConfig(
            _check_ir_validity=False))

    def run(self, artifact, inputs=None, generate_etrecord: bool = False) -> None:
        partitioner = TensorRTPartitioner(progress=None)
        partitioner.real_weights = [{**artifact.state_dict, **artifact.constants}]
        self.partitioners = [partitioner]
        self.edge_dialect_program = to_edge_transform_and_lower(
            artifact, compile_config=self.edge_compile_conf, partitioner=self.partitioners,
            generate_etrecord=generate_etrecord)


class TensorRTTester(Tester):
    """The suite's Tester with the TensorRT lowering stage."""

    def __init__(self, module, example_inputs, dynamic_shapes=None):
        stages = Tester.default_stage_classes() | {
            StageType.TO_EDGE_TRANSFORM_AND_LOWER: TensorRTLower}
        super().__init__(module, example_inputs, stage_classes=stages,
                         dynamic_shapes=dynamic_shapes)


TENSORRT_FLOW = suite_flow.TestFlow("tensorrt", backend="tensorrt",
                                    tester_factory=TensorRTTester)


def use_tensorrt_flow() -> None:
    """Makes the suite's flow registry answer with the TensorRT flow only. Must
    run before pytest imports the suite's conftest (it binds all_flows then)."""
    suite_flow.all_flows = lambda: {TENSORRT_FLOW.name: TENSORRT_FLOW}


@dataclass
class Subtest:
    test: str                 # pytest node name, e.g. test_amax_dim[tensorrt]
    index: int
    result: str               # the suite's TestResult name (SUCCESS, SKIPPED, LOWER_FAIL, ...)
    on_tensorrt: str          # full / part / none: what TensorRT took of the compute nodes
    delegated: dict[str, int] = field(default_factory=dict)
    undelegated: dict[str, int] = field(default_factory=dict)
    error: str = ""


@dataclass
class TestCaseResult:
    test: str                 # pytest node id relative to the suite
    outcome: str              # passed / failed / skipped (pytest's, as the suite defines them)
    reason: str = ""
    subtests: list[Subtest] = field(default_factory=list)


def _share(delegated: Counter | None, undelegated: Counter | None) -> str:
    # The suite leaves both counts None when it never lowered (export or
    # lowering failed): nothing on TensorRT.
    if not delegated or not sum(delegated.values()):
        return "none"
    return "part" if undelegated and sum(undelegated.values()) else "full"


class Collector:
    """pytest plugin: each test case's outcome and its subtests' records."""

    def __init__(self, log: Path | None = None, shard: tuple[int, int] = (1, 1)):
        self.cases: list[TestCaseResult] = []
        self.log = log  # one JSON line per case as it ends: a cut-short run keeps its cases
        self.shard = shard
        # A rerun with the same log skips the cases it already holds (resume).
        self.done = {c.test for c in read_log(log)} if log and log.is_file() else set()

    def pytest_collection_modifyitems(self, config, items):
        """Keeps this shard's cases (every n-th in collection order, from the
        i-th) that the log does not hold yet."""
        index, count = self.shard
        keep = [item for n, item in enumerate(items)
                if n % count == index - 1 and item.nodeid not in self.done]
        dropped = [item for item in items if item not in keep]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep
        print(f"backend suite: {len(keep)} cases to run (shard {index}/{count}, "
              f"{len(self.done)} already in the log)", flush=True)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            case = self._case(item, report)
            self.cases.append(case)
            if self.log:
                with open(self.log, "a") as f:
                    f.write(json.dumps(asdict(case)) + "\n")
        return report

    @staticmethod
    def _case(item, report) -> TestCaseResult:
        reason = ""
        if report.skipped and isinstance(report.longrepr, tuple):
            reason = str(report.longrepr[2])
        elif report.failed:
            reason = str(report.longrepr).splitlines()[-1] if report.longrepr else ""
        case = TestCaseResult(item.nodeid, report.outcome, reason[:300])
        runner = getattr(item, "funcargs", {}).get("test_runner")
        for rec in getattr(runner, "_results", []):
            case.subtests.append(Subtest(
                item.name, rec.subtest_index, rec.result.name,
                _share(rec.delegated_op_counts, rec.undelegated_op_counts),
                dict(rec.delegated_op_counts or {}), dict(rec.undelegated_op_counts or {}),
                "" if rec.error is None else str(rec.error)[:300]))
        return case


def read_log(path: Path) -> list[TestCaseResult]:
    cases = []
    for line in path.read_text().splitlines():
        raw = json.loads(line)
        subs = [Subtest(**s) for s in raw.pop("subtests")]
        cases.append(TestCaseResult(**raw, subtests=subs))
    return cases


def run_suite(keyword: str | None, workdir: Path, log: Path | None = None,
              files: list[str] = (), shard: tuple[int, int] = (1, 1),
              ) -> tuple[list[TestCaseResult], int, float]:
    """Runs the suite's operator tests (those matching `keyword`, a pytest -k
    expression; from `files` of operators/ in that order, all by default) on
    the TensorRT flow in this process. Returns the cases, pytest's exit code
    and the wall time."""
    use_tensorrt_flow()
    workdir.mkdir(parents=True, exist_ok=True)
    ini = workdir / "pytest.ini"
    ini.write_text("[pytest]\n")  # not the repository's settings (workers, testpaths)
    args = ["-c", str(ini), "--rootdir", str(SUITE_DIR), "--confcutdir", str(SUITE_DIR),
            "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
            "-W", "ignore::pytest.PytestUnknownMarkWarning"]
    # "." names every file not named before it (pytest drops a file also
    # covered by a folder argument, so the folder cannot be passed with them).
    named = [f for f in files if f != "."]
    if "." in files:
        named += sorted(p.name for p in (SUITE_DIR / "operators").glob("test_*.py")
                        if p.name not in named)
    args += [str(SUITE_DIR / "operators" / f) for f in named] or [str(SUITE_DIR / "operators")]
    if keyword:
        args += ["-k", keyword]
    collector = Collector(log, shard)
    t0 = time.perf_counter()
    code = pytest.main(args, plugins=[collector])
    return collector.cases, int(code), time.perf_counter() - t0


@dataclass
class Summary:
    cases: Counter            # passed / failed / skipped
    passing_subtests: Counter  # full / part / none, over subtests that passed
    failing_subtests: int
    left_out: dict[str, Counter]  # test -> ops left outside TensorRT in passing subtests


def summarize(cases: list[TestCaseResult]) -> Summary:
    outcomes = Counter(c.outcome for c in cases)
    shares: Counter = Counter()
    failing = 0
    left_out: dict[str, Counter] = {}
    for case in cases:
        for sub in case.subtests:
            if sub.result in ("SUCCESS", "SUCCESS_UNDELEGATED"):
                shares[sub.on_tensorrt] += 1
                if sub.on_tensorrt != "full":
                    left_out.setdefault(sub.test, Counter()).update(sub.undelegated)
            elif sub.result != "SKIPPED":
                failing += 1
    return Summary(outcomes, shares, failing, left_out)


def table(summary: Summary, seconds: float, keyword: str | None) -> str:
    passing = sum(summary.passing_subtests.values())
    full = summary.passing_subtests["full"]
    pct = f"{100 * full / passing:.1f} %" if passing else "n/a"
    lines = [TABLE_BEGIN, "",
             f"Measured {time.strftime('%Y-%m-%d')} with `tools/bench/backend_suite.py`"
             f"{f' -k {keyword!r}' if keyword else ''} in {seconds:.0f} s (one process, "
             "`nice -n 19`, 2 shared CPUs).", "",
             "| test cases | passed | failed | skipped | passing subtests | fully on TensorRT "
             "| partly | nothing on TensorRT | failing subtests |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
             f"| {sum(summary.cases.values())} | {summary.cases['passed']} | "
             f"{summary.cases['failed']} | {summary.cases['skipped']} | {passing} | "
             f"{full} ({pct}) | {summary.passing_subtests['part']} | "
             f"{summary.passing_subtests['none']} | {summary.failing_subtests} |", ""]
    if summary.left_out:
        lines += ["Passing subtests TensorRT did not take whole, and the ops left to "
                  "ExecuTorch's portable kernels (count over the test's subtests):", "",
                  "| test | ops outside TensorRT |", "| --- | --- |"]
        for test, ops in sorted(summary.left_out.items()):
            text = ", ".join(f"`{op}` x{n}" for op, n in sorted(ops.items())) or \
                "(no compute node: nothing delegated)"
            lines.append(f"| `{test}` | {text} |")
        lines.append("")
    lines.append(TABLE_END)
    return "\n".join(lines)


def write_table(doc: Path, text: str) -> None:
    """Replaces the marked section of `doc` (appends it when absent)."""
    body = doc.read_text()
    if TABLE_BEGIN in body and TABLE_END in body:
        head, rest = body.split(TABLE_BEGIN, 1)
        body = head + text + rest.split(TABLE_END, 1)[1]
    else:
        body = body.rstrip("\n") + "\n\n" + text + "\n"
    doc.write_text(body)


def _shard(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise argparse.ArgumentTypeError(f"--shard {text!r}: expected I/N with 1 <= I <= N")
    return int(index), int(count)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="operators/ test files to run, in this order "
                        "(add `.` to run every other file after them); default all")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression over the suite's tests")
    parser.add_argument("--json", type=Path, help="write every case and subtest here")
    parser.add_argument("--table", type=Path, help="write the summary table into this doc")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/backend-suite"))
    parser.add_argument("--log", type=Path, help="append each case here (JSON lines) as it ends")
    parser.add_argument("--shard", type=_shard, default=(1, 1), metavar="I/N",
                        help="run every N-th case from the I-th (e.g. 2/4); one process each")
    parser.add_argument("--from-log", type=Path, help="summarize this log instead of running")
    parser.add_argument("--seconds", type=float, default=0.0, help="with --from-log: run time")
    args = parser.parse_args(argv)
    if args.from_log:
        cases, code, seconds = read_log(args.from_log), 0, args.seconds
    else:
        cases, code, seconds = run_suite(args.keyword, args.workdir, args.log, args.files,
                                         args.shard)
        if args.log:  # the table covers every case in the log, earlier runs' too
            cases = read_log(args.log)
    summary = summarize(cases)
    if args.json:
        args.json.write_text(json.dumps({"seconds": seconds, "pytest_exit": code,
                                         "cases": [asdict(c) for c in cases]}, indent=1))
    text = table(summary, seconds, args.keyword)
    if args.table:
        write_table(args.table, text)
    print(text)
    # pytest's 1 means failed tests; anything above is a broken run.
    return code if code > 1 else 0


if __name__ == "__main__":
    sys.exit(main())
