"""`.expected` files and `executorch-tensorrt verify`: each check shown able to fail."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import executorch_tensorrt
from executorch_tensorrt.errors import ExportError
from executorch_tensorrt.tools.expected import (
    ExpectedError, read_expected, reference_outputs, write_expected)

GOOD = "output[0] shape=[2,3]\n  values: 1.0000, 2.0000, 3.0000, 4.0000, 5.0000, 6.0000\n"


@pytest.fixture
def expected_file(tmp_path):
    return write_expected(tmp_path / "m.expected",
                          [torch.arange(1, 7, dtype=torch.float32).reshape(2, 3)])


def verify(expected, text, tolerance="1e-4"):
    return subprocess.run(
        [sys.executable, "-m", "executorch_tensorrt.cli", "verify", str(expected),
         "--tolerance", tolerance], input=text, capture_output=True, text=True,
        env={**__import__("os").environ, "EXECUTORCH_TENSORRT_SKIP_REGISTRATION": "1"})


def test_correct_output_passes(expected_file):
    r = verify(expected_file, GOOD)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK" in r.stdout


@pytest.mark.parametrize("text, why", [
    (GOOD.replace("3.0000", "3.0100"), "largest difference"),
    (GOOD.replace("shape=[2,3]", "shape=[3,2]"), "shape"),
    ("output[0] shape=[2,3]\n", "no values line"),
    ("", "printed 0 outputs"),
    (GOOD.replace("6.0000", ""), "values printed"),
])
def test_wrong_output_fails(expected_file, text, why):
    r = verify(expected_file, text)
    assert r.returncode == 1, r.stdout + r.stderr
    assert why in r.stdout


def test_tolerance_boundaries(expected_file):
    inside = GOOD.replace("2.0000", "2.0004")
    assert verify(expected_file, inside, "1e-3").returncode == 0
    assert verify(expected_file, inside, "1e-4").returncode == 1


def test_zero_tolerance_means_exact_text(expected_file):
    assert verify(expected_file, GOOD, "0").returncode == 0
    r = verify(expected_file, GOOD.replace("5.0000", "5.0001"), "0")
    assert r.returncode == 1 and "exactly" in r.stdout


def test_two_line_form_from_other_tools(tmp_path):
    path = tmp_path / "other.expected"
    path.write_text("[2,3]\n0.5\n")
    (out,) = read_expected(path)
    assert out.shape == [2, 3] and out.values == [0.5] * 6
    text = "output[0] shape=[2,3]\n  values: " + ", ".join(["0.5000"] * 6) + "\n"
    assert verify(path, text, "0").returncode == 0
    assert verify(path, text.replace("0.5000", "0.6000", 1), "1e-4").returncode == 1


@pytest.mark.parametrize("content", ["[2,x]\n1\n", "[2,3]\nabc\n", "{not json", "1\n2\n3\n"])
def test_malformed_expected_files_are_named(tmp_path, content):
    path = tmp_path / "bad.expected"
    path.write_text(content)
    with pytest.raises(ExpectedError):
        read_expected(path)
    r = verify(path, GOOD)
    assert r.returncode == 2 and "error:" in r.stderr


def test_large_outputs_store_prefix_and_statistics(tmp_path):
    big = torch.linspace(0, 1, 10000)
    (out,) = read_expected(write_expected(tmp_path / "big.expected", [big]))
    assert not out.complete and len(out.values) == 256
    assert out.stats["max"] == pytest.approx(1.0) and out.stats["mean"] == pytest.approx(0.5)


def test_non_finite_reference_is_an_export_error(tmp_path):
    class Log(torch.nn.Module):
        def forward(self, x):
            return torch.log(x - 1)  # log(0) = -inf for inputs of 1.0

    with pytest.raises(ExpectedError, match="not finite"):
        reference_outputs(Log(), (torch.randn(3),))
    path = tmp_path / "log.pte"
    with pytest.raises(ExportError, match="not finite"):
        executorch_tensorrt.export(Log(), (torch.rand(3) + 2,), path, progress=None)
    assert not path.exists()


def test_python_runner_output_verifies_against_export(exported, allow_fallback):
    _, _, path = exported("cnn")
    run = subprocess.run([sys.executable, "-m", "executorch_tensorrt.cli", "run", str(path)],
                         capture_output=True, text=True,
                         env={**__import__("os").environ,
                              "EXECUTORCH_TENSORRT_FALLBACK": "onnxruntime"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("output[0] shape=[2,10]")
    assert verify(path, run.stdout).returncode == 0
    assert verify(path, run.stdout.replace("0.", "9.", 1)).returncode == 1
