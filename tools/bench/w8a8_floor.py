"""How far two correct eager runs of one W8A8 graph (int8_w8a8 and fp8_w8a8)
are apart, in output steps: the floor under "within 2 quantization steps on
every element" (issue #22; docs/quantization.md).

    nice -n 10 .venv/bin/python tools/bench/w8a8_floor.py [cnn] [vit] [--inputs 1000]

The models, inputs (--inputs per model) and calibration are exactly those of
tools/bench/quantization_pt2e.py's int8_w8a8 and fp8_w8a8 rows run with the
same --inputs (its calibration batches come after the inputs from one
generator, so --inputs changes the calibration too), and so is
each graph (lowered as that bench lowers its reference: int8 for standard
TensorRT, fp8 for its FP8 targets). Run A is the eager quantized graph as
torch computes it (float32 sums: the reference of that bench). Run B is the
same graph with every linear / matmul / conv summed in float64 and rounded
once to float32: a more exact implementation, not a different model. Both are
printed as that bench prints the fallback: the largest difference in output
steps (output_steps.py) and the elements over 2.
"""
from __future__ import annotations

import argparse
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


# Each scheme lowered as quantization_pt2e.py lowers its reference: (flavour, targets).
LOWERING = {"int8_w8a8": ("tensorrt", None), "fp8_w8a8": ("tensorrt_rtx", bench.FP8_TARGETS)}


def floor(model_name: str, n_inputs: int) -> list[tuple[str, str, float, int, int]]:
    """(model, scheme, largest diff in steps, elements > 2 steps, elements) per scheme."""
    from executorch_tensorrt.aot.export import lower_qdq

    name, fp32, shape = getattr(bench, model_name)()
    inputs, models = bench.inputs_and_models(fp32, shape, n_inputs)
    rows = []
    for scheme, (flavor, targets) in LOWERING.items():
        graph = lower_qdq(models[scheme], flavor, targets, False)[0]
        worst, over, elements = 0.0, 0, 0
        with torch.no_grad():
            for args in inputs:
                eager, step = output_and_steps(graph, args)
                exact = Float64Sums(graph).run(*args)
                exact = exact[0] if isinstance(exact, (tuple, list)) else exact
                steps = (exact - eager).abs() / step
                worst, over = max(worst, float(steps.max())), over + int((steps > 2).sum())
                elements += steps.numel()
        rows.append((name, scheme, worst, over, elements))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", help="cnn, vit (default: both)")
    ap.add_argument("--inputs", type=int, default=1000)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    print("| model | scheme | float32 sums vs float64 sums, largest diff in output steps "
          "| elements > 2 steps |")
    print("|---|---|---|---|")
    for model_name in args.models or ["cnn", "vit"]:
        if model_name not in ("cnn", "vit"):
            ap.error(f"unknown model {model_name!r}; the models are cnn and vit")
        for name, scheme, worst, over, elements in floor(model_name, args.inputs):
            print(f"| {name} | {scheme} | {worst:.2f} | {over} of {elements:,} |", flush=True)


if __name__ == "__main__":
    main()
