"""The reference export writes (`.expected` + `.expected.etensors`) and
`executorch-tensorrt verify`: each check shown able to fail."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import executorch_tensorrt
from executorch_tensorrt.program import tensor_file as tf
from executorch_tensorrt.program.references import (
    ExpectedError,
    ReferenceWarning,
    read_expected,
    tensors_path,
    write_reference,
)

GOOD = "output[0] shape=[2,3]\n  values: 1.0000, 2.0000, 3.0000, 4.0000, 5.0000, 6.0000\n"
ENV = {**os.environ, "EXECUTORCH_TENSORRT_SKIP_REGISTRATION": "1"}


@pytest.fixture
def reference(tmp_path):
    """A reference for m.pte: one input, output arange(1, 7) as [2, 3]."""
    out = torch.arange(1, 7, dtype=torch.float32).reshape(2, 3)
    write_reference(tmp_path / "m.pte", [torch.zeros(2)], [out], "example inputs")
    return tmp_path / "m.pte"


def verify(expected, actual=None, *options, text=None):
    args = [str(expected)] + ([str(actual)] if actual is not None else [])
    return subprocess.run([sys.executable, "-m", "executorch_tensorrt", "verify", *args,
                           *options], input=text, capture_output=True, text=True, env=ENV)


def outputs_file(path, *arrays):
    return tf.write_tensors(path, [tf.Tensor(f"output.{i}", "float32", np.asarray(a, np.float32))
                                   for i, a in enumerate(arrays)])


# ---- whole-tensor comparison --------------------------------------------------

def test_full_outputs_match(reference, tmp_path):
    got = outputs_file(tmp_path / "got.etensors", np.arange(1, 7).reshape(2, 3))
    r = verify(reference, got)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "in every element" in r.stdout


def test_one_element_beyond_tolerance_is_found(reference, tmp_path):
    """The last element is one the printed-text check never sees."""
    values = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    values[1, 2] += 0.01
    r = verify(reference, outputs_file(tmp_path / "got.etensors", values))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 of 6 elements differ" in r.stdout and "worst at [1, 2]: expected 6" in r.stdout


def test_atol_and_rtol_boundaries(reference, tmp_path):
    values = np.arange(1, 7, dtype=np.float64).reshape(2, 3)
    values[1, 2] = 6 + 6e-3  # |diff| 6e-3 = rtol 1e-3 x |6|
    got = outputs_file(tmp_path / "got.etensors", values)
    assert verify(reference, got, "--atol", "1e-4", "--rtol", "1.1e-3").returncode == 0
    assert verify(reference, got, "--atol", "1e-4", "--rtol", "0.9e-3").returncode == 1
    assert verify(reference, got, "--atol", "7e-3", "--rtol", "0").returncode == 0


def test_shape_and_count_mismatches(reference, tmp_path):
    r = verify(reference, outputs_file(tmp_path / "t.etensors", np.arange(1, 7).reshape(3, 2)))
    assert r.returncode == 1 and "shape [3, 2], expected [2, 3]" in r.stdout, r.stdout
    r = verify(reference, outputs_file(tmp_path / "n.etensors", np.ones((2, 3)), np.ones(1)))
    assert r.returncode == 1 and "2 outputs, the reference has 1" in r.stdout, r.stdout


def test_nan_equals_nan_and_inf_itself(tmp_path):
    ref = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_reference(tmp_path / "n.pte", [ref], [ref], "example inputs")
    assert verify(tmp_path / "n.pte", outputs_file(tmp_path / "a", ref.numpy())).returncode == 0
    flipped = ref.numpy().copy()
    flipped[1] = -np.inf
    r = verify(tmp_path / "n.pte", outputs_file(tmp_path / "b", flipped))
    assert r.returncode == 1 and "worst at [1]" in r.stdout, r.stdout
    nan_only_here = ref.numpy().copy()
    nan_only_here[3] = np.nan
    assert verify(tmp_path / "n.pte", outputs_file(tmp_path / "c", nan_only_here)).returncode == 1


# ---- printed output (prefix only) ---------------------------------------------

def test_printed_output_passes(reference):
    r = verify(reference.with_suffix(".expected"), text=GOOD)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "printed values only" in r.stdout


@pytest.mark.parametrize("text, why", [
    (GOOD.replace("3.0000", "3.0100"), "largest difference"),
    (GOOD.replace("shape=[2,3]", "shape=[3,2]"), "shape"),
    ("output[0] shape=[2,3]\n", "no values line"),
    ("", "printed 0 outputs"),
    (GOOD.replace("6.0000", ""), "values printed"),
])
def test_wrong_printed_output_fails(reference, text, why):
    r = verify(reference, text=text)
    assert r.returncode == 1, r.stdout + r.stderr
    assert why in r.stdout


def test_zero_tolerance_means_exact_text(reference):
    assert verify(reference, "-", "--tolerance", "0", text=GOOD).returncode == 0
    r = verify(reference, "-", "--tolerance", "0", text=GOOD.replace("5.0000", "5.0001"))
    assert r.returncode == 1 and "exactly" in r.stdout


def test_two_line_form_from_other_tools(tmp_path):
    path = tmp_path / "other.expected"
    path.write_text("[2,3]\n0.5\n")
    (out,) = read_expected(path)
    assert out.shape == [2, 3] and out.values == [0.5] * 6
    text = "output[0] shape=[2,3]\n  values: " + ", ".join(["0.5000"] * 6) + "\n"
    assert verify(path, "-", "--tolerance", "0", text=text).returncode == 0
    assert verify(path, text=text.replace("0.5000", "0.6000", 1)).returncode == 1


@pytest.mark.parametrize("content", ["[2,x]\n1\n", "[2,3]\nabc\n", "{not json", "1\n2\n3\n"])
def test_malformed_expected_files_are_usage_errors(tmp_path, content):
    path = tmp_path / "bad.expected"
    path.write_text(content)
    with pytest.raises(ExpectedError):
        read_expected(path)
    r = verify(path, text=GOOD)
    assert r.returncode == 2 and "error:" in r.stderr


def test_missing_full_reference_is_named(tmp_path):
    got = outputs_file(tmp_path / "got.etensors", np.ones(3))
    r = verify(tmp_path / "none.pte", got)
    assert r.returncode == 2 and "none.expected.etensors does not exist" in r.stderr, r.stderr


# ---- what export writes -------------------------------------------------------

class LogMinusOne(torch.nn.Module):
    def forward(self, x):
        return torch.log(x - 1)  # -inf / NaN on inputs of 1.0 or below


def test_reference_comes_from_the_example_inputs(tmp_path):
    """Inputs of 1.0 would give -inf here; the example inputs (> 2) do not,
    and both they and the outputs are stored whole."""
    x = torch.rand(3) + 2
    path = tmp_path / "log.pte"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReferenceWarning)
        executorch_tensorrt.export(LogMinusOne(), (x,), path, progress=None)
    stored = tf.read_tensors(tensors_path(path))
    assert [t.name for t in stored] == ["input.0", "output.0"]
    np.testing.assert_array_equal(stored[0].array, x.numpy())
    np.testing.assert_array_equal(stored[1].array, torch.log(x - 1).numpy())


def test_non_finite_reference_warns_and_still_exports(tmp_path):
    path = tmp_path / "log.pte"
    with pytest.warns(ReferenceWarning, match="NaN or inf"):
        executorch_tensorrt.export(LogMinusOne(), (torch.tensor([0.5, 1.0, 3.0]),), path,
                                   progress=None)
    assert path.is_file() and tensors_path(path).is_file()


def test_failing_reference_run_warns_and_still_exports(tmp_path):
    """The reference inputs do not fit the model: the program is still written."""
    path = tmp_path / "add.pte"
    from executorch_tensorrt.examples.models import example

    model, inputs = example("transformer")
    with pytest.warns(ReferenceWarning, match="failed"):
        executorch_tensorrt.export(model, inputs, path, progress=None,
                                   reference_inputs=(torch.ones(2, 16, 5),))
    assert path.is_file()
    assert not path.with_suffix(".expected").exists() and not tensors_path(path).exists()


def test_python_runner_replays_stored_inputs_and_verifies(exported, tmp_path):
    _, _, path = exported("cnn")
    env = {**os.environ, "EXECUTORCH_TENSORRT_FALLBACK": "onnxruntime"}
    got = tmp_path / "cnn-out.etensors"
    run = subprocess.run([sys.executable, "-m", "executorch_tensorrt", "run", str(path),
                          "--outputs", str(got)], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("output[0] shape=[2,10]")
    assert "the example inputs stored in" in run.stderr
    assert verify(path, got).returncode == 0
    assert verify(path, text=run.stdout).returncode == 0
    # Pattern inputs are not the example inputs: verify must see the difference.
    other = tmp_path / "pattern.etensors"
    subprocess.run([sys.executable, "-m", "executorch_tensorrt", "run", str(path), "--fill",
                    "pattern", "--outputs", str(other)], capture_output=True, env=env, check=True)
    r = verify(path, other)
    assert r.returncode == 1 and "elements differ" in r.stdout, r.stdout
