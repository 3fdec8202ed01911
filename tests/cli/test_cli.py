"""The command line: start-up without torch, exit codes, messages for the
wrong kind of file, and export of user models (.pt2, module:callable)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from executorch_tensorrt.program import tensor_file as tf
from executorch_tensorrt.runtime.executor import FALLBACK_ENV
from helpers import FALLBACK, cli_main, tensorrt_blobs



def cli(*args, env=None, cwd=None, python_options=()):
    return subprocess.run([sys.executable, *python_options, "-m", "executorch_tensorrt", *args],
                          capture_output=True, text=True, timeout=600, cwd=cwd,
                          env={**os.environ, **(env or {})})


def imported_modules(importtime_stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[-1].strip() for line in importtime_stderr.splitlines()
            if line.startswith("import time:")}


@pytest.mark.parametrize("args, code", [(["--help"], 0), (["run", "--help"], 0),
                                        (["export", "--help"], 0), (["--version"], 0),
                                        (["run"], 2), (["bogus"], 2)])
def test_help_and_usage_errors_do_not_import_torch(args, code):
    r = cli(*args, python_options=("-X", "importtime"))
    assert r.returncode == code, r.stdout + r.stderr
    modules = imported_modules(r.stderr)
    assert "executorch_tensorrt.cli" in modules
    heavy = sorted(m for m in modules if m.split(".")[0] in ("torch", "executorch", "numpy"))
    assert heavy == [], heavy


def test_help_lists_exit_codes_and_version():
    r = cli("--help")
    assert "exit codes:" in r.stdout and "4  export failed" in r.stdout
    from executorch_tensorrt import __version__

    assert cli("--version").stdout.strip() == f"executorch-tensorrt {__version__}"


def test_console_script_and_module_agree():
    script = os.path.join(os.path.dirname(sys.executable), "executorch-tensorrt")
    r = subprocess.run([script, "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == cli("--version").stdout


# ---- the wrong kind of file: exit 2 with what it is ---------------------------

@pytest.mark.parametrize("make, message", [
    (lambda p: p, "is a directory; give the .pte file inside it"),
    (lambda p: p / "missing.pte", "missing.pte does not exist"),
    (lambda p: (p / "text.pte").write_text("hello world, not a program") and p / "text.pte",
     "is not an ExecuTorch program"),
    (lambda p: (p / "m.expected").write_text('{"format": 1}') and p / "m.expected",
     "is a JSON or text file"),
    (lambda p: tf.write_tensors(p / "t.etensors", []), "is a tensor file"),
])
@pytest.mark.parametrize("command", ["run", "inspect"])
def test_wrong_kind_of_file(tmp_path, make, message, command):
    path = make(tmp_path)
    r = cli(command, str(path))
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "requires a buffer" not in r.stderr


def test_unknown_method_lists_the_methods(exported):
    _, _, path = exported("add")
    r = cli("run", str(path), "--method", "nosuch", env=FALLBACK)
    assert r.returncode == 2 and "has no method 'nosuch'; its methods: forward" in r.stderr, r.stderr


# ---- running: exit 0, 3 ---------------------------------------------------------

def test_run_reads_inputs_and_writes_outputs(exported, tmp_path):
    model, inputs, path = exported("add")
    given = tf.write_tensors(tmp_path / "in.etensors", [
        tf.Tensor("input.0", "float32", np.arange(6, dtype=np.float32).reshape(2, 3))])
    out = tmp_path / "out.etensors"
    r = cli("run", str(path), "--inputs", str(given), "--outputs", str(out), env=FALLBACK)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("output[0] shape=[2,3]\n"
                        "  values: 1.0000, 2.0000, 3.0000, 4.0000, 5.0000, 6.0000\n")
    (o,) = tf.read_tensors(out)
    np.testing.assert_array_equal(o.array, np.arange(1, 7, dtype=np.float32).reshape(2, 3))


def test_run_outputs_into_a_folder_in_its_place_is_exit_2_and_keeps_it(exported, tmp_path):
    """`run --outputs` writes whole or not at all: a folder where the file
    should go is refused by name, and what is there stays."""
    _, _, path = exported("add")
    out = tmp_path / "out.etensors"
    out.mkdir()
    (out / "mine.txt").write_text("kept")
    r = cli("run", str(path), "--outputs", str(out), env=FALLBACK)
    assert r.returncode == 2, r.stderr
    assert f"could not write {out}: the path is a folder" in r.stderr, r.stderr
    assert (out / "mine.txt").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.etensors"]


def test_run_without_a_usable_backend_is_exit_3(exported):
    _, _, path = exported("add")
    env = {k: v for k, v in os.environ.items() if k != "EXECUTORCH_TENSORRT_FALLBACK"}
    r = subprocess.run([sys.executable, "-m", "executorch_tensorrt", "run", str(path)],
                       capture_output=True, text=True, env=env)
    if "no CUDA driver" not in r.stderr:
        pytest.skip("this machine has a GPU; the failure needs one without")
    assert r.returncode == 3 and "EXECUTORCH_TENSORRT_FALLBACK=onnxruntime" in r.stderr


def test_damaged_onnx_section_is_one_line_with_a_re_export_hint(exported, tmp_path):
    from executorch_tensorrt.blob import read_blob

    _, _, path = exported("cnn")
    data = bytearray(path.read_bytes())
    onnx = read_blob(tensorrt_blobs(bytes(data))[0]).onnx
    start = bytes(data).find(onnx)
    for k in range(start + 100, start + len(onnx) - 100, 7):
        data[k] ^= 0x5A
    bad = tmp_path / "bad.pte"
    bad.write_bytes(bytes(data))
    r = cli("run", str(bad), env=FALLBACK)
    assert r.returncode == 3, r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    # The section's digest names it (blob/reader.py); the CLI adds its own hint otherwise.
    assert "section 'onnx'" in line and "re-export" in line, line
    assert r.stderr.count("Traceback") <= 1  # the CLI adds none (the backend logs its own)


def test_inspect_device_resident_on_a_host_program_is_exit_1(exported):
    _, _, path = exported("add")
    r = cli("inspect", "--device-resident", str(path))
    assert r.returncode == 1 and "device-resident: FAIL" in r.stdout


# ---- export of user models: exit 0, 2, 4 ---------------------------------------

FACTORY = textwrap.dedent("""
    import torch

    class Scale(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) * torch.arange(x.shape[-1], dtype=x.dtype)

    def make():
        return Scale().eval(), (torch.randn(2, 5),)

    def program():
        return torch.export.export(Scale(), (torch.randn(3, 5),))

    def broken():
        return 42
