"""`export --quantize SCHEME [--group-size N]`: the model is quantized before
torch.export, its reference is the eager quantized model, and a scheme
TensorRT cannot run is an export failure (exit 4) naming why."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from executorch_tensorrt.aot.partition.report import read_report
from executorch_tensorrt.blob import read_blob
from helpers import FALLBACK, tensorrt_blobs

FACTORY = textwrap.dedent("""
    import torch

    def make():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 8)).eval()
        return model, (torch.randn(2, 64),)
""")


def cli(*args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "executorch_tensorrt", *args],
                          capture_output=True, text=True, timeout=600, cwd=cwd,
                          env={**os.environ, **(env or {})})


def test_export_quantize_int4_runs_and_verifies(tmp_path):
    (tmp_path / "qmodels.py").write_text(FACTORY)
    out = tmp_path / "q4.pte"
    r = cli("export", "qmodels:make", str(out), "--quantize", "int4_weight_only",
            "--group-size", "32", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (blob,) = tensorrt_blobs(out)
    weights = read_blob(blob).metadata["weights"]
    assert [(w["dtype"], w["shape"], w["nbytes"]) for w in weights if w["dtype"] == "int4"] == [
        ("int4", [32, 64], 1024)]  # the [8, 32] weight is below the named-data size limit
    got = tmp_path / "got.etensors"
    assert cli("run", str(out), "--outputs", str(got), cwd=tmp_path, env=FALLBACK).returncode == 0
    r = cli("verify", str(out), str(got), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_export_quantize_refuses_uint4(tmp_path):
    (tmp_path / "qmodels.py").write_text(FACTORY)
    r = cli("export", "qmodels:make", str(tmp_path / "u.pte"), "--quantize", "uint4",
            cwd=tmp_path)
    assert r.returncode == 4, r.stderr
    assert "--quantize uint4" in r.stderr and "no uint4" in r.stderr
    assert not (tmp_path / "u.pte").exists()


def test_export_quantize_w8a8_with_a_calibration_file(tmp_path):
    """fp8_w8a8 calibrated from a tensor file (input.0 [N, 2, 64]: N batches)
    exports and passes export's run check; int8_w8a8 on TensorRT-RTX is refused
    (exit 4) naming why, before anything is written."""
    import torch

    from executorch_tensorrt.program import tensor_file as tf

    (tmp_path / "qmodels.py").write_text(FACTORY)
    calibration = tmp_path / "calib.etensors"
    tf.write_tensors(calibration, [tf.from_torch("input.0", torch.randn(3, 2, 64))])
    out = tmp_path / "fp8.pte"
    r = cli("export", "qmodels:make", str(out), "--quantize", "fp8_w8a8", "--calibration",
            str(calibration), "--compute-capability", "SM89", "--compute-capability", "SM120",
            cwd=tmp_path, env=FALLBACK)
    assert r.returncode == 0, r.stderr
    assert "weak calibration" not in r.stderr
    report = read_report(out)["methods"]["forward"]["quantization"]
    assert report == {"0": "fp8 e4m3 W8A8 (per tensor)", "2": "fp8 e4m3 W8A8 (per tensor)"}
    r = cli("export", "qmodels:make", str(tmp_path / "w8a8.pte"), "--quantize", "int8_w8a8",
            cwd=tmp_path)
    assert r.returncode == 4, r.stderr
    assert "weak calibration" in r.stderr and "TensorRT-RTX has no INT8 activation" in r.stderr
    assert not (tmp_path / "w8a8.pte").exists()


def test_bad_calibration_files_are_usage_errors(tmp_path):
    import torch

    from executorch_tensorrt.program import tensor_file as tf

    (tmp_path / "qmodels.py").write_text(FACTORY)
    uneven = tmp_path / "uneven.etensors"
    tf.write_tensors(uneven, [tf.from_torch("input.0", torch.randn(3, 2, 64)),
                              tf.from_torch("input.1", torch.randn(2, 2, 64))])
    r = cli("export", "qmodels:make", str(tmp_path / "a.pte"), "--quantize", "fp8_w8a8",
            "--calibration", str(uneven), cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "the same number N >= 1 of batches" in r.stderr
    assert "[[3, 2, 64], [2, 2, 64]]" in r.stderr
    r = cli("export", "qmodels:make", str(tmp_path / "b.pte"), "--calibration", str(uneven),
            cwd=tmp_path)
    assert r.returncode == 2 and "give --quantize too" in r.stderr, r.stderr


def test_export_quantize_fp4_for_sm120_and_refused_for_the_default_targets(tmp_path,
                                                                            monkeypatch):
    """In process (cli_main): --quantize fp4_weight_only with --compute-capability SM120
    stores the packed weight; without it (TensorRT-RTX's default targets, SM75..)
    the export fails with exit 4 naming SM120, nothing written."""
    from helpers import cli_main

    (tmp_path / "qmodels_fp4.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    for key, value in FALLBACK.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "q.pte"
    code, _, stderr = cli_main("export", "qmodels_fp4:make", out, "--quantize",
                               "fp4_weight_only", "--compute-capability", "SM120")
    assert code == 0, stderr
    (blob,) = tensorrt_blobs(out)
    weights = read_blob(blob).metadata["weights"]
    assert [(w["dtype"], w["shape"], w["nbytes"]) for w in weights
            if w["dtype"] == "float4_e2m1"] == [("float4_e2m1", [32, 64], 1024)]
    refused = tmp_path / "r.pte"
    code, _, stderr = cli_main("export", "qmodels_fp4:make", refused, "--quantize",
                               "fp4_weight_only")
    assert code == 4, stderr
    assert "fp4_weight_only needs compute capability SM120" in stderr
    assert not refused.exists()
