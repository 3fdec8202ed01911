"""One quantization step at a quantized model's output, per output element, and
where a difference of several steps comes from (tools/bench/quantization_pt2e.py).

The step of an output element (docs/quantization.md, "Measured: ..._pt2e.py"):
- the output is produced by a dequantize: that quantizer's step at the element;
- else the output layer is a Linear y = x W^T + b. One step of the last
  activation quantizer on one input element x_j moves y_i by |W_ij| * step(x_j);
  the output step is the largest such move, max_j |W_ij| * step(x_j);
- a weight-only Linear (float x) has no activation quantizer: one step of the
  weight quantizer on the largest input, max_j |x_j| * weight_scale_i.
int8's step is its scale; fp8 (e4m3, 3 mantissa bits) has a step that grows
with the magnitude: scale * 2^(floor(log2(|x| / scale)) - 3), and never less
than the subnormal step scale * 2^-9.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 - defines quantized_decomposed ops
from torch.fx import GraphModule, Interpreter, Node

import executorch_tensorrt.quantization.workflow  # noqa: F401 - defines the etrt_quant ops

_QD = torch.ops.quantized_decomposed
_ET = torch.ops.etrt_quant
INT8_QUANTIZE = {_QD.quantize_per_tensor.default}
ACT_DEQUANTIZE = {_QD.dequantize_per_tensor.default: "int8", _ET.dequantize_fp8.default: "fp8"}
FP8_SUBNORMAL_EXP = -9  # e4m3: 2^-6 smallest normal, 3 mantissa bits


def fp8_step(x: torch.Tensor, scale: float) -> torch.Tensor:
    """The distance between neighbouring e4m3 values at |x| (x in real units)."""
    exp = torch.floor(torch.log2(x.abs() / scale)) - 3  # log2(0) = -inf: subnormal
    return scale * torch.exp2(torch.clamp(exp, min=FP8_SUBNORMAL_EXP))


def activation_step(kind: str, x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.full_like(x, scale) if kind == "int8" else fp8_step(x, scale)


@dataclass(frozen=True)
class OutputLayer:
    """How the output step is read off the graph."""
    output: Node                  # the node the graph returns first
    layer: Node | None            # the Linear producing it (None: a dequantize does)
    kind: str | None              # "int8" / "fp8" activation quantizer, None: weight-only
    scale: float | None           # that quantizer's scale
    weight_scale: Node | None     # weight-only: the per-channel scale constant


def _scalar(gm: GraphModule, arg) -> float:
    return float(_attr(gm, arg.target)) if isinstance(arg, Node) else float(arg)


def output_layer(gm: GraphModule) -> OutputLayer:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    first = out.args[0][0] if isinstance(out.args[0], (tuple, list)) else out.args[0]
    if first.target in ACT_DEQUANTIZE:
        return OutputLayer(first, None, ACT_DEQUANTIZE[first.target], _scalar(gm, first.args[1]),
                           None)
    if first.target != torch.ops.aten.linear.default:
        raise ValueError(f"the output comes from {first.target} ({first.name}), neither a "
                         "dequantize nor a Linear: no output step is defined for it")
    x, w = first.args[0], first.args[1]
    if x.target in ACT_DEQUANTIZE:
        return OutputLayer(first, first, ACT_DEQUANTIZE[x.target], _scalar(gm, x.args[1]), None)
    if w.target == _QD.dequantize_per_channel.default and int(w.args[3]) == 0:
        return OutputLayer(first, first, None, None, w.args[1])
    raise ValueError(f"{first.name}: neither its input nor its weight is dequantized per tensor "
                     f"/ per output channel ({x.target}, {w.target}): no output step defined")


class _Capture(Interpreter):
    """Runs the graph, keeping the values of `keep`; `override` replaces a node's result."""

    def __init__(self, gm, keep, override=None):
        super().__init__(gm)
        self.keep, self.kept, self.override = set(keep), {}, override or {}

    def run_node(self, n):
        result = super().run_node(n)
        if n in self.override:
            result = self.override[n](result, self.env)
        if n in self.keep:
            self.kept[n] = result
        return result


def output_and_steps(gm: GraphModule, args) -> tuple[torch.Tensor, torch.Tensor]:
    """The graph's first output and its step per element (the module docstring)."""
    spec = output_layer(gm)
    keep = [spec.output] + ([spec.layer.args[0], spec.layer.args[1]] if spec.layer else [])
    run = _Capture(gm, keep)
    with torch.no_grad():
        run.run(*args)
    y = run.kept[spec.output]
    if spec.layer is None:
        return y, activation_step(spec.kind, y, spec.scale)
    x, w = run.kept[spec.layer.args[0]], run.kept[spec.layer.args[1]]
    if spec.kind is None:  # weight-only
        return y, x.abs().amax(-1, keepdim=True) * _attr(gm, spec.weight_scale.target).float()
    step = activation_step(spec.kind, x, spec.scale)
    return y, (step.unsqueeze(-2) * w.abs()).amax(-1)


def _attr(gm: GraphModule, target: str) -> torch.Tensor:
    value = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def dividing(gm: GraphModule) -> dict:
    """Overrides making each int8 activation quantizer round x / scale (ONNX
    QuantizeLinear's formula) where quantized_decomposed rounds x * (1 / scale)."""
    def redo(node):
        def quantize(_, env):
            x, scale = env[node.args[0]], _scalar(gm, node.args[1])
            return torch.clamp(torch.round(x / scale), node.args[3], node.args[4]).to(torch.int8)
        return quantize
    return {n: redo(n) for n in gm.graph.nodes if n.target in INT8_QUANTIZE}


def output_dividing(gm: GraphModule, args) -> torch.Tensor:
    run = _Capture(gm, [output_layer(gm).output], dividing(gm))
    with torch.no_grad():
        run.run(*args)
    return run.kept[output_layer(gm).output]


@dataclass(frozen=True)
class Tie:
    """An int8 activation that x * (1 / scale) and x / scale round differently."""
    quantizer: str     # its node and the layer it feeds
    index: tuple
    multiplied: float  # x * (1 / scale), what the eager op rounds
    divided: float     # x / scale, what QuantizeLinear rounds


def first_tie(gm: GraphModule, args) -> Tie | None:
    quantizers = [n for n in gm.graph.nodes if n.target in INT8_QUANTIZE]
    run = _Capture(gm, [q.args[0] for q in quantizers])
    with torch.no_grad():
        run.run(*args)
    for node in quantizers:
        x, scale = run.kept[node.args[0]], _scalar(gm, node.args[1])
        mul, div = x * (1.0 / scale), x / scale
        differ = (torch.round(mul) != torch.round(div)).nonzero()
        if len(differ):
            index = tuple(int(i) for i in differ[0])
            layer = next(iter(next(iter(node.users)).users))  # quantize -> dequantize -> layer
            stack = layer.meta.get("nn_module_stack") or {}
            path = list(stack.values())[-1][0] if stack else ""
            return Tie(f"{node.name}, the input of {layer.name} (module {path!r})", index,
                       float(mul[index]), float(div[index]))
    return None
