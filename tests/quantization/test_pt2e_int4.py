"""TensorRTQuantizer("int4_weight_only", group_size): PT2E INT4 weight-only
per group. convert_pt2e leaves quantize()'s int4 path in the graph (packed
weights two per byte, etrt_quant.dequantize_int4); export stores them packed
in named data once and TensorRT sees opset-21 block DequantizeLinear; the
fallback runs like the converted model; a group size that does not divide a
layer's input features is refused at prepare_pt2e, the layer named."""
from __future__ import annotations

import onnx
import pytest
import torch
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

import executorch_tensorrt  # noqa: F401 - registers the backend
from executorch_tensorrt.aot.export import export_program
from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.quantization import QuantizationError, TensorRTQuantizer, quantize
from tests.helpers import artifact_bytes, run_forward, tensorrt_blobs

GROUP = 64


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 64)).eval()


def _x(seed: int) -> torch.Tensor:
    return torch.randn(4, 256, generator=torch.Generator().manual_seed(seed))


def _converted(model, group: int = GROUP) -> torch.fx.GraphModule:
    gm = prepare_pt2e(torch.export.export(model, (_x(1),)).module(),
                      TensorRTQuantizer("int4_weight_only", group_size=group))
    return convert_pt2e(gm)  # weight-only: no calibration needed


def test_pt2e_int4_exports_packed_and_runs_like_the_converted_model(tmp_path, monkeypatch):
    fp32 = _mlp()
    gm = _converted(fp32)
    with torch.no_grad():  # the same int4 path as quantize(): the same numbers
        assert torch.equal(gm(_x(5)), quantize(fp32, scheme="int4_weight_only",
                                               group_size=GROUP)(_x(5)))
    monkeypatch.setenv("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")
    result = export_program(gm, (_x(1),), tmp_path / "q4.pte", progress=None,
                            external_weights=True)
    assert result.report.partitions and not result.report.rejected
    assert result.report.quantization == {layer: f"int4 weight-only (group {GROUP})"
                                          for layer in ("0", "2", "4")}
    (blob_bytes,) = tensorrt_blobs(result.path)
    blob = read_blob(blob_bytes)
    packed = [w for w in blob.metadata["weights"] if w["dtype"] == "int4"]
    assert [(w["shape"], w["nbytes"]) for w in packed] == [
        ([512, 256], 512 * 128), ([512, 512], 512 * 256), ([64, 512], 64 * 256)]
    assert not [w for w in blob.metadata["weights"]
                if w["dtype"] == "float32" and len(w["shape"]) == 2]  # no float weight left
    graph = onnx.load_from_string(blob.onnx)
    dq = [n for n in graph.graph.node if n.op_type == "DequantizeLinear"]
    assert [{a.name: a.i for a in n.attribute} for n in dq] == [
        {"axis": 1, "block_size": GROUP}] * 3
    weights = sum(p.numel() * 4 for n, p in fp32.named_parameters() if n.endswith("weight"))
    size = artifact_bytes(result)
    assert size / weights <= 0.15
    x = _x(40)
    out = run_forward(result, x)
    with torch.no_grad():
        eager, eager_fp32 = gm(x), fp32(x)
    diff = float((out - eager).abs().max())
    assert diff <= 1e-5
    assert float((eager - eager_fp32).abs().max()) > 10 * diff


def test_a_group_that_does_not_divide_a_layer_is_refused_naming_it():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 96), torch.nn.ReLU(),
                                torch.nn.Linear(96, 8)).eval()
    with pytest.raises(QuantizationError, match=r"layer '2': int4 group size 64 does not divide "
                                                r"its 96 input features; choose a group size "
                                                r"from \[32, 64, 128\] that divides them"):
        prepare_pt2e(torch.export.export(model, (_x(1),)).module(),  # before any convert
                     TensorRTQuantizer("int4_weight_only", group_size=GROUP))
    with pytest.raises(QuantizationError, match="int4 group size 48 is not one of"):
        TensorRTQuantizer("int4_weight_only", group_size=48)


def test_a_conv_left_float_by_int4_is_in_the_report(tmp_path, monkeypatch):
    """PT2E int4 takes Linear layers only: the Conv2d runs float, and the
    partition report says so instead of leaving it out."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 6 * 6, 64)).eval()
    x = torch.randn(2, 3, 8, 8)
    gm = convert_pt2e(prepare_pt2e(torch.export.export(model, (x,)).module(),
                                   TensorRTQuantizer("int4_weight_only", group_size=32)))
    monkeypatch.setenv("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")
    result = export_program(gm, (x,), tmp_path / "c.pte", progress=None)
    assert result.report.quantization == {
        "0": "not quantized: the quantizer left it float (no Q/DQ on it)",
        "2": "int4 weight-only (group 32)"}
