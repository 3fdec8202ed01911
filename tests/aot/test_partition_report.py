"""No silent non-delegation: export fails naming why TensorRT took nothing, and
prints / writes a per-op report when it took part. All real TensorRT-RTX builds."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from executorch_tensorrt.aot.export import export_program
from executorch_tensorrt.aot.partition.report import format_report, read_report
from executorch_tensorrt.errors import ExportError
from executorch_tensorrt.program.info import read_program


def gemm() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()


def trt_delegates(path) -> int:
    (method,) = read_program(path)
    return sum(d.backend == "TensorRTBackend" for d in method.delegates)


def test_options_no_engine_builds_with_fail_naming_the_option(tmp_path):
    with pytest.raises(ExportError) as info:
        export_program(gemm(), (torch.randn(2, 16),), tmp_path / "m.pte", progress=None,
                       compute_capabilities=("SM99",))
    text = str(info.value)
    assert "TensorRT took nothing from 'forward'" in text and "SM99" in text
    assert "allow_no_tensorrt=True" in text
    assert not (tmp_path / "m.pte").exists()


def test_float64_model_fails_naming_the_dtype(tmp_path):
    model = copy.deepcopy(gemm()).double()
    with pytest.raises(ExportError, match=r"float64.*has no TensorRT type"):
        export_program(model, (torch.randn(2, 16, dtype=torch.float64),), tmp_path / "m.pte",
                       progress=None)


def test_allow_no_tensorrt_writes_the_program_and_its_report(tmp_path):
    model = copy.deepcopy(gemm()).double()
    result = export_program(model, (torch.randn(2, 16, dtype=torch.float64),),
                            tmp_path / "m.pte", progress=None, allow_no_tensorrt=True)
    assert trt_delegates(result.path) == 0
    data = read_report(result.path)
    forward = data["methods"]["forward"]
    assert forward["nodes_on_tensorrt"] == 0 and forward["nodes"] == 3
    reasons = {r["reason"] for row in forward["ops"] for r in row["reasons"]}
    assert reasons == {"dtype ['torch.float64'] has no TensorRT type"}
    assert "aten.linear.default" in format_report(data)


def test_partial_delegation_prints_the_builders_reason_per_op(tmp_path):
    """SM75 has no FP32 GEMM in TensorRT-RTX: the linears fail to build, the ReLU
    between them does not. The whole partition's build fails without naming a
    node; splitting it keeps the ReLU (without splitting, TensorRT took nothing)."""
    printed: list[str] = []
    result = export_program(gemm(), (torch.randn(2, 16),), tmp_path / "m.pte",
                            progress=printed.append, compute_capabilities=("SM75", "SM120"))
    assert trt_delegates(result.path) == 1
    report = result.report
    assert report.nodes_on_tensorrt == {"aten_relu_default"}
    rows = {row["op"]: row for row in report.as_dict()["ops"]}
    assert rows["aten.linear.default"]["elsewhere"] == 2
    (reason,) = rows["aten.linear.default"]["reasons"]
    assert "FP32 GEMM is not supported" in reason["reason"], reason
    assert rows["aten.relu.default"] == {"op": "aten.relu.default", "on_tensorrt": 1,
                                         "elsewhere": 0, "reasons": []}
    table = next(p for p in printed if p.startswith("TensorRT took part"))
    assert "FP32 GEMM is not supported" in table and "aten.linear.default" in table
    # The written report says the same, and formats to the same table.
    assert read_report(result.path)["methods"]["forward"] == report.as_dict()
    assert format_report(read_report(result.report_path)) == format_report(result.reports)


def test_read_report_rejects_what_is_not_a_report(tmp_path):
    (tmp_path / "m.report.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not a partition report"):
        read_report(tmp_path / "m.pte")
    (tmp_path / "m.report.json").write_text(
        '{"format": "executorch-tensorrt-report/1", "methods": {"forward": {"partitions": 1, '
        '"nodes_on_tensorrt": 1, "nodes": 1, "ops": [{"op": "aten.add.Tensor"}]}}}')
    with pytest.raises(ValueError, match="method 'forward' .* malformed"):
        read_report(tmp_path / "m.pte")
    with pytest.raises(FileNotFoundError, match="has no partition report"):
        read_report(tmp_path / "other.pte")


def test_splitting_is_what_keeps_the_relu_and_its_builds_are_capped(tmp_path):
    """With no split allowed, the failing partition is rejected whole with the
    builder's reason and the cap named, and export fails."""
    with pytest.raises(ExportError) as info:
        export_program(gemm(), (torch.randn(2, 16),), tmp_path / "m.pte", progress=None,
                       compute_capabilities=("SM75", "SM120"), max_builds=0)
    text = str(info.value)
    assert "FP32 GEMM is not supported" in text and "splitting stopped: 0 builds tried" in text


def test_each_method_gets_its_own_report_and_the_empty_one_is_named(tmp_path):
    """Methods are partitioned in the order given ("zeta" before "alpha"): the
    method TensorRT took nothing from is the one named."""
    model64 = copy.deepcopy(gemm()).double()
    programs = {"zeta": torch.export.export(gemm(), (torch.randn(2, 16),)),
                "alpha": torch.export.export(model64, (torch.randn(2, 16, dtype=torch.float64),))}
    with pytest.raises(ExportError, match=r"TensorRT took nothing from 'alpha',"):
        export_program(programs, None, tmp_path / "m.pte", progress=None)
    result = export_program(programs, None, tmp_path / "m.pte", progress=None,
                            allow_no_tensorrt=True)
    assert result.reports["zeta"].nodes_on_tensorrt and not result.reports["alpha"].partitions
    methods = read_report(result.path)["methods"]
    assert methods["zeta"]["nodes_on_tensorrt"] == 3 and methods["alpha"]["nodes_on_tensorrt"] == 0


class _ApartIndices(nn.Module):
    """An accumulating index_put over dims 0 and 2 (not adjacent), which our
    translation does not cover: the partition's ONNX export fails."""

    def forward(self, x, a, b, v):
        return torch.ops.aten.index_put(x * 2, [a, None, b], v, True) + 1


def test_an_onnx_export_failure_names_its_cause_not_the_exporters_advice(tmp_path):
    inputs = (torch.randn(4, 3, 5), torch.tensor([0, 1, 1]), torch.tensor([2, 2, 4]),
              torch.randn(3, 3))
    with pytest.warns(UserWarning):  # the split around the refused node
        result = export_program(_ApartIndices(), inputs, tmp_path / "m.pte", progress=None,
                                run_check=False)
    report = result.reports["forward"]
    (reason,) = {r for n, r in report.rejected.items() if n not in report.nodes_on_tensorrt}
    assert reason.startswith("ONNX export failed: NotImplementedError: accumulating index_put "
                             "beyond adjacent integer indices"), reason
    assert "(translating aten.index_put.default)" in reason, reason
    assert "\x1b" not in reason and "Next steps" not in reason, reason
