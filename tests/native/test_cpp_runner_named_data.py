"""The C++ reference runner with a program whose TensorRT weights are in a
.ptd: Module(pte, ptd) hands ExecuTorch the data map, the adapter reads the
weights from it; model.ptd beside model.pte is picked up (and said), --data
overrides it, a missing .ptd fails naming the key and the file to pass, a
truncated one fails cleanly."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import named_data_programs as nd
from helpers import FALLBACK
from test_cmake_package import (ROUTES, REPO, child_env, cmake_for, configure_and_build,
                                prefix_path_args)

W, B = nd.weights()
KEY = nd.key_of(W.tobytes())


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    build = tmp_path_factory.mktemp("cpp-runner-named-data")
    route = ROUTES[-1]  # test_cpp_runner.py builds both routes; one is enough here
    configure_and_build(cmake_for(route), REPO / "examples" / "cpp_runner", build,
                        *prefix_path_args())
    return build / "etrt_runner"


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpp_named_data")
    return nd.write_program(out / "model.pte", nd.named_blob(W, B), {KEY: W.tobytes()},
                            external=True)


def run(runner, *args):
    return subprocess.run([str(runner), *args, "--fill", "ones"], capture_output=True, text=True,
                          env=child_env(**FALLBACK), timeout=300)


def values(stdout: str) -> list[float]:
    line = next(l for l in stdout.splitlines() if l.strip().startswith("values:"))
    return [float(v) for v in line.split(":", 1)[1].split(",")]


def test_ptd_beside_the_program_is_used(runner, program):
    pte, ptd = program
    proc = run(runner, "--model_path", str(pte))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"note: loading the weights in {ptd} beside the program" in proc.stderr
    got = values(proc.stdout)  # the first values
    np.testing.assert_allclose(got, (np.ones(nd.X_SHAPE, np.float32) @ W + B).ravel()[:len(got)],
                               atol=1e-4)


def test_data_overrides_missing_ptd_names_key_and_file(runner, program, tmp_path):
    pte, ptd = program
    alone = tmp_path / "alone.pte"
    shutil.copy(pte, alone)
    proc = run(runner, "--model_path", str(alone))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert KEY in proc.stderr and "Error::NotFound" in proc.stderr, proc.stderr
    assert f"export writes {tmp_path / 'alone.ptd'}), pass it with --data PATH" in proc.stderr
    proc = run(runner, "--model_path", str(alone), "--data", str(ptd))
    assert proc.returncode == 0 and "beside the program" not in proc.stderr, proc.stderr
    cut = tmp_path / "cut.ptd"
    cut.write_bytes(ptd.read_bytes()[:100])
    proc = run(runner, "--model_path", str(alone), "--data", str(cut))
    assert proc.returncode == 1 and "with the weights file" in proc.stderr, proc.stderr
    assert "InvalidExternalData" in proc.stderr
