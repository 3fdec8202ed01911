"""The C++ reference runner (examples/cpp_runner), built with CMake against
the installed packages (both routes of executorch's package), runs a CNN
exported here with EXECUTORCH_TENSORRT_FALLBACK=onnxruntime and prints
exactly what the Python runner (`executorch-tensorrt run`) prints.

The runner process has no Python of its own: its TensorRT partitions run on
the executors of the interpreter the adapter embeds (docs/cpp.md), so this
is also the end-to-end test of the embedded interpreter.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from test_cmake_package import (ROUTES, REPO, child_env, cmake_for, configure_and_build,
                                needed, prefix_path_args)
from test_expected_verify import verify

RUNNER_SRC = REPO / "examples" / "cpp_runner"
FALLBACK = {"EXECUTORCH_TENSORRT_FALLBACK": "onnxruntime"}

_runners: dict = {}


@pytest.fixture(scope="module", params=ROUTES)
def runner(request, tmp_path_factory) -> Path:
    route = request.param
    if route not in _runners:
        build = tmp_path_factory.mktemp(f"cpp-runner-{route}")
        configure_and_build(cmake_for(route), RUNNER_SRC, build, *prefix_path_args())
        _runners[route] = build / "etrt_runner"
    return _runners[route]


@pytest.fixture(scope="module")
def cnn(exported) -> Path:
    _, _, path = exported("cnn")
    return path


def python_runner(path: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "executorch_tensorrt.cli", "run", str(path)],
                          capture_output=True, text=True, env=child_env(**FALLBACK), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("output[0] shape=["), proc.stdout
    return proc.stdout


@pytest.fixture(scope="module")
def python_runner_output(cnn) -> str:
    return python_runner(cnn)


def run(runner: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(runner), *args], capture_output=True, text=True,
                          env=child_env(**env), timeout=300)


def test_runner_links_the_adapter(runner):
    assert "libexecutorch_backend_tensorrt.so" in needed(runner)
    assert not [n for n in needed(runner) if n.startswith("libpython")], needed(runner)


def test_runner_matches_python_runner(runner, cnn, python_runner_output):
    proc = run(runner, "--model_path", str(cnn), **FALLBACK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == python_runner_output, (proc.stdout, python_runner_output, proc.stderr)
    # The values came through the embedded interpreter's onnxruntime executor.
    assert "running TensorRT partitions with onnxruntime" in proc.stderr, proc.stderr


@pytest.mark.parametrize("name", ["cnn", "erfinv"])
def test_runner_output_verifies_against_eager(runner, exported, name):
    """The issue's two programs: cos(erfinv(tanh(x))) runs because TensorRT
    takes erfinv (the PyPI runtime has no kernel for it)."""
    _, _, path = exported(name)
    proc = run(runner, "--model_path", str(path), **FALLBACK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == python_runner(path), proc.stdout
    checked = verify(path, proc.stdout)
    assert checked.returncode == 0 and checked.stdout.startswith("OK"), checked.stdout + checked.stderr
    # verify can fail: a value off by more than the tolerance.
    first = proc.stdout.split("values: ", 1)[1].split(",", 1)[0]
    wrong = proc.stdout.replace(first, f"{float(first) + 0.01:.4f}", 1)
    assert verify(path, wrong).returncode == 1


def test_runner_method_option(runner, cnn, python_runner_output):
    proc = run(runner, f"--model_path={cnn}", "--method", "forward", **FALLBACK)
    assert proc.returncode == 0 and proc.stdout == python_runner_output, proc.stdout + proc.stderr


def test_runner_without_fallback_reports_cause(runner, cnn):
    """No GPU here: loading fails with the executor's cause, via etrt_last_error()."""
    proc = run(runner, "--model_path", str(cnn))
    assert proc.returncode != 0, proc.stdout
    assert proc.stdout == ""
    assert "error: cannot load method 'forward'" in proc.stderr, proc.stderr
    assert "EXECUTORCH_TENSORRT_FALLBACK=onnxruntime" in proc.stderr, proc.stderr


