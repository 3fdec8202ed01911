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


def test_a_program_that_cannot_run_names_the_cli_error_not_a_trace_line(tmp_path):
    """The fallback child's failure is reported by its `error:` line (not the
    last line of whatever it printed), and a torch error's C++ backtrace is cut."""
    from executorch_tensorrt.cli.runner import error_text

    programs = tmp_path / "programs"
    code, _, err = cli_main("selftest", "--out", programs, "--cases", "add", "--export-only")
    assert code == 0, err
    pte = programs / "add" / "add.pte"
    data = bytearray(pte.read_bytes())
    data[8:64] = bytes(56)  # the flatbuffer's root table: the program cannot load
    pte.write_bytes(bytes(data))
    code, stdout, _ = cli_main("selftest", "--out", tmp_path / "out", "--programs", programs,
                               "--cases", "add", "--calls", "1")
    case = json.loads((tmp_path / "out" / "selftest.json").read_text())["cases"][0]
    assert code == 1 and not case["fallback_ran"], stdout
    assert case["fallback_error"].startswith("ExecuTorch cannot load"), case["fallback_error"]
    for command in ("inspect", "doctor", "prepare"):  # our own readers refuse it by name too
        code, out, err = cli_main(command, pte)
        assert code in (2, 3) and "damaged" in err and "export it again" in err, (command, err)
    torch_error = RuntimeError("tensor does not have a device\nException raised from "
                               "device_default at TensorImpl.h:1303\nframe #0: c10::Error")
    assert error_text(torch_error) == "tensor does not have a device"
