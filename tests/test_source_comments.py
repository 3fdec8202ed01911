"""Comments and docstrings under src/ name only modules that exist, cite no
issue numbers and no test machines (source_comments.py); checked on the real
tree and on a planted tree, so the checker can fail."""
from __future__ import annotations

from pathlib import Path

from source_comments import Checker

REPO = Path(__file__).resolve().parents[1]


def test_source_comments_name_what_exists():
    assert Checker(REPO).all_problems() == []


def test_checker_reports_planted_references(tmp_path):
    pkg = tmp_path / "src" / "fakepkg"
    (pkg / "runtime").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "llm.md").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "runtime" / "__init__.py").write_text("")
    (pkg / "runtime" / "state.py").write_text("")
    (pkg / "runtime" / "run.py").write_text(
        '"""Runs a plan (state.py, runtime/state.py, docs/llm.md, fakepkg.runtime.state,\n'
        "tests/runtime/test_*_gpu.py, runtime.State).\n\n"
        'Was engine_portability.py (issue 19); see fakepkg.runtime.ort_capi."""\n'
        "x = 1  # as the H200 showed (#24)\n"
        'MESSAGE = "issue 7 in a string is no comment"\n')
    found = Checker(tmp_path, "fakepkg").all_problems()
    assert sorted(found) == [
        "src/fakepkg/runtime/run.py:4: cites an issue (issue 19)",
        "src/fakepkg/runtime/run.py:4: names a missing module engine_portability.py",
        "src/fakepkg/runtime/run.py:4: names a missing module fakepkg.runtime.ort_capi",
        "src/fakepkg/runtime/run.py:5: cites an issue (#24)",
        "src/fakepkg/runtime/run.py:5: names a test machine (H200)",
    ]