""")


@pytest.fixture
def factory_dir(tmp_path, monkeypatch):
    """A folder with user_models.py, made the current directory (MODULE:CALLABLE
    sources import from it, like `python -m`); sys.path and the imported
    module are put back afterwards."""
    (tmp_path / "user_models.py").write_text(FACTORY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    sys.modules.pop("user_models", None)


def test_export_module_callable_with_a_dynamic_batch(factory_dir, allow_fallback):
    out = factory_dir / "scale.pte"
    code, stdout, stderr = cli_main("export", "user_models:make", out, "--dynamic",
                                      "0:0:1:8")
    assert code == 0, stderr
    assert "TensorRTBackend" in stdout and out.is_file()
    # The stored example inputs replay and verify; another batch size runs too.
    got = factory_dir / "got.etensors"
    assert cli_main("run", out, "--outputs", got)[0] == 0
    assert cli_main("verify", out, got)[0] == 0
    batch5 = tf.write_tensors(factory_dir / "b5.etensors", [
        tf.Tensor("input.0", "float32", np.ones((5, 5), np.float32))])
    code, stdout, stderr = cli_main("run", out, "--inputs", batch5)
    assert code == 0 and stdout.startswith("output[0] shape=[5,5]"), stderr


def test_export_saved_pt2_and_file_callable(factory_dir, allow_fallback, monkeypatch):
    import torch

    sys.path.insert(0, str(factory_dir))  # factory_dir's copy of sys.path
    import user_models

    pt2 = factory_dir / "scale.pt2"
    torch.export.save(user_models.program(), str(pt2))
    out = factory_dir / "from-pt2.pte"
    code, _, stderr = cli_main("export", pt2, out, "--precision", "fp16")
    assert code == 0, stderr
    # torch.export.save keeps the example inputs: the reference was made from them.
    got = factory_dir / "got.etensors"
    assert cli_main("run", out, "--outputs", got)[0] == 0
    assert cli_main("verify", out, got, "--atol", "2e-2", "--rtol", "1e-2")[0] == 0
    out2 = factory_dir / "from-file.pte"
    monkeypatch.delenv(FALLBACK_ENV)  # as before: the run check allows the fallback itself
    code, _, stderr = cli_main("export", f"{factory_dir / 'user_models.py'}:program",
                                 out2)
    assert code == 0, stderr


@pytest.mark.parametrize("args, code, message", [
    (["user_models:broken", "x.pte"], 2, "returned a int"),
    (["user_models:nosuch", "x.pte"], 2, "has no callable 'nosuch'"),
    (["no_such_module:make", "x.pte"], 2, "cannot import 'no_such_module'"),
    (["user_models:make", "x.txt"], 2, "should end in .pte"),
    (["user_models:make", "x.pte", "--dynamic", "0:0:8"], 2, "INPUT:DIM:MIN:MAX"),
    (["user_models:make", "x.pte", "--dynamic", "0:0:3:8"], 2, "outside [3, 8]"),
    (["user_models:program", "x.pte", "--dynamic", "0:0:1:8"], 2, "fixed already"),
    (["user_models:make", "x.pte", "--external-weights", "--inline-weights"], 2, "contradict"),
    (["x.pte"], 2, "give either a SOURCE"),
    (["user_models:make", "x.pte", "--require-backend", "XnnpackBackend"], 4, "XnnpackBackend"),
])
def test_export_errors(factory_dir, args, code, message):
    got, stdout, stderr = cli_main("export", *args)
    assert got == code, stdout + stderr
    assert message in stderr and "Traceback" not in stderr, stderr


def test_demo_labels_fallback_timings_and_passes(tmp_path, allow_fallback, capsys):
    from executorch_tensorrt.cli import main
    from executorch_tensorrt.runtime.cuda.probe import cuda_unavailable_reason

    assert main(["demo", "--example", "add", "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "inputs: the example inputs stored in" in out
    assert "output.0: OK, 6 elements" in out and out.rstrip().endswith("PASS")
    if cuda_unavailable_reason() is not None:  # no GPU: the partition ran on onnxruntime
        assert "timings: the CPU FALLBACK" in out and "ExecuTorch run (CPU fallback)" in out


def test_inspect_report_shows_what_tensorrt_took_and_why(exported, tmp_path):
    """`inspect --report` prints the report export wrote beside the program:
    the bitwise example leaves bitwise_and to ExecuTorch, with the parser's reason."""
    import shutil

    _, _, path = exported("bitwise")
    r = cli("inspect", "--report", str(path))
    assert r.returncode == 0, r.stderr
    assert "TensorRT took 11 of 12 nodes in 2 partition(s)" in r.stdout, r.stdout
    line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("aten.bitwise_and"))
    assert line.split()[1:] == ["0", "1"], line
    assert "parser does not support it" in r.stdout
    alone = tmp_path / "alone.pte"
    shutil.copy(path, alone)
    r = cli("inspect", "--report", str(alone))
    assert r.returncode == 2 and "alone.report.json does not exist" in r.stderr, r.stderr
