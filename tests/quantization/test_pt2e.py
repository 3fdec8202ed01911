"""TensorRTQuantizer (PT2E: prepare_pt2e / calibrate / convert_pt2e) on a small
CNN (Conv2d + Linear): each scheme exported with TensorRT-RTX's real builder,
weights stored quantized in named data, the onnxruntime fallback run through
ExecuTorch's runtime and compared with the eager quantized model; refusals
(INT8 W8A8 on TensorRT-RTX, FP8 below SM89, asymmetric zero points, Q/DQ left
outside TensorRT) checked with the export's own errors and reports."""
from __future__ import annotations

import onnx
import pytest
import torch
from executorch.runtime import Runtime
from torchao.quantization.pt2e.observer import MinMaxObserver
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
from torchao.quantization.pt2e.quantizer import QuantizationAnnotation, QuantizationSpec

import executorch_tensorrt  # noqa: F401 - registers the backend
from executorch_tensorrt.aot import export as export_module
from executorch_tensorrt.aot.export import export_program
from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.quantization import QuantizationError, TensorRTQuantizer, lower_qdq
from tests.helpers import artifact_bytes, run_forward, tensorrt_blobs

FP8_TARGETS = ("SM89", "SM120")


def _cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(16 * 6 * 6, 256)).eval()


def _x(seed: int = 1) -> torch.Tensor:
    return torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(seed))


def _converted(quantizer) -> torch.fx.GraphModule:
    gm = prepare_pt2e(torch.export.export(_cnn(), (_x(),)).module(), quantizer)
    for seed in range(2, 10):  # calibration
        gm(_x(seed))
    return convert_pt2e(gm)


def _fp32_weight_bytes() -> int:
    return sum(p.numel() * 4 for n, p in _cnn().named_parameters() if n.endswith("weight"))


