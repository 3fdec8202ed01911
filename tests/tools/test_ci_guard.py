"""tests/ci_guard.py, proved with real pytest runs in subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
REASON = "needs an NVIDIA GPU that the installed TensorRT supports"


def run_pytest(tmp_path: Path, files: dict[str, str], ci: bool, allowlist: str | None = None,
               *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # rootdir: node ids are relative to tmp_path
    for name, body in files.items():
        (tmp_path / name).write_text(textwrap.dedent(body))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "ETRT_")) and k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    if ci:
        env["CI"] = "true"
    if allowlist is not None:
        (tmp_path / "allow.toml").write_text(textwrap.dedent(allowlist))
        env["ETRT_SKIP_ALLOWLIST"] = str(tmp_path / "allow.toml")
    else:  # an empty allow-list, so the repository's own never matters here
        (tmp_path / "allow.toml").write_text("allow = []\n")
        env["ETRT_SKIP_ALLOWLIST"] = str(tmp_path / "allow.toml")
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "ci_guard", "-p", "no:cacheprovider",
                           "-q", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


SKIPPING = {
    "test_mixed.py": """
        import pytest
        def test_ok():
            pass
        def test_needs_frobnicator():
            pytest.skip("needs a frobnicator")
    """,
}

GPU_ALLOWLIST = f"""
    [[allow]]
    pattern = "test_gpu.py::*"
    reason = "{REASON}"
