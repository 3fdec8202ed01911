"""quantize(model, example_inputs, scheme="int8_w8a8" | "fp8_w8a8",
calibration=...): one call runs our PT2E quantizer (prepare_pt2e, calibration,
convert_pt2e); the result exports with TensorRT taking the quantized layers,
runs through the onnxruntime fallback like the eager quantized model, and is
refused where the flavour or targets cannot run it; bad calibration data gets
a clear error."""
from __future__ import annotations

import pytest
import torch

import executorch_tensorrt  # noqa: F401 - registers the backend
from executorch_tensorrt.aot.export import export_program
from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.quantization import QuantizationError, quantize
from executorch_tensorrt.quantization.importers.qdq_graph import QUANTIZE, lower_qdq
from tests.helpers import artifact_bytes, run_forward, tensorrt_blobs

FP8_TARGETS = ("SM89", "SM120")


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 64)).eval()


def _x(seed: int, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(4, 256, generator=torch.Generator().manual_seed(seed))


def _input_scale(gm: torch.fx.GraphModule) -> float:
    """The scale of the quantize node on the model's input (the first layer's activation)."""
    (x,) = [n for n in gm.graph.nodes if n.op == "placeholder"]
    (q,) = [u for u in x.users if u.target in QUANTIZE]
    return float(q.args[1])


def test_fp8_w8a8_in_one_call_exports_and_runs_like_the_eager_model(tmp_path, monkeypatch):
    fp32 = _mlp()
    before = {k: v.clone() for k, v in fp32.state_dict().items()}
    gm = quantize(fp32, (_x(1),), scheme="fp8_w8a8",
                  calibration=[(_x(seed),) for seed in range(2, 8)])
    assert all(torch.equal(v, fp32.state_dict()[k]) for k, v in before.items())  # untouched
    with pytest.raises(QuantizationError, match="SM89 or newer, but the engine targets SM75"):
        export_program(gm, (_x(1),), tmp_path / "fp8.pte", progress=None)  # RTX's defaults
    monkeypatch.setenv("EXECUTORCH_TENSORRT_FALLBACK", "onnxruntime")
    result = export_program(gm, (_x(1),), tmp_path / "fp8.pte", progress=None,
                            external_weights=True, compute_capabilities=FP8_TARGETS)
    assert result.report.partitions and not result.report.rejected
    assert set(result.report.quantization.values()) == {"fp8 e4m3 W8A8 (per tensor)"}
    (blob,) = tensorrt_blobs(result.path)
    dtypes = sorted(w["dtype"] for w in read_blob(blob).metadata["weights"])
    assert dtypes == ["float32", "float8", "float8"]  # the big bias stays float
    weights = sum(p.numel() * 4 for n, p in fp32.named_parameters() if n.endswith("weight"))
    size = artifact_bytes(result)
    assert size / weights <= 0.27
    x = _x(40)
    out = run_forward(result, x)
    reference, _ = lower_qdq(gm, "tensorrt_rtx", FP8_TARGETS, False)
    with torch.no_grad():
        eager, eager_fp32 = reference(x), fp32(x)
    diff = float((out - eager).abs().max())
    assert diff <= 1e-5
    assert float((eager - eager_fp32).abs().max()) > 10 * diff  # quantization did something


def test_int8_w8a8_calibrates_on_the_batches_given_and_is_refused_on_rtx(tmp_path):
    fp32 = _mlp()
    with pytest.warns(UserWarning, match="one batch is weak calibration"):
        weak = quantize(fp32, (_x(1),), scheme="int8_w8a8")
    calibrated = quantize(fp32, (_x(1),), scheme="int8_w8a8",
                          calibration=[(_x(seed, 10.0),) for seed in range(2, 5)])
    # Symmetric int8 activations: scale = max|x| / 127.5 over what was observed.
    assert _input_scale(weak) == pytest.approx(float(_x(1).abs().max()) / 127.5, rel=1e-5)
    largest = max(float(_x(seed, 10.0).abs().max()) for seed in range(2, 5))
    assert _input_scale(calibrated) == pytest.approx(largest / 127.5, rel=1e-5)
    with pytest.raises(QuantizationError, match="TensorRT-RTX has no INT8 activation "
                                                "quantization.*allow_unquantized"):
        export_program(calibrated, (_x(1),), tmp_path / "refused.pte", progress=None)
    assert not (tmp_path / "refused.pte").exists()


@pytest.mark.parametrize("calibration, match", [
    ([], "calibration is empty"),
    ([(_x(2),), [1, 2]], "calibration batch 1 is a list, not a tuple of tensors"),
    ([(torch.randn(4, 100),)], r"calibration batch 0 \(shapes \[\[4, 100\]\]\) failed in the "
                               "model: RuntimeError"),
    (torch.randn(4, 256), "calibration must be an iterable of input tuples"),
])
def test_bad_calibration_is_refused(calibration, match):
    with pytest.raises(QuantizationError, match=match):
        quantize(_mlp(), (_x(1),), scheme="fp8_w8a8", calibration=calibration)


def test_activation_schemes_need_example_inputs_and_weight_only_takes_no_calibration():
    with pytest.raises(QuantizationError, match="'int8_w8a8' quantizes activations: pass "
                                                "example_inputs"):
        quantize(_mlp(), scheme="int8_w8a8")
    with pytest.raises(QuantizationError, match="weight-only and takes no calibration"):
        quantize(_mlp(), (_x(1),), scheme="int8_weight_only", calibration=[(_x(2),)])
