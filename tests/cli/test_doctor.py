"""`executorch-tensorrt doctor` on this machine (no GPU): every section, the
no-TensorRT-execution exit code with its reason, a program's first load, JSON."""
from __future__ import annotations

import json

from helpers import cli_main

from executorch_tensorrt.cli.exits import EXIT_NO_TENSORRT


def test_doctor_without_gpu_names_each_section_and_the_reason():
    code, out, _ = cli_main("doctor")
    assert code == EXIT_NO_TENSORRT, out
    for section in ("CUDA driver:", "GPUs:", "TensorRT:", "builds for:", "runs here:   no: ",
                    "ExecuTorch:", "adapter ABI:", "engine cache:"):
        assert section in out, (section, out)
    assert "NVIDIA GPU" in out  # the reason: no driver / no GPU
    assert "tensorrt_rtx" in out and "SM89" in out


def test_doctor_with_a_program_reports_each_partition_and_json_parses(exported):
    _, _, path = exported("add")
    code, out, _ = cli_main("doctor", path)
    assert code == EXIT_NO_TENSORRT
    assert "first load (TensorRT partitions):" in out and "forward[0]" in out, out
    code, out, _ = cli_main("doctor", path, "--json")
    report = json.loads(out)
    assert code == EXIT_NO_TENSORRT and report["runs_here"] is False and report["why_not"]
    assert report["first_load"] and report["first_load"][0]["method"] == "forward"
    assert report["adapter_abi"] >= 1 and report["gpus"] == []


def test_doctor_checks_the_weights_file_and_names_the_stand_in(exported, tmp_path,
                                                               monkeypatch):
    """The .ptd beside the program holds every partition's weights; another
    program's .ptd lacks them and doctor names what is missing; a test-only
    stand-in is said to be FAKE."""
    _, _, cnn = exported("cnn", external_weights=True)
    _, _, other = exported("transformer", external_weights=True)
    code, out, _ = cli_main("doctor", cnn)
    assert code == EXIT_NO_TENSORRT and "weights (named data):" in out
    assert "forward[0]:" in out and "weights found" in out, out
    code, out, _ = cli_main("doctor", cnn, "--data", other.with_suffix(".ptd"))
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("forward[0]:")
                and "weights" not in ln.split(":", 1)[0])
    assert "weights found" not in out, out
    assert "forward[0]" in line
    monkeypatch.setenv("EXECUTORCH_TENSORRT_TEST_STAND_IN", "stand_in_engine")
    code, out, _ = cli_main("doctor")
    assert "STAND-IN:" in out and "FAKE" in out


def test_doctor_names_a_torch_that_executorch_python_runtime_was_not_built_for(monkeypatch):
    """ExecuTorch's Python bindings link the torch they were built with; a
    machine with another torch (a GPU image's own) is told so, with the remedy."""
    import importlib.metadata

    from executorch_tensorrt.deploy import doctor

    real = importlib.metadata.version
    required = doctor._required("torch")
    assert required and real("torch").split("+")[0] == required  # this machine: matching
    report = doctor.diagnose()
    assert report.torch_mismatch is None and "MISMATCH" not in doctor.format_report(report)
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "2.11.0+cu130" if name == "torch" else real(name))
    report = doctor.diagnose()
    text = doctor.format_report(report)
    assert report.torch == "2.11.0+cu130" and f"torch=={required}" in report.torch_mismatch
    assert "torch:         2.11.0+cu130 (MISMATCH: " in text and "C++ runtime" in text