"""


def test_skip_fails_the_run_under_ci(tmp_path):
    r = run_pytest(tmp_path, SKIPPING, ci=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "SKIPPED (not allowed in CI) test_mixed.py::test_needs_frobnicator: needs a frobnicator" in r.stdout
    assert "1 passed, 1 skipped" in r.stdout


def test_skip_passes_without_ci(tmp_path):
    r = run_pytest(tmp_path, SKIPPING, ci=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ci_guard" not in r.stdout


def test_allow_listed_skip_passes_under_ci(tmp_path):
    files = {**SKIPPING, "test_gpu.py": """
        import pytest
        def test_runs_engine():
            pytest.skip("no GPU that TensorRT-RTX supports")
    """}
    del files["test_mixed.py"]
    files["test_cpu.py"] = "def test_ok():\n    pass\n"
    r = run_pytest(tmp_path, files, ci=True, allowlist=GPU_ALLOWLIST)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ALLOWED test_gpu.py::test_runs_engine" in r.stdout and REASON in r.stdout


def test_allow_list_covers_only_its_pattern(tmp_path):
    files = {**SKIPPING, "test_gpu.py": "import pytest\ndef test_e():\n    pytest.skip('no GPU')\n"}
    r = run_pytest(tmp_path, files, ci=True, allowlist=GPU_ALLOWLIST)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "SKIPPED (not allowed in CI) test_mixed.py::test_needs_frobnicator" in r.stdout
    assert "SKIPPED (not allowed in CI) test_gpu.py" not in r.stdout


def test_exact_parametrized_node_id_matches(tmp_path):
    files = {"test_p.py": """
        import pytest
        @pytest.mark.parametrize("dev", ["cpu", "cuda"])
        def test_dev(dev):
            if dev == "cuda":
                pytest.skip("no CUDA device")
    """}
    allow = f'[[allow]]\npattern = "test_p.py::test_dev[cuda]"\nreason = "{REASON}"\n'
    assert run_pytest(tmp_path, files, ci=True, allowlist=allow).returncode == 0


MISSING_IMPORT = {
    "test_in_test": """
        import pytest
        def test_ok():
            pass
        def test_uses_it():
            mod = pytest.importorskip("some_missing_module")
    """,
    "test_at_module_level": """
        import pytest
        mod = pytest.importorskip("some_missing_module")
        def test_uses_it():
            pass
    """,
    "test_in_fixture": """
        import pytest
        @pytest.fixture
        def mod():
            return pytest.importorskip("some_missing_module")
        def test_ok():
            pass
        def test_uses_it(mod):
            pass
    """,
    "test_skipif_mark": """
        import importlib.util, pytest
        def test_ok():
            pass
        @pytest.mark.skipif(importlib.util.find_spec("some_missing_module") is None,
                            reason="some_missing_module is not installed")
        def test_uses_it():
            pass
    """,
}


@pytest.mark.parametrize("where", sorted(MISSING_IMPORT))
def test_missing_required_dependency_fails_instead_of_skipping(tmp_path, where):
    files = {f"{where}.py": MISSING_IMPORT[where], "test_other.py": "def test_other():\n    pass\n"}
    r = run_pytest(tmp_path, files, ci=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"SKIPPED (not allowed in CI) {where}.py" in r.stdout
    assert "some_missing_module" in r.stdout
    # the same run without CI passes with a skip: what the guard exists to stop
    r = run_pytest(tmp_path, files, ci=False)
    assert r.returncode == 0 and "skipped" in r.stdout, r.stdout + r.stderr


def test_module_level_skip_is_covered_by_file_pattern(tmp_path):
    files = {"test_gpu.py": "import pytest\npytest.importorskip('some_missing_module')\n"
                            "def test_e():\n    pass\n",
             "test_cpu.py": "def test_ok():\n    pass\n"}
    assert run_pytest(tmp_path, files, ci=True, allowlist=GPU_ALLOWLIST).returncode == 0


def test_xfail_is_not_a_skip(tmp_path):
    files = {"test_x.py": """
        import pytest
        @pytest.mark.xfail(reason="known")
        def test_known():
            assert False
        def test_ok():
            pass
    """}
    r = run_pytest(tmp_path, files, ci=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("case", ["empty-file", "all-deselected", "all-allowed-skips"])
def test_no_tests_ran_fails_under_ci(tmp_path, case):
    args: tuple[str, ...] = ()
    allow = None
    if case == "empty-file":
        files = {"test_e.py": "X = 1\n"}
    elif case == "all-deselected":
        files = {"test_e.py": "def test_a():\n    pass\n"}
        args = ("-k", "nothing_matches")
    else:
        files = {"test_gpu.py": "import pytest\ndef test_e():\n    pytest.skip('no GPU')\n"}
        allow = GPU_ALLOWLIST
    r = run_pytest(tmp_path, files, True, allow, *args)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "no tests ran" in r.stdout
    if case == "all-allowed-skips":
        assert r.returncode == 1
        assert run_pytest(tmp_path, files, False, allow, *args).returncode == 0


def test_real_failure_keeps_its_exit_code(tmp_path):
    files = {"test_f.py": "import pytest\ndef test_f():\n    assert False\n"
                          "def test_s():\n    pytest.skip('x')\n"}
    r = run_pytest(tmp_path, files, ci=True)
    assert r.returncode == 1 and "1 failed" in r.stdout
    assert "SKIPPED (not allowed in CI) test_f.py::test_s: x" in r.stdout


BAD_ALLOWLISTS = {
    "no-reason": ('[[allow]]\npattern = "test_gpu.py::*"\n', "needs a non-empty 'reason'"),
    "blank-reason": ('[[allow]]\npattern = "test_gpu.py::*"\nreason = "  "\n', "needs a non-empty 'reason'"),
    "no-pattern": (f'[[allow]]\nreason = "{REASON}"\n', "needs a non-empty 'pattern'"),
    "unknown-key": (f'[[allow]]\npattern = "a"\nreason = "{REASON}"\nnodeid = "b"\n', "unknown keys"),
    "not-toml": ("[[allow]\n", "not valid TOML"),
    "flat-table": (f'[skip]\npattern = "a"\nreason = "{REASON}"\n', "unknown top-level keys"),
}


@pytest.mark.parametrize("case", sorted(BAD_ALLOWLISTS))
@pytest.mark.parametrize("ci", [True, False], ids=["ci", "local"])
def test_bad_allow_list_is_an_error(tmp_path, case, ci):
    body, message = BAD_ALLOWLISTS[case]
    r = run_pytest(tmp_path, {"test_ok.py": "def test_ok():\n    pass\n"}, ci, body)
    assert r.returncode == pytest.ExitCode.USAGE_ERROR, r.stdout + r.stderr
    assert message in r.stderr


def test_allow_list_given_but_missing_is_an_error(tmp_path):
    r = run_pytest(tmp_path, {"test_ok.py": "def test_ok():\n    pass\n"}, True, None,
                   "--skip-allowlist", str(tmp_path / "nope.toml"))
    assert r.returncode == pytest.ExitCode.USAGE_ERROR and "does not exist" in r.stderr


def test_repository_allow_list_is_valid():
    sys.path.insert(0, str(TESTS))
    import ci_guard

    entries = ci_guard.load_allowlist(ci_guard.DEFAULT_ALLOWLIST, required=True)
    for e in entries:
        assert len(e.reason.split()) >= 3, f"{e.pattern}: say which hardware CI lacks: {e.reason!r}"
