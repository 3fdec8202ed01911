"""The fallback runs Q/DQ graphs as written, as TensorRT sees them: three of
onnxruntime's rewrites that change the numbers are turned off in its sessions
(runtime/onnxruntime/capi.py), and each test here fails with its rewrite on.

- DequantizeLinear + MatMul over constant weights (inline ONNX) becomes
  MatMulNBits, whose default accuracy level quantizes the activations too
  (weight-only layers off by ~1e-2): accuracy level 1.
- QDQS8ToU8Transformer turns int8 activations into uint8 for u8 x s8 kernels
  whose pairwise products saturate on x86 without VNNI (W8A8 off by ~1e-2):
  disabled.
- WeightBiasQuantization rounds a W8A8 Conv's float bias to int32 steps of
  scale_x * scale_w (Conv-ReLU-Conv off by ~9e-4): disabled.
"""
from __future__ import annotations

import pytest
import torch
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from executorch_tensorrt.aot import export as export_module
from executorch_tensorrt.quantization import TensorRTQuantizer


def _converted(scheme: str, x: torch.Tensor) -> torch.fx.GraphModule:
    torch.manual_seed(0)
    fp32 = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                               torch.nn.Linear(128, 64)).eval()
    gm = prepare_pt2e(torch.export.export(fp32, (x,)).module(), TensorRTQuantizer(scheme))
    gm(x)
    return convert_pt2e(gm)


@pytest.mark.parametrize("layout", ["inline_weights", "external_weights"])
def test_weight_only_linears_match_eager_quantized(layout, tmp_path, allow_fallback):
    x = torch.randn(4, 8, 64)  # 3-D: MatMul, not Gemm, which is what onnxruntime fuses
    # The run check compares with the eager quantized model at 1e-5 and raises otherwise.
    result = export_module.export_program(_converted("int8_weight_only", x), (x,),
                                          tmp_path / "m.pte", progress=None,
                                          run_check_tolerance=1e-5, **{layout: True})
    assert result.run_check.ok and result.report.quantization


def test_int8_w8a8_vit_matches_eager_quantized(tmp_path, allow_fallback, monkeypatch):
    """Stand-in (labelled): INT8 W8A8 needs standard TensorRT, which cannot be
    installed here, so the capability check is told that flavour. A small
    transformers ViT (random weights): with QDQS8ToU8Transformer on, its
    classifier's QGemm is 1e-2 off and the run check refuses the program."""
    from transformers import ViTConfig, ViTForImageClassification

    monkeypatch.setattr(export_module, "target_flavor", lambda: "tensorrt")
    torch.manual_seed(0)
    vit = ViTForImageClassification(ViTConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        image_size=32, patch_size=8, num_labels=10)).eval()
    x = torch.randn(8, 3, 32, 32)
    gm = prepare_pt2e(torch.export.export(vit, (x,)).module(), TensorRTQuantizer("int8_w8a8"))
    for seed in range(4):
        gm(torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(seed)))
    result = export_module.export_program(convert_pt2e(gm), (x,), tmp_path / "w.pte",
                                          progress=None, run_check_tolerance=1e-4)
    assert result.run_check.ok and "int8 W8A8" in " ".join(result.report.quantization.values())


@pytest.mark.parametrize("layout", ["inline_weights", "external_weights"])
def test_int8_w8a8_conv_keeps_its_float_bias(layout, tmp_path, allow_fallback, monkeypatch):
    """Stand-in (labelled) as above. WeightBiasQuantization rounds the float
    bias of a W8A8 Conv-ReLU feeding a QuantizeLinear to int32 steps of
    scale_x * scale_w; activations near a rounding boundary of the next
    quantizer then land one step off, and the run check refuses the program."""
    monkeypatch.setattr(export_module, "target_flavor", lambda: "tensorrt")
    torch.manual_seed(0)
    cnn = torch.nn.Sequential(torch.nn.Conv2d(8, 32, 3), torch.nn.ReLU(),
                              torch.nn.Conv2d(32, 8, 3)).eval()
    x = torch.randn(2, 8, 12, 12)
    gm = prepare_pt2e(torch.export.export(cnn, (x,)).module(), TensorRTQuantizer("int8_w8a8"))
    gm(x)
    result = export_module.export_program(convert_pt2e(gm), (x,), tmp_path / "c.pte",
                                          progress=None, run_check_tolerance=1e-5,
                                          **{layout: True})
    assert result.run_check.ok and "int8 W8A8" in " ".join(result.report.quantization.values())


def _tie(scale: float) -> float:
    """A float32 x that eager PyTorch's quantize_per_tensor (x * (1 / scale))
    and QuantizeLinear (x / scale) round to different int8 steps."""
    import numpy as np

    quantize = torch.ops.quantized_decomposed.quantize_per_tensor.default
    for k in range(-120, 120):
        x = np.float32((k + 0.5) * scale)
        for _ in range(80):
            eager = quantize(torch.tensor([x]), scale, 0, -128, 127, torch.int8).item()
            if eager != int(np.rint(x / np.float32(scale))):
                return float(x)
            x = np.nextafter(x, np.float32(np.inf))
    raise AssertionError(f"no rounding tie found for scale {scale}")


def test_int8_w8a8_rounding_tie_passes_the_default_run_check(tmp_path, allow_fallback,
                                                             monkeypatch):
    """Stand-in (labelled) as above. The example input holds one activation on
    a rounding tie: eager PyTorch and onnxruntime quantize it one step apart,
    which moves the output by |weight| x step (0.025 here, 1.5 % of the
    output). The program is right; export's default check allows W8A8 programs
    that (run_check.ACTIVATION_TOLERANCE); at the float tolerance it refuses."""
    from executorch_tensorrt.aot.checks.run_check import RunCheckError

    monkeypatch.setattr(export_module, "target_flavor", lambda: "tensorrt")
    lin = torch.nn.Linear(16, 4, bias=False).eval()
    with torch.no_grad():
        lin.weight.fill_(0.25)
    calibration = torch.linspace(-12.7, 12.7, 16).reshape(1, 16)
    gm = prepare_pt2e(torch.export.export(lin, (calibration,)).module(),
                      TensorRTQuantizer("int8_w8a8"))
    gm(calibration)
    model = convert_pt2e(gm)
    scale = next(n.args[1] for n in model.graph.nodes
                 if n.target == torch.ops.quantized_decomposed.quantize_per_tensor.default)
    x = torch.zeros(1, 16)
    x[0, 0] = _tie(scale)
    result = export_module.export_program(model, (x,), tmp_path / "t.pte", progress=None)
    (method,) = result.run_check.methods
    largest = max(1.0, model(x).abs().max().item())  # the tolerance is relative to it
    assert result.run_check.ok and method.tolerance == pytest.approx(3e-2 * largest)
    assert method.max_abs_diff == pytest.approx(0.25 * scale, rel=1e-3)  # one step, one tie
    with pytest.raises(RunCheckError, match="differs from eager"):
        export_module.export_program(model, (x,), tmp_path / "f.pte", progress=None,
                                     run_check_tolerance=1e-3)
