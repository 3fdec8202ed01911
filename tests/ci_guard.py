"""pytest plugin: under CI, a skipped test fails the run.

When the environment has ``CI=true`` (also ``1``/``yes``), every skipped test
(a ``pytest.skip``, a ``skip``/``skipif`` mark, a ``pytest.importorskip``, in a
test, a fixture or at module level) turns the run into a failure, unless its node
id matches an entry of the allow-list. A run in which no test ran also fails.
Expected failures (xfail) are not skips and are left alone.

The allow-list (default ``tests/skip_allowlist.toml`` beside this file; another
one with ``--skip-allowlist PATH`` or ``ETRT_SKIP_ALLOWLIST=PATH``) holds entries

    [[allow]]
    pattern = "tests/test_engine_execution.py::*"
    reason = "needs an NVIDIA GPU that the installed TensorRT supports"

``pattern`` is an fnmatch pattern over node ids relative to the rootdir (an exact
node id also matches, so brackets in parametrized ids need no escaping); a
module-level skip of ``f.py`` matches ``f.py::*``. Every entry needs a non-empty
``reason`` saying what hardware CI lacks; a malformed allow-list is a usage error
with or without CI.

Enable it with ``pytest_plugins = ["ci_guard"]`` in tests/conftest.py, or
``-p ci_guard`` with tests/ on the Python path.
"""

from __future__ import annotations

import fnmatch
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

DEFAULT_ALLOWLIST = Path(__file__).resolve().with_name("skip_allowlist.toml")
ALLOWLIST_ENV = "ETRT_SKIP_ALLOWLIST"
CI_ENV = "CI"
_ENTRY_KEYS = {"pattern", "reason"}


def ci_enabled() -> bool:
    return os.environ.get(CI_ENV, "").strip().lower() in {"true", "1", "yes"}


@dataclass(frozen=True)
class Entry:
    pattern: str
    reason: str

    def matches(self, nodeid: str) -> bool:
        return nodeid == self.pattern or fnmatch.fnmatchcase(nodeid, self.pattern)


def load_allowlist(path: Path, required: bool) -> list[Entry]:
    """Read and validate an allow-list; any problem is a pytest.UsageError."""
    if not path.is_file():
        if required:
            raise pytest.UsageError(f"ci_guard: skip allow-list {path} does not exist")
        return []
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise pytest.UsageError(f"ci_guard: {path}: not valid TOML: {e}") from None
    extra = set(data) - {"allow"}
    if extra:
        raise pytest.UsageError(f"ci_guard: {path}: unknown top-level keys {sorted(extra)}; "
                                "entries go in [[allow]] tables")
    raw = data.get("allow", [])
    if not isinstance(raw, list):
        raise pytest.UsageError(f"ci_guard: {path}: 'allow' must be an array of tables ([[allow]])")
    entries = []
    errors = []
    for i, item in enumerate(raw, 1):
        where = f"{path}: [[allow]] entry {i}"
        if not isinstance(item, dict):
            errors.append(f"{where}: not a table")
            continue
        pattern, reason = item.get("pattern"), item.get("reason")
        where += f" ({pattern!r})" if isinstance(pattern, str) else ""
        if set(item) - _ENTRY_KEYS:
            errors.append(f"{where}: unknown keys {sorted(set(item) - _ENTRY_KEYS)}")
        if not isinstance(pattern, str) or not pattern.strip():
            errors.append(f"{where}: needs a non-empty 'pattern' (an fnmatch pattern over node ids)")
        if not isinstance(reason, str) or not reason.strip():
            errors.append(f"{where}: needs a non-empty 'reason' saying which hardware CI lacks")
        if isinstance(pattern, str) and pattern.strip() and isinstance(reason, str) and reason.strip():
            entries.append(Entry(pattern, reason.strip()))
    if errors:
        raise pytest.UsageError("ci_guard: invalid skip allow-list:\n  " + "\n  ".join(errors))
    return entries


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr)
    return reason.removeprefix("Skipped: ").strip()


class CIGuard:
    def __init__(self, config: pytest.Config, entries: list[Entry], path: Path):
        self.config = config
        self.entries = entries
        self.path = path
        self.skips: dict[str, str] = {}  # nodeid -> reason, in order seen
        self.ran = 0

    def allowed_by(self, nodeid: str, module_level: bool) -> Entry | None:
        for e in self.entries:
            if e.matches(nodeid) or (module_level and e.matches(nodeid + "::")):
                return e
        return None

    # hooks ------------------------------------------------------------------------

    def pytest_runtest_logreport(self, report):
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skips.setdefault(report.nodeid, _skip_reason(report))
        elif report.when == "call":
            self.ran += 1

    def pytest_collectreport(self, report):
        if report.skipped:
            self.skips.setdefault(report.nodeid + "\0module", _skip_reason(report))

    def _verdict(self):
        violations, allowed = [], []
        for key, reason in self.skips.items():
            nodeid, module_level = key.removesuffix("\0module"), key.endswith("\0module")
            entry = self.allowed_by(nodeid, module_level)
            (allowed if entry else violations).append((nodeid, reason, entry))
        no_tests = self.ran == 0 and not self.config.option.collectonly
        return violations, allowed, no_tests

    def pytest_sessionfinish(self, session):
        if hasattr(self.config, "workerinput"):  # an xdist worker: the controller decides
            return
        violations, _, no_tests = self._verdict()
        if (violations or no_tests) and session.exitstatus in (
                pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        violations, allowed, no_tests = self._verdict()
        tr = terminalreporter
        if allowed:
            tr.write_sep("-", "ci_guard: allow-listed skips")
            for nodeid, reason, entry in allowed:
                tr.write_line(f"ALLOWED {nodeid}: {reason}  [{entry.pattern}: {entry.reason}]")
        if not (violations or no_tests):
            return
        tr.write_sep("=", f"ci_guard: {CI_ENV}=true, so the run fails", red=True, bold=True)
        for nodeid, reason, _ in violations:
            tr.write_line(f"SKIPPED (not allowed in CI) {nodeid}: {reason}", red=True)
        if violations:
            tr.write_line(f"{len(violations)} skipped test(s) not in the allow-list {self.path}. "
                          "Install what they need, or, only for hardware CI lacks, add an "
                          "[[allow]] entry with a reason.")
        if no_tests:
            tr.write_line("no tests ran", red=True)


def pytest_addoption(parser):
    parser.getgroup("ci_guard").addoption(
        "--skip-allowlist", default=None, metavar="PATH",
        help=f"allow-list of tests that may skip under {CI_ENV}=true "
             f"(default: ${ALLOWLIST_ENV} or {DEFAULT_ALLOWLIST.name} beside ci_guard.py)")


def pytest_configure(config):
    given = config.getoption("--skip-allowlist", None) or os.environ.get(ALLOWLIST_ENV)
    path = Path(given) if given else DEFAULT_ALLOWLIST
    entries = load_allowlist(path, required=bool(given))  # validated with or without CI
    if ci_enabled():
        config.pluginmanager.register(CIGuard(config, entries, path), "ci_guard_state")