def test_runner_missing_model(runner, tmp_path):
    missing = tmp_path / "nope.pte"
    proc = run(runner, "--model_path", str(missing))
    assert proc.returncode != 0
    assert f"error: {missing} does not exist" in proc.stderr, proc.stderr


def test_runner_invalid_model(runner, tmp_path):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"this is not an ExecuTorch program" * 10)
    proc = run(runner, "--model_path", str(bad))
    assert proc.returncode != 0
    assert f"error: cannot load {bad}" in proc.stderr and "InvalidProgram" in proc.stderr, proc.stderr


def test_runner_unknown_method(runner, cnn):
    proc = run(runner, "--model_path", str(cnn), "--method", "nosuch", **FALLBACK)
    assert proc.returncode != 0
    assert "error: cannot load method 'nosuch'" in proc.stderr, proc.stderr


def test_runner_usage(runner):
    proc = run(runner)
    assert proc.returncode != 0 and "--model_path is required" in proc.stderr, proc.stderr
    proc = run(runner, "--bogus")
    assert proc.returncode != 0 and "unknown argument --bogus" in proc.stderr, proc.stderr


# ---- device-resident programs -------------------------------------------------


@pytest.fixture(scope="module")
def resident_cnn(exported) -> Path:
    _, _, path = exported("cnn", device_resident=True)
    return path


def _cuda_reason() -> str | None:
    from executorch_tensorrt.runtime.cuda_probe import cuda_unavailable_reason

    return cuda_unavailable_reason()


def test_resident_program_without_cuda_says_why(runner, resident_cnn):
    """On a machine without CUDA the runner stops at the first device
    allocation, with the allocator's cause, before running anything."""
    if _cuda_reason() is None:
        pytest.skip("this machine has CUDA; the GPU test below covers it")
    proc = run(runner, "--model_path", str(resident_cnn), **FALLBACK)
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout + proc.stderr
    assert "error: cannot allocate 24576 bytes on cuda:0 for input 0" in proc.stderr, proc.stderr
    assert "no CUDA driver" in proc.stderr, proc.stderr


def test_resident_program_without_allocator_says_why(runner, resident_cnn):
    proc = run(runner, "--model_path", str(resident_cnn),
               EXECUTORCH_TENSORRT_NO_CUDA_ALLOCATOR="1", **FALLBACK)
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout + proc.stderr
    assert ("error: input 0 is kept in cuda:0 memory by this program, but no device allocator"
            in proc.stderr), proc.stderr


def test_python_runner_refuses_resident_program(resident_cnn):
    proc = subprocess.run([sys.executable, "-m", "executorch_tensorrt.cli", "run",
                           str(resident_cnn)], capture_output=True, text=True,
                          env=child_env(**FALLBACK), timeout=300)
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout + proc.stderr
    assert "keeps input[0] on cuda:0, output[0] on cuda:0" in proc.stderr, proc.stderr
    assert "examples/cpp_runner" in proc.stderr, proc.stderr


def test_resident_program_on_a_gpu(runner, resident_cnn):
    """Inputs and outputs in CUDA memory from the runner, TensorRT partitions
    on the engine or the onnxruntime fallback, result equal to eager. The
    same steps ran on the H200 through tools/h200_device_resident.sh."""
    reason = _cuda_reason()
    if reason is not None:
        pytest.skip(f"needs an NVIDIA GPU: {reason}")
    proc = run(runner, "--model_path", str(resident_cnn), **FALLBACK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for what in ("input 0", "output 0"):
        assert f"note: {what} is in cuda:0 memory" in proc.stderr, proc.stderr
    checked = verify(resident_cnn, proc.stdout)
    assert checked.returncode == 0, checked.stdout + checked.stderr
