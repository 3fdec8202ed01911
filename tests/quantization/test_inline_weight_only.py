"""A weight-only quantized Linear stack exported with inline weights (the ONNX
carries the int8 weights as its own constants) runs in the fallback as the
eager quantized model computes it. onnxruntime fuses DequantizeLinear + MatMul
over constant weights into MatMulNBits, whose default accuracy level also
quantizes the activations: without the session's accuracy level 1
(runtime/onnxruntime/capi.py) this program differs by ~1e-2 and its run check
fails. With named-data weights (the default) onnxruntime does not own the
weights and does not fuse, so both layouts are checked."""
from __future__ import annotations

import pytest
import torch
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from executorch_tensorrt.aot import export as export_module
from executorch_tensorrt.quantization import TensorRTQuantizer


@pytest.mark.parametrize("layout", ["inline_weights", "external_weights"])
def test_weight_only_linears_match_eager_quantized(layout, tmp_path, allow_fallback):
    torch.manual_seed(0)
    fp32 = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                               torch.nn.Linear(128, 64)).eval()
    x = torch.randn(4, 8, 64)  # 3-D: MatMul, not Gemm, which is what onnxruntime fuses
    gm = prepare_pt2e(torch.export.export(fp32, (x,)).module(),
                      TensorRTQuantizer("int8_weight_only"))
    gm(x)
    model = convert_pt2e(gm)
    # The run check compares with the eager quantized model at 1e-5 and raises otherwise.
    result = export_module.export_program(model, (x,), tmp_path / "m.pte", progress=None,
                                          run_check_tolerance=1e-5, **{layout: True})
    assert result.run_check.ok and result.report.quantization
