"""Models fake-quantized with NVIDIA ModelOpt (`mtq.quantize`, INT8_DEFAULT_CFG and
FP8_DEFAULT_CFG, calibrated on the CPU) exported with TensorRT-RTX's real parser
and builder taking Q/DQ layers, weights stored quantized in named data, the
onnxruntime fallback compared with ModelOpt's own eager fake-quant model; what
the flavour or targets cannot run is refused by name."""
from __future__ import annotations

import onnx
import pytest
import torch
import modelopt.torch.quantization as mtq
from executorch.runtime import Runtime

import executorch_tensorrt  # noqa: F401 - registers the backend
from executorch_tensorrt.aot import export as export_module
from executorch_tensorrt.aot.export import export_program
from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.quantization import QuantizationError
from executorch_tensorrt.quantization.importers.modelopt import lower_modelopt
from tests.helpers import artifact_bytes, tensorrt_blobs

FP8_TARGETS = ("SM89", "SM120")


def _x(seed: int) -> torch.Tensor:
    return torch.randn(4, 256, generator=torch.Generator().manual_seed(seed))


def _quantized(config, activation=torch.nn.ReLU) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), activation(),
                                torch.nn.Linear(512, 512), activation(),
                                torch.nn.Linear(512, 64)).eval()

    def calibrate(m):
        for seed in range(10, 18):
            m(_x(seed))
    return mtq.quantize(model, config, forward_loop=calibrate)


def _fp32_weight_bytes(model) -> int:
    return sum(m.weight.numel() * 4 for m in model if isinstance(m, torch.nn.Linear))


def _export_and_run(model, tmp_path, monkeypatch, **options):
    result = export_program(model, (_x(1),), tmp_path / "q.pte", external_weights=True,
                            progress=None, **options)
    assert result.backends == {"forward": ["TensorRTBackend"]}
    (blob_bytes,) = tensorrt_blobs(tmp_path / "q.pte")
    blob = read_blob(blob_bytes)
    size = artifact_bytes(result)
    monkeypatch.setenv("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")
    method = Runtime.get().load_program(tmp_path / "q.pte",
                                        data_path=result.data_paths[0]).load_method("forward")
    x = _x(2)
    with torch.no_grad():
        eager = model(x)
    return result, blob, size, method.execute([x])[0], eager


def test_fp8_w8a8_exports_quantized_and_runs_like_modelopt(tmp_path, monkeypatch):
    # ReLU feeding an FP8 QuantizeLinear: onnxruntime's ReluQuantRewrite drops
    # it unless the fallback disables that rewrite (error 0.59 before).
    model = _quantized(mtq.FP8_DEFAULT_CFG)
    result, blob, size, out, eager = _export_and_run(model, tmp_path, monkeypatch,
                                                     compute_capabilities=FP8_TARGETS)
    assert set(result.report.quantization.values()) == {"fp8 W8A8 (ModelOpt)"}
    graph = onnx.load_from_string(blob.onnx).graph
    ops = [n.op_type for n in graph.node]
    assert ops.count("QuantizeLinear") == 3 and ops.count("DequantizeLinear") == 6
    assert sorted(w["dtype"] for w in blob.metadata["weights"]).count("float8") == 3
    assert size / _fp32_weight_bytes(model) <= 0.27
    torch.testing.assert_close(out, eager, atol=1e-5, rtol=1e-5)


def test_int8_w8a8_for_standard_tensorrt_runs_like_modelopt(tmp_path, monkeypatch):
    """Stand-in (labelled): standard TensorRT is not installable here, so the
    capability check is told the flavour is standard TensorRT; TensorRT-RTX's
    parser and builder and the onnxruntime fallback run the W8A8 graph."""
    model = _quantized(mtq.INT8_DEFAULT_CFG)
    monkeypatch.setattr(export_module, "target_flavor", lambda: "tensorrt")
    # onnxruntime runs the int8 Q/DQ + Gemm with its own rounding (ties, integer
    # GEMM): allow 2 quantization steps of the last layer's input, in the export's
    # run check and below.
    step = float(model[4].input_quantizer.amax) / 127
    row_l1 = float(model[4].weight.detach().abs().sum(dim=1).max())
    result, blob, size, out, eager = _export_and_run(model, tmp_path, monkeypatch,
                                                     run_check_tolerance=2 * step * row_l1)
    assert set(result.report.quantization.values()) == {"int8 W8A8 (ModelOpt)"}
    graph = onnx.load_from_string(blob.onnx).graph
    assert [n.op_type for n in graph.node].count("QuantizeLinear") == 3
    assert sorted(w["dtype"] for w in blob.metadata["weights"]).count("int8") == 3
    assert size / _fp32_weight_bytes(model) <= 0.27
    assert (out - eager).abs().max() <= 2 * step * row_l1


def test_int8_w8a8_on_tensorrt_rtx_is_refused(tmp_path):
    model = _quantized(mtq.INT8_DEFAULT_CFG)
    with pytest.raises(QuantizationError, match="int8_w8a8 on tensorrt_rtx.*no INT8 activation"):
        export_program(model, (_x(1),), tmp_path / "q.pte", progress=None)
    assert not (tmp_path / "q.pte").exists()


def test_fp8_below_sm89_is_refused(tmp_path):
    model = _quantized(mtq.FP8_DEFAULT_CFG)
    with pytest.raises(QuantizationError, match="fp8_w8a8 needs compute capability SM89"):
        export_program(model, (_x(1),), tmp_path / "q.pte", progress=None)


def test_block_and_unsigned_quantizers_are_refused():
    model = _quantized(mtq.INT8_DEFAULT_CFG)
    model[2].input_quantizer.unsigned = True
    with pytest.raises(QuantizationError, match="layer '2'.*unsigned.*zero point 0"):
        lower_modelopt(model)
    model = _quantized(mtq.INT8_DEFAULT_CFG)
    model[0].weight_quantizer.block_sizes = {-1: 128}
    with pytest.raises(QuantizationError, match="layer '0'.*block quantization"):
        lower_modelopt(model)
