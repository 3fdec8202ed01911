"""The output step the PT2E quantization bench measures differences in
(tools/bench/output_steps.py): the e4m3 step at a magnitude, and the step of
a Linear output layer behind an int8 / fp8 activation quantizer."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "bench"))
import output_steps  # noqa: E402

from executorch_tensorrt.quantization import TensorRTQuantizer, lower_qdq  # noqa: E402


@pytest.mark.parametrize("scale", [1.0, 0.0123])
def test_fp8_step_is_the_gap_to_the_next_e4m3_value(scale):
    codes = torch.arange(0, 0x7F, dtype=torch.uint8)  # +0 .. 448, in order
    values = codes.view(torch.float8_e4m3fn).float()
    gaps = values[1:] - values[:-1]
    for at in (values[:-1], (values[:-1] + values[1:]) / 2):  # on a value, and between two
        assert torch.equal(output_steps.fp8_step(at * scale, scale), gaps * scale)
    assert float(output_steps.fp8_step(torch.tensor(-3.1), 1.0)) == 0.25  # sign ignored


@pytest.mark.parametrize("scheme", ["int8_w8a8", "fp8_w8a8"])
def test_linear_output_step_is_one_input_step_times_the_largest_weight(scheme):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 4)).eval()
    x = torch.randn(3, 16)
    gm = prepare_pt2e(torch.export.export(model, (x,)).module(), TensorRTQuantizer(scheme))
    gm(x)
    flavor = "tensorrt" if scheme == "int8_w8a8" else "tensorrt_rtx"
    ref = lower_qdq(convert_pt2e(gm), flavor, ("SM89",), False)[0]
    y, steps = output_steps.output_and_steps(ref, (x,))
    assert torch.equal(y, ref(x))
    spec = output_steps.output_layer(ref)
    run = torch.fx.Interpreter(ref, garbage_collect_values=False)
    run.run(x)
    w = run.env[spec.layer.args[1]].T  # the dequantized weight, [in, out]
    for b in range(3):
        for i in range(4):
            if scheme == "int8_w8a8":
                expected = spec.scale * w[:, i].abs().max()
            else:  # fp8: the step at each dequantized input, largest |W_ij| times it
                dq = (x[b] / spec.scale).clamp(-448, 448).to(torch.float8_e4m3fn).float()
                expected = (output_steps.fp8_step(dq * spec.scale, spec.scale)
                            * w[:, i].abs()).max()
            assert float(steps[b, i]) == pytest.approx(float(expected), rel=1e-5)
