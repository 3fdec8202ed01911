"""The C++ reference runner (examples/cpp_runner), built with CMake against
the installed packages (both routes of executorch's package), runs a CNN
exported here with EXECUTORCH_TENSORRT_FALLBACK=onnxruntime and prints
exactly what the Python runner (`executorch-tensorrt run`) prints, on the
same inputs (stored example inputs, the pattern, or a tensor file), and
writes whole outputs that `executorch-tensorrt verify` compares.

The runner process has no Python of its own: its TensorRT partitions run on
the executors of the interpreter the adapter embeds (docs/cpp.md), so this
is also the end-to-end test of the embedded interpreter.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import numpy as np

from test_cmake_package import (ROUTES, REPO, child_env, cmake_for, configure_and_build,
                                needed, prefix_path_args)
from executorch_tensorrt.program import tensor_file as tf
from helpers import FALLBACK

RUNNER_SRC = REPO / "examples" / "cpp_runner"

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


def verify(reference: Path, actual: Path | str, *options: str) -> subprocess.CompletedProcess:
    """`executorch-tensorrt verify` of a tensor file, or of printed text (a str)."""
    text = actual if isinstance(actual, str) else None
    args = [] if text is not None else [str(actual)]
    return subprocess.run([sys.executable, "-m", "executorch_tensorrt", "verify", str(reference),
                           *args, *options], input=text, capture_output=True, text=True,
                          env=child_env(EXECUTORCH_TENSORRT_SKIP_REGISTRATION="1"), timeout=300)


def python_runner(path: Path, *options: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "executorch_tensorrt.cli", "run", str(path),
                           *options],
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
def test_runner_output_verifies_against_eager(runner, exported, name, tmp_path):
    """The issue's two programs: cos(erfinv(tanh(x))) runs because TensorRT
    takes erfinv (the PyPI runtime has no kernel for it)."""
    _, _, path = exported(name)
    outputs = tmp_path / f"{name}-cpp.etensors"
    proc = run(runner, "--model_path", str(path), "--outputs", str(outputs), **FALLBACK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "note: the example inputs stored in" in proc.stderr, proc.stderr
    assert proc.stdout == python_runner(path), proc.stdout
    checked = verify(path, outputs)
    assert checked.returncode == 0 and "in every element" in checked.stdout, checked.stdout + checked.stderr
    assert verify(path, proc.stdout).returncode == 0
    # verify can fail: one element, past the printed ones, off by 0.01.
    (out,) = tf.read_tensors(outputs)
    changed = out.array.copy()
    changed.reshape(-1)[-1] += 0.01
    wrong = tf.write_tensors(tmp_path / "wrong.etensors", [tf.Tensor("output.0", out.dtype, changed)])
    failed = verify(path, wrong)
    assert failed.returncode == 1 and "1 of" in failed.stdout, failed.stdout


@pytest.mark.parametrize("fill", ["pattern", "ones"])
def test_runner_fills_like_the_python_runner(runner, cnn, fill):
    proc = run(runner, "--model_path", str(cnn), "--fill", fill, **FALLBACK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == python_runner(cnn, "--fill", fill)


def test_runner_reads_an_inputs_file(runner, exported, tmp_path):
    _, _, path = exported("add")
    given = tf.write_tensors(tmp_path / "in.etensors", [
        tf.Tensor("input.0", "float32", np.arange(6, dtype=np.float32).reshape(2, 3))])
    proc = run(runner, "--model_path", str(path), "--inputs", str(given), **FALLBACK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ("output[0] shape=[2,3]\n"
                           "  values: 1.0000, 2.0000, 3.0000, 4.0000, 5.0000, 6.0000\n")
    bad = tmp_path / "bad.etensors"
    bad.write_bytes(given.read_bytes()[:-5])
    proc = run(runner, "--model_path", str(path), "--inputs", str(bad), **FALLBACK)
    assert proc.returncode == 2 and "truncated" in proc.stderr, proc.stderr


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


# ---- steady state: Python executor entries over identical calls ----------------

# A test-only executor factory for EXECUTORCH_TENSORRT_TEST_STAND_IN (runtime/
# testing.py): the real onnxruntime executor, saying each call that enters it.
COUNTING_FACTORY = """
import sys
from executorch_tensorrt.runtime.onnxruntime.executor import OnnxRuntimeExecutor

