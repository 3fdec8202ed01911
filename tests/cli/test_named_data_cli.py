"""The command line with a program whose weights are in a .ptd: run picks up
model.ptd beside model.pte and says so, --data overrides it, a missing or
wrong weights file fails with what to pass; inspect lists the named data
(key, bytes, file, partitions using it) and each partition's engine kind."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import named_data_programs as nd
from executorch_tensorrt import cli

W, B = nd.weights()
KEY = nd.key_of(W.tobytes())


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli_named_data")
    pte, ptd = nd.write_program(out / "model.pte", nd.named_blob(W, B), {KEY: W.tobytes()},
                                external=True)
    assert ptd == out / "model.ptd"
    return pte, ptd


def main(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def printed_values(out: str) -> list[float]:
    line = next(l for l in out.splitlines() if l.strip().startswith("values:"))
    return [float(v) for v in line.split(":", 1)[1].split(",")]


def test_run_picks_up_the_ptd_beside_the_program(program, capsys, allow_fallback):
    pte, ptd = program
    code, out, err = main(capsys, "run", str(pte), "--fill", "ones")
    assert code == 0, err
    assert f"note: loading the weights in {ptd} beside the program (--data overrides)" in err
    expected = (np.ones(nd.X_SHAPE, np.float32) @ W + B).ravel()
    got = printed_values(out)  # the first values
    np.testing.assert_allclose(got, expected[:len(got)], atol=1e-4)


def test_data_overrides_and_missing_ptd_says_what_to_pass(program, capsys, allow_fallback,
                                                          tmp_path):
    pte, ptd = program
    alone = tmp_path / "model.pte"
    shutil.copy(pte, alone)
    code, out, err = main(capsys, "run", str(alone), "--fill", "ones")
    assert code == 3, out + err
    assert KEY in err and "weight 'W'" in err and f"{tmp_path / 'model.ptd'}" in err, err
    assert "pass it with --data PATH" in err
    elsewhere = tmp_path / "weights.ptd"
    shutil.copy(ptd, elsewhere)
    code, out, err = main(capsys, "run", str(alone), "--fill", "ones", "--data", str(elsewhere))
    assert code == 0 and "beside the program" not in err, err


def test_data_that_is_not_a_ptd_is_a_usage_error(program, capsys, tmp_path):
    pte, _ = program
    code, _, err = main(capsys, "run", str(pte), "--data", str(pte))
    assert code == 2 and "is an ExecuTorch program (.pte), not its weights" in err, err
    code, _, err = main(capsys, "run", str(pte), "--data", str(tmp_path / "none.ptd"))
    assert code == 2 and "cannot be read" in err, err


def test_truncated_ptd_is_a_clean_run_error(program, capsys, allow_fallback, tmp_path):
    pte, ptd = program
    cut = tmp_path / "cut.ptd"
    cut.write_bytes(ptd.read_bytes()[:100])
    code, _, err = main(capsys, "run", str(pte), "--data", str(cut))
    assert code == 3 and "the .ptd is truncated or not an ExecuTorch data file" in err, err


def test_inspect_lists_named_data_and_engine_kinds(program, capsys, tmp_path):
    pte, _ = program
    code, out, err = main(capsys, "inspect", str(pte))
    assert code == 0, err
    assert "TensorRTBackend: engine none, 0 bytes" in out
    assert "weights in named data (1, 192 bytes)" in out
    assert "named data: 1 keys, 192 B" in out and "in model.ptd: 1 keys, 192 B" in out
    assert f"{KEY}  192 bytes  in model.ptd  used by forward[0] W" in out
    # Without its .ptd, the key is reported missing with the remedy.
    alone = tmp_path / "model.pte"
    shutil.copy(pte, alone)
    code, out, _ = main(capsys, "inspect", str(alone))
    assert code == 0 and f"{KEY}  MISSING  in missing  used by forward[0] W" in out
    assert "pass the program's .ptd (--data)" in out


def test_inspect_refuses_a_truncated_ptd(program, capsys, tmp_path):
    pte, ptd = program
    for cut in (10, 100):
        bad = tmp_path / f"cut{cut}.ptd"
        bad.write_bytes(ptd.read_bytes()[:cut])
        code, _, err = main(capsys, "inspect", str(pte), "--data", str(bad))
        assert code == 2 and ("truncated" in err or "not an ExecuTorch data file" in err), err


def test_profile_loads_the_ptd(program, capsys, allow_fallback):
    pte, ptd = program
    code, out, err = main(capsys, "profile", str(pte), "--calls", "1")
    assert code == 0, err
    assert f"loading the weights in {ptd}" in err and "partition 0" in out, out + err


def test_prepare_builds_for_the_target_and_inspect_sees_it(program, capsys, tmp_path):
    pte, _ = program
    cache = tmp_path / "engines"
    code, out, err = main(capsys, "prepare", str(pte), "--cache", str(cache))
    if "no GPU here" in err:  # this machine: the target must be named
        assert code == 3 and "--target SM89" in err
    code, out, err = main(capsys, "inspect", str(pte), "--target", "SM89", "--cache", str(cache))
    assert code == 0 and "forward[0]: BUILDS: ships no engine: the first load builds it" in out
    code, out, err = main(capsys, "prepare", str(pte), "--target", "SM89", "--cache", str(cache))
    assert code == 0, err
    assert "1 TensorRT partitions, 1 built" in out
    assert f"EXECUTORCH_TENSORRT_CACHE_DIR={cache}" in out
    assert "[1/1] forward[0]: built" in err  # progress, on stderr
    code, out, err = main(capsys, "inspect", str(pte), "--target", "SM89", "--cache", str(cache))
    assert code == 0 and "forward[0]: no build: ships no engine; a prepared engine for SM89" in out
    assert "build measured:" in out


def test_prepare_refuses_a_bad_target_and_a_missing_ptd(program, capsys, tmp_path):
    pte, _ = program
    code, _, err = main(capsys, "prepare", str(pte), "--target", "89", "--cache", str(tmp_path))
    assert code == 2 and "'89' is not a compute capability such as SM89" in err
    code, _, err = main(capsys, "inspect", str(pte), "--target", "sm8.9")
    assert code == 2 and "is not a compute capability" in err
    alone = tmp_path / "model.pte"
    shutil.copy(pte, alone)  # without its .ptd: the weights to build with are missing
    code, _, err = main(capsys, "prepare", str(alone), "--target", "SM89", "--cache",
                        str(tmp_path / "c"))
    assert code == 2 and "pass the .ptd" in err
    assert not list(tmp_path.glob("c/*.engine"))  # nothing built, nothing stored


def test_prepare_reads_weights_stored_in_the_pte(tmp_path, capsys):
    pte, ptd = nd.write_program(tmp_path / "inside.pte", nd.named_blob(W, B), {KEY: W.tobytes()},
                                external=False)
    assert ptd is None
    cache = tmp_path / "engines"
    code, out, err = main(capsys, "prepare", str(pte), "--target", "SM89", "--cache", str(cache))
    assert code == 0 and "1 built" in out, err
    code, out, _ = main(capsys, "inspect", str(pte), "--target", "SM89", "--cache", str(cache))
    assert code == 0 and "no build: ships no engine; a prepared engine for SM89" in out
