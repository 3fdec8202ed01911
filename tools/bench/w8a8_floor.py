"""How far two correct eager runs of one INT8 W8A8 graph are apart, in output
steps: the floor under "within 2 quantization steps on every element"
(issue #22; docs/quantization.md).

    nice -n 10 .venv/bin/python tools/bench/w8a8_floor.py [cnn] [vit]

The models, inputs (1000 per model) and calibration are exactly those of
tools/bench/quantization_pt2e.py's int8_w8a8 rows. Run A is the eager
quantized graph as torch computes it (float32 sums: the reference of that
bench). Run B is the same graph with every linear / matmul / conv summed in
float64 and rounded once to float32: a more exact implementation, not a
different model. Both are printed as that bench prints the fallback: the
largest difference in output steps (output_steps.py) and the elements over 2.
"""
from __future__ import annotations

import sys
import warnings

import torch
from torch.fx import Interpreter

import quantization_pt2e as bench
from output_steps import output_and_steps

_SUMS = {torch.ops.aten.linear.default, torch.ops.aten.matmul.default, torch.ops.aten.bmm.default,
         torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.conv2d.default}


class Float64Sums(Interpreter):
    """The graph, with its products summed in float64, rounded once to float32."""

    def call_function(self, target, args, kwargs):
        if target in _SUMS:
            wide = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                    for a in args]
            return target(*wide, **kwargs).float()
        return super().call_function(target, args, kwargs)


def floor(model_name: str) -> tuple[str, float, int, int]:
    from executorch_tensorrt.aot.export import lower_qdq

    name, fp32, shape = getattr(bench, model_name)()
    inputs, models = bench.inputs_and_models(fp32, shape, 1000)
    graph = lower_qdq(models["int8_w8a8"], "tensorrt", None, False)[0]
    worst, over, elements = 0.0, 0, 0
    with torch.no_grad():
        for args in inputs:
            eager, step = output_and_steps(graph, args)
            exact = Float64Sums(graph).run(*args)
            exact = exact[0] if isinstance(exact, (tuple, list)) else exact
            steps = (exact - eager).abs() / step
            worst, over = max(worst, float(steps.max())), over + int((steps > 2).sum())
            elements += steps.numel()
    return name, worst, over, elements


def main() -> None:
    warnings.simplefilter("ignore")
    print("| model | int8_w8a8: float32 sums vs float64 sums, largest diff in output steps "
          "| elements > 2 steps |")
    print("|---|---|---|")
    for model_name in sys.argv[1:] or ["cnn", "vit"]:
        name, worst, over, elements = floor(model_name)
        print(f"| {name} | {worst:.1f} | {over} of {elements:,} |", flush=True)


if __name__ == "__main__":
    main()