def _graph_and_weights(result):
    (blob_bytes,) = tensorrt_blobs(result.path)
    blob = read_blob(blob_bytes)
    return onnx.load_from_string(blob.onnx), blob.metadata["weights"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """scheme -> (converted graph module, export result); exported once each."""
    tmp = tmp_path_factory.mktemp("pt2e")
    done = {}
    for scheme, options in (("int8_weight_only", {}),
                            ("fp8_w8a8", {"compute_capabilities": FP8_TARGETS})):
        gm = _converted(TensorRTQuantizer(scheme))
        done[scheme] = gm, export_program(gm, (_x(),), tmp / f"{scheme}.pte", progress=None,
                                          external_weights=True, **options)
    return done


@pytest.mark.parametrize("scheme, dtype, dq_count, q_count", [
    ("int8_weight_only", "int8", 2, 0), ("fp8_w8a8", "float8", 4, 2)])
def test_weights_stored_quantized_and_qdq_reach_tensorrt(exported, scheme, dtype, dq_count,
                                                         q_count):
    _, result = exported[scheme]
    graph, weights = _graph_and_weights(result)
    assert result.report.partitions and not result.report.rejected
    ops = [n.op_type for n in graph.graph.node]
    assert ops.count("DequantizeLinear") == dq_count and ops.count("QuantizeLinear") == q_count
    assert {o.domain: o.version for o in graph.opset_import}[""] >= (21 if q_count else 18)
    # The Linear's weight (the big one) is in named data, quantized, once
    # (beside its float bias).
    assert sorted((w["dtype"], w["shape"]) for w in weights) == [("float32", [256]),
                                                                 (dtype, [256, 576])]
    size = artifact_bytes(result)
    assert size / _fp32_weight_bytes() <= 0.27


@pytest.mark.parametrize("scheme", ["int8_weight_only", "fp8_w8a8"])
def test_fallback_matches_the_eager_quantized_model(exported, scheme, monkeypatch):
    gm, result = exported[scheme]
    monkeypatch.setenv("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")
    x = _x(20)
    out = run_forward(result, x)
    reference, _ = lower_qdq(gm, "tensorrt_rtx", FP8_TARGETS, False)
    with torch.no_grad():
        eager = reference(x)
        fp32 = _cnn()(x)
    diff = float((out - eager).abs().max())
    # Float rounding only (far inside 2 quantization steps of any scale here),
    # while quantization itself moves the output much more.
    assert diff <= 1e-5
    assert float((eager - fp32).abs().max()) > 10 * diff


def test_report_lines(exported):
    assert exported["int8_weight_only"][1].report.quantization == {
        "0": "int8 weight-only (per channel)", "3": "int8 weight-only (per channel)"}
    assert set(exported["fp8_w8a8"][1].report.quantization.values()) == {
        "fp8 e4m3 W8A8 (per tensor)"}


@pytest.fixture(scope="module")
def w8a8():
    return _converted(TensorRTQuantizer("int8_w8a8"))


def test_int8_w8a8_on_tensorrt_rtx_is_refused_or_runs_weight_only(w8a8, tmp_path, monkeypatch):
    with pytest.raises(QuantizationError, match="TensorRT-RTX has no INT8 activation "
                                                "quantization.*allow_unquantized"):
        export_program(w8a8, (_x(),), tmp_path / "refused.pte", progress=None)
    assert not (tmp_path / "refused.pte").exists()
    result = export_program(w8a8, (_x(),), tmp_path / "wo.pte", progress=None,
                            external_weights=True, allow_unquantized=True)
    graph, _ = _graph_and_weights(result)
    assert [n.op_type for n in graph.graph.node].count("QuantizeLinear") == 0
    assert all(line.startswith("int8 weight-only (per channel); activations float: int8_w8a8 "
                               "on tensorrt_rtx") for line in result.report.quantization.values())


def test_int8_w8a8_for_standard_tensorrt(w8a8, tmp_path, monkeypatch):
    """Stand-in (labelled): standard TensorRT is not installable here, so the
    capability check is told the flavour is standard TensorRT; TensorRT-RTX's
    parser and builder and the onnxruntime fallback run the W8A8 graph."""
    monkeypatch.setattr(export_module, "target_flavor", lambda: "tensorrt")
    result = export_program(w8a8, (_x(),), tmp_path / "w8a8.pte", progress=None,
                            external_weights=True)
    graph, weights = _graph_and_weights(result)
    quantize_nodes = [n for n in graph.graph.node if n.op_type == "QuantizeLinear"]
    assert len(quantize_nodes) == 2
    zero_points = {i.name: i for i in graph.graph.initializer}
    for node in quantize_nodes:  # symmetric: zero point 0 (or none)
        if len(node.input) > 2:
            assert not onnx.numpy_helper.to_array(zero_points[node.input[2]]).any()
    assert sorted(w["dtype"] for w in weights) == ["float32", "int8"]
    monkeypatch.setenv("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")
    x = _x(30)
    with torch.no_grad():
        eager = w8a8(x)
    assert float((run_forward(result, x) - eager).abs().max()) <= 1e-5


def test_fp8_below_sm89_is_refused_or_exported_float(tmp_path):
    gm = _converted(TensorRTQuantizer("fp8_w8a8"))
    with pytest.raises(QuantizationError, match="SM89 or newer, but the engine targets SM75"):
        export_program(gm, (_x(),), tmp_path / "refused.pte", progress=None)
    result = export_program(gm, (_x(),), tmp_path / "float.pte", progress=None,
                            allow_unquantized=True)
    graph, weights = _graph_and_weights(result)
    ops = {n.op_type for n in graph.graph.node}
    assert not ops & {"QuantizeLinear", "DequantizeLinear"}
    assert all(w["dtype"] == "float32" for w in weights)
    assert all(line.startswith("not quantized: fp8_w8a8 needs compute capability SM89")
               for line in result.report.quantization.values())
    assert set(result.report.quantization) == {"0", "3"}


class _AsymmetricQuantizer(TensorRTQuantizer):
    """XNNPACK-style uint8 affine activations (zero point != 0)."""

    def annotate(self, model):
        spec = QuantizationSpec(dtype=torch.uint8, quant_min=0, quant_max=255,
                                qscheme=torch.per_tensor_affine,
                                observer_or_fake_quant_ctr=MinMaxObserver)
        for node in model.graph.nodes:
            if node.target == torch.ops.aten.linear.default:
                node.meta["quantization_annotation"] = QuantizationAnnotation(
                    input_qspec_map={node.args[0]: spec}, _annotated=True)
        return super().annotate(model)


def test_asymmetric_zero_points_are_refused_or_run_float(tmp_path):
    gm = _converted(_AsymmetricQuantizer("int8_weight_only"))
    with pytest.raises(QuantizationError, match=r"layer '3' \(Linear\): activation dtype "
                                                r"torch.uint8 is not one TensorRT"):
        export_program(gm, (_x(),), tmp_path / "a.pte", progress=None)
    result = export_program(gm, (_x(),), tmp_path / "b.pte", progress=None,
                            allow_unquantized=True)
    assert result.report.quantization["0"] == "int8 weight-only (per channel)"
    assert result.report.quantization["3"].startswith("not quantized: activation dtype")


@pytest.mark.parametrize("scheme, match", [
    ("fp8_weight_only", "has no scheme 'fp8_weight_only'"), ("uint4", "no uint4"),
    ("fp4_w4a4", "has no scheme 'fp4_w4a4'"), ("int7", "unknown quantization scheme")])
def test_quantizer_refuses_schemes_it_has_not(scheme, match):
    with pytest.raises(QuantizationError, match=match):
        TensorRTQuantizer(scheme)


def test_a_qdq_pair_split_across_partitions_is_refused(exported, tmp_path):
    gm, _ = exported["fp8_w8a8"]
    with pytest.raises(QuantizationError, match="quantize/dequantize nodes left outside "
                                                "TensorRT: etrt_quant_quantize_fp8"):
        export_program(gm, (_x(),), tmp_path / "split.pte", progress=None,
                       compute_capabilities=FP8_TARGETS,
                       exclude_ops={"etrt_quant.quantize_fp8.default"})
    assert not (tmp_path / "split.pte").exists()


def test_fp8_relu_feeding_a_quantize_runs_as_written(tmp_path, monkeypatch):
    """Linear-ReLU-Linear in FP8 W8A8: the ReLU's output goes straight into an
    FP8 QuantizeLinear (zero point 0), which onnxruntime's ReluQuantRewrite
    would drop (largest |diff| 0.589 before the fallback disabled it)."""
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                              torch.nn.Linear(128, 32)).eval()
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(3))
    gm = prepare_pt2e(torch.export.export(mlp, (x,)).module(), TensorRTQuantizer("fp8_w8a8"))
    for seed in range(4, 12):
        gm(torch.randn(4, 64, generator=torch.Generator().manual_seed(seed)))
    gm = convert_pt2e(gm)
    monkeypatch.setenv("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")
    result = export_program(gm, (x,), tmp_path / "mlp.pte", progress=None,
                            compute_capabilities=FP8_TARGETS)  # the run check runs it too
    graph, _ = _graph_and_weights(result)
    assert "Relu" in [n.op_type for n in graph.graph.node]
    out = Runtime.get().load_program(result.path).load_method("forward").execute([x])[0]
    reference, _ = lower_qdq(gm, "tensorrt_rtx", FP8_TARGETS, False)
    with torch.no_grad():
        assert float((out - reference(x)).abs().max()) <= 1e-5