class Counted(OnnxRuntimeExecutor):
    def execute(self, args, num_args=None):
        print("[counted] executor entry", file=sys.stderr, flush=True)
        return super().execute(args, num_args)

def tensorrt_executor(blob, named_data, device):
    return Counted(blob, named_data)
"""


@pytest.fixture(scope="module")
def counting_factory(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("counting-factory")
    (folder / "counting_factory.py").write_text(COUNTING_FACTORY)
    return folder


def entries(runner: Path, cnn: Path, folder: Path, *args: str, **env: str):
    proc = run(runner, "--model_path", str(cnn), *args, PYTHONPATH=str(folder),
               EXECUTORCH_TENSORRT_TEST_STAND_IN="counting_factory", **env)
    return proc, proc.stderr.count("[counted] executor entry")


def test_steady_state_calls_enter_no_python(runner, cnn, counting_factory, python_runner_output):
    """1 + 5 x 40 identical calls through Method::execute (--repeat): none
    enters the Python executor (the onnxruntime executor hands the adapter a
    plan at init, so even the first call runs in C++). With plans off, every
    call enters it."""
    proc, n = entries(runner, cnn, counting_factory, "--repeat", "40")
    assert proc.returncode == 0, proc.stderr
    assert "FAKE TensorRT engine: EXECUTORCH_TENSORRT_TEST_STAND_IN=counting_factory" in proc.stderr
    assert "timing: 40 calls back to back, best of 5 runs:" in proc.stderr, proc.stderr
    assert proc.stdout == python_runner_output  # the last call's outputs
    assert n == 0, proc.stderr
    proc, n = entries(runner, cnn, counting_factory, "--repeat", "40",
                      EXECUTORCH_TENSORRT_NATIVE_PLAN="0")
    assert proc.returncode == 0, proc.stderr
    assert n == 1 + 5 * 40


def test_stand_in_and_repeat_refusals(runner, cnn, counting_factory):
    proc, _ = entries(runner, cnn, counting_factory, "--repeat", "0")
    assert proc.returncode == 2 and "--repeat takes a number of calls" in proc.stderr, proc.stderr
    proc = run(runner, "--model_path", str(cnn), EXECUTORCH_TENSORRT_TEST_STAND_IN="no_such_mod")
    assert proc.returncode != 0
    assert "EXECUTORCH_TENSORRT_TEST_STAND_IN='no_such_mod' (a test-only stand-in engine) names " \
           "no importable module" in proc.stderr, proc.stderr


# ---- device-resident programs -------------------------------------------------


@pytest.fixture(scope="module")
def resident_cnn(exported) -> Path:
    _, _, path = exported("cnn", device_resident=True)
    return path


def _cuda_reason() -> str | None:
    from executorch_tensorrt.runtime.cuda.probe import cuda_unavailable_reason

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
    assert proc.returncode == 3 and proc.stdout == "", proc.stdout + proc.stderr
    assert "keeps input[0] on cuda:0, output[0] on cuda:0" in proc.stderr, proc.stderr
    assert "examples/cpp_runner" in proc.stderr, proc.stderr


def test_resident_program_on_a_gpu(runner, resident_cnn):
    """Inputs and outputs in CUDA memory from the runner, TensorRT partitions
    on the engine or the onnxruntime fallback, result equal to eager. The
    same steps ran on the H200 through tools/gpu/h200_device_resident.sh."""
    reason = _cuda_reason()
    if reason is not None:
        pytest.skip(f"needs an NVIDIA GPU: {reason}")
    proc = run(runner, "--model_path", str(resident_cnn), **FALLBACK)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for what in ("input 0", "output 0"):
        assert f"note: {what} is in cuda:0 memory" in proc.stderr, proc.stderr
    checked = verify(resident_cnn, proc.stdout)
    assert checked.returncode == 0, checked.stdout + checked.stderr
