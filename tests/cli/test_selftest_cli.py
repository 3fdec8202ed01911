"""`executorch-tensorrt selftest` on a machine where TensorRT cannot run
engines: the fallback is compared with eager, each program says why TensorRT
did not run (exit 5), everything stays inside the output folder, a failing
case is exit 1 and named, and an unknown case is a usage error."""
from __future__ import annotations

import json

from executorch_tensorrt.cli import selftest as st
from helpers import cli_main


def test_selftest_compares_the_fallback_and_says_why_tensorrt_did_not_run(tmp_path,
                                                                          monkeypatch):
    monkeypatch.delenv("EXECUTORCH_TENSORRT_FALLBACK", raising=False)
    user_cache = tmp_path / "user-cache"
    monkeypatch.setenv("EXECUTORCH_TENSORRT_CACHE_DIR", str(user_cache))
    out = tmp_path / "out"
    code, stdout, err = cli_main("selftest", "--out", out, "--cases", "add,int8_weight_only",
                                 "--calls", "3")
    assert code == 5, (stdout, err)
    report = json.loads((out / "selftest.json").read_text())
    assert report["all_ok"] and not report["tensorrt_ran"]
    assert [c["name"] for c in report["cases"]] == ["add", "int8_weight_only"]
    for case in report["cases"]:
        assert case["exported"] and case["fallback_ran"] and not case["tensorrt_ran"]
        assert "TensorRTBackend init" in case["tensorrt_error"], case["tensorrt_error"]
        (eager,) = case["comparisons"]
        assert eager["against"] == "eager (fallback)" and eager["ok"], eager
    assert "the same cause as above" in stdout
    # Only the output folder was written; the user's cache was not even made.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in out.iterdir()) == ["add", "int8_weight_only", "selftest.json"]
    assert not [p for p in out.rglob(".etrt-*")]


def test_a_case_that_fails_is_exit_1_and_named(tmp_path, monkeypatch):
    def broken(folder):
        raise RuntimeError("planted: this case cannot export")

    planted = st.Case("planted", "a case whose export fails", 1e-3, broken)
    monkeypatch.setattr(st, "CASES", (planted,))
    monkeypatch.setattr(st, "CASE_NAMES", ("planted",))
    code, stdout, _ = cli_main("selftest", "--out", tmp_path / "out")
    assert code == 1
    assert "planted: EXPORT FAILED: RuntimeError: planted: this case cannot export" in stdout
    report = json.loads((tmp_path / "out" / "selftest.json").read_text())
    assert report["cases"][0]["ok"] is False and not report["all_ok"]


def test_an_unknown_case_is_a_usage_error(tmp_path):
    code, _, err = cli_main("selftest", "--out", tmp_path / "out", "--cases", "add,nosuch")
    assert code == 2 and "unknown case nosuch" in err and "decoder" in err
