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
