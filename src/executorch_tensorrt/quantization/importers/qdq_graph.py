"""PT2E-quantized graphs (after `convert_pt2e`) checked and made ready for export.

`convert_pt2e` leaves `quantized_decomposed` quantize / dequantize nodes
around each annotated layer. torch.onnx translates them to QuantizeLinear /
DequantizeLinear, which TensorRT fuses into quantized Conv / GEMM layers when
their scales are constants and their zero points 0 (TensorRT is symmetric
only). `lower_qdq(gm, ...)` works on a copy of the graph module and:

- turns a weight-only Linear whose weight has zero points (int8 / uint8
  codes, per channel or per tensor) into the affine format's module
  (qdq_affine.py: TensorRT's symmetric GEMM plus an exact correction);
- refuses (QuantizationError, the layer named) what TensorRT cannot take:
  other non-zero zero points, weight / activation dtypes other than int8 and fp8
  e4m3, scales computed in the graph (dynamic quantization), mixed int8/fp8;
- classifies each Linear / Conv2d as a scheme (registry.py) and refuses a
  scheme the flavour or targets cannot run (INT8 W8A8 on TensorRT-RTX, FP8
  below SM89), unless `allow_unquantized`: then the layer runs with float
  activations (INT8 W8A8 -> INT8 weight-only) or entirely float, and its
  report line says why;
- folds a weight's quantize node (convert_pt2e(fold_quantize=False)) into an
  int8 / fp8 constant, so the weight is stored quantized, once;
- rewrites FP8 Q/DQ into formats/fp8.py's ops (TensorRT's cast semantics);
- reports the Linear layers whose weight TensorRTQuantizer("int4_weight_only")
  turned into etrt_quant.dequantize_int4 (pt2e.py): both flavours run them.

`check_qdq_delegated(edge)` refuses, after partitioning, a Q/DQ node that
TensorRT did not take (e.g. a pair split across partitions), naming it.
"""
from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 - defines quantized_decomposed ops
from torch.fx import GraphModule, Node

from ...errors import QuantizationError
from ..registry import refusal, steps_of
from .fx_nodes import LAYERS, graph_attr, layer_name
from .qdq_affine import to_affine

# The formats' pieces through the registry, never a format module by name.
_fp8, _int4 = steps_of("fp8"), steps_of("int4")
FP8 = _fp8.element_dtype
QUANTIZE_FP8, DEQUANTIZE_FP8 = _fp8.quantize_activation, _fp8.dequantize_activation
DEQUANTIZE_INT4 = _int4.dequantize_weight


def _qd(name: str, overload: str):
    packet = getattr(torch.ops.quantized_decomposed, name, None)
    return getattr(packet, overload, None) if packet is not None else None


def _ops(*specs: tuple[str, str]) -> frozenset:
    return frozenset(op for op in (_qd(n, o) for n, o in specs) if op is not None)


QUANTIZE = _ops(("quantize_per_tensor", "default"), ("quantize_per_tensor", "tensor"),
                ("quantize_per_channel", "default"))
DEQUANTIZE = _ops(("dequantize_per_tensor", "default"), ("dequantize_per_tensor", "tensor"),
                  ("dequantize_per_channel", "default"))
DYNAMIC = _ops(("choose_qparams", "tensor"), ("choose_qparams_symmetric", "tensor"))
_DTYPE_NAMES = {torch.int8: "int8", FP8: "fp8"}


def activation_quantization(graphs: Iterable[torch.fx.Graph]) -> str | None:
    """"fp8" or "int8" when a graph quantizes a value at run time (W8A8: the
    weights' own quantize ops are folded into constants before export), fp8
    first; None for float and weight-only graphs."""
    found = set()
    for graph in graphs:
        for node in graph.nodes:
            if node.target == QUANTIZE_FP8:
                found.add("fp8")
            elif node.target in QUANTIZE:
                found.add("int8")
    return "fp8" if "fp8" in found else "int8" if found else None


@dataclass(frozen=True)
class QParams:
    """One Q or DQ node's constants: dtype, scale and zero point (tensors), axis."""
    dtype: torch.dtype
    scale: torch.Tensor
    zero_point: torch.Tensor
    axis: int | None  # None: per tensor


def is_qdq_graph(model) -> bool:
    """A GraphModule with quantized_decomposed nodes (a convert_pt2e result)."""
    return isinstance(model, GraphModule) and any(
        n.op == "call_function" and n.target in QUANTIZE | DEQUANTIZE | DYNAMIC | {DEQUANTIZE_INT4}
        for n in model.graph.nodes)


def _constant(gm: GraphModule, arg, what: str, node: Node) -> torch.Tensor:
    if isinstance(arg, (int, float)):
        return torch.tensor(arg)
    if isinstance(arg, Node) and arg.op == "get_attr":
        return graph_attr(gm, arg.target)
    raise QuantizationError(
        f"{node.name}: its {what} is computed in the graph ({getattr(arg, 'name', arg)}), not a "
        "constant; TensorRT needs constant scales and zero points (static quantization): "
        "calibrate with executorch_tensorrt.quantization.TensorRTQuantizer")


def qparams(gm: GraphModule, node: Node) -> QParams:
    """The constants of a Q/DQ node; QuantizationError when they are computed."""
    per_channel = "per_channel" in str(node.target)
    args = node.args
    scale = _constant(gm, args[1], "scale", node)
    zero = _constant(gm, args[2], "zero point", node)
    return QParams(args[-1] if not per_channel else args[6], scale.float(), zero,
                   int(args[3]) if per_channel else None)


def _problem(gm: GraphModule, node: Node | None, role: str) -> tuple[QParams | None, str | None]:
    """(the Q/DQ node's constants, or why TensorRT cannot take them)."""
    if node is None:
        return None, None
    try:
        p = qparams(gm, node)
    except QuantizationError as e:
        return None, str(e)
    if p.dtype not in _DTYPE_NAMES:
        return p, (f"{role} dtype {p.dtype} is not one TensorRT quantizes to (int8, or fp8 "
                   "e4m3 as torch.float8_e4m3fn); use TensorRTQuantizer")
    if bool(torch.any(p.zero_point != 0)):
        return p, (f"{role} zero point is not 0 (asymmetric quantization); TensorRT only "
                   "supports symmetric quantization: use a symmetric qscheme "
                   "(TensorRTQuantizer does)")
    if p.dtype == FP8 and p.axis is not None:
        return p, f"{role}: fp8 per-channel scales are not supported; use per-tensor fp8"
    return p, None


def _dq_of(arg) -> Node | None:
    return arg if isinstance(arg, Node) and arg.target in DEQUANTIZE else None


def _scheme(weight: QParams | None, act: QParams | None) -> str | None:
    w = _DTYPE_NAMES.get(weight.dtype) if weight else None
    a = _DTYPE_NAMES.get(act.dtype) if act else None
    return {("int8", "int8"): "int8_w8a8", ("fp8", "fp8"): "fp8_w8a8",
            ("int8", None): "int8_weight_only"}.get((w, a))


def _describe(scheme: str, weight: QParams) -> str:
    granularity = "per channel" if weight.axis is not None else "per tensor"
    return {"int8_w8a8": f"int8 W8A8 (weights {granularity}, activations per tensor)",
            "fp8_w8a8": "fp8 e4m3 W8A8 (per tensor)",
            "int8_weight_only": f"int8 weight-only ({granularity})"}[scheme]


def _float_weight(gm: GraphModule, dq: Node, index: int) -> Node:
    """A get_attr node holding the dequantized (float) value of a weight's DQ."""
    args = [(graph_attr(gm, a.target) if isinstance(a, Node) else a) for a in dq.args]
    name = f"_etrt_float_weight_{index}"
    gm.register_buffer(name, dq.target(*args, **dq.kwargs).detach())
    with gm.graph.inserting_before(dq):
        return gm.graph.get_attr(name)


def _fold_weight_quantize(gm: GraphModule) -> None:
    """Q(constant) -> a constant of the quantized values (weights stored quantized)."""
    for i, node in enumerate([n for n in gm.graph.nodes if n.target in QUANTIZE]):
        if not (isinstance(node.args[0], Node) and node.args[0].op == "get_attr"):
            continue
        args = [(graph_attr(gm, a.target) if isinstance(a, Node) else a) for a in node.args]
        if args[-1] == FP8:  # TensorRT's cast, not PT2E's rounding (formats/fp8.py)
            value = QUANTIZE_FP8(args[0], float(args[1]))
        else:
            value = node.target(*args)
        name = f"_etrt_quantized_weight_{i}"
        gm.register_buffer(name, value.detach())
        with gm.graph.inserting_before(node):
            folded = gm.graph.get_attr(name)
        node.replace_all_uses_with(folded)
        gm.graph.erase_node(node)


def _rewrite_fp8(gm: GraphModule) -> None:
    for node in list(gm.graph.nodes):
        if node.target in QUANTIZE | DEQUANTIZE and node.args[-1] == FP8:
            op = QUANTIZE_FP8 if node.target in QUANTIZE else DEQUANTIZE_FP8
            with gm.graph.inserting_before(node):
                new = gm.graph.call_function(op, (node.args[0], float(node.args[1])))
            new.meta = dict(node.meta)
            node.replace_all_uses_with(new)
            gm.graph.erase_node(node)


def lower_qdq(model: GraphModule, flavor: str, capabilities: tuple[str, ...] | None,
              allow_unquantized: bool) -> tuple[GraphModule, dict[str, str]]:
    """(a checked copy of `model` ready for torch.export, the report's lines:
    layer -> how it runs, or "not quantized: <why>")."""
    shared = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    gm = copy.deepcopy(model, memo=shared)
    for node in gm.graph.nodes:
        if node.target in DYNAMIC:
            raise QuantizationError(
                f"{node.name}: dynamic quantization (scales chosen at run time by "
                f"{node.target}); TensorRT needs constant scales: calibrate static activation "
                "quantization with executorch_tensorrt.quantization.TensorRTQuantizer")
    _fold_weight_quantize(gm)
    lines: dict[str, str] = {}
    floats = 0
    for node in [n for n in gm.graph.nodes if n.target in LAYERS]:
        layer = layer_name(node)
        w_dq = _dq_of(node.args[1]) if len(node.args) > 1 else None
        if isinstance(node.args[1], Node) and node.args[1].target == DEQUANTIZE_INT4:
            # TensorRTQuantizer("int4_weight_only"): both flavours, every target.
            lines[layer] = f"int4 weight-only (group {node.args[1].args[2]})"
            continue
        a_dq = _dq_of(node.args[0])
        if w_dq is not None and a_dq is None:  # weight-only with zero points: affine
            line = to_affine(gm, node, w_dq, layer)
            if line is not None:
                lines[layer] = line
                continue
        if w_dq is None and a_dq is None:  # e.g. a Conv2d under PT2E int4 (Linear only)
            lines[layer] = "not quantized: the quantizer left it float (no Q/DQ on it)"
            continue
        weight, why = _problem(gm, w_dq, "weight")
        act, act_why = _problem(gm, a_dq, "activation")
        why = why or act_why
        scheme = None if why else _scheme(weight, act)
        if why is None and scheme is None:
            why = (f"weights {weight.dtype if weight else 'float'} with activations "
                   f"{act.dtype if act else 'float'} is no scheme TensorRT runs (int8 W8A8, "
                   "fp8 W8A8, int8 weight-only)")
        if why is None:
            why = refusal(scheme, flavor, capabilities)
            if why is None:
                lines[layer] = _describe(scheme, weight)
                continue
        if not allow_unquantized:
            raise QuantizationError(
                f"layer {layer!r} ({LAYERS[node.target]}): {why}. Nothing was exported; pass "
                "allow_unquantized=True (CLI: --allow-unquantized) to export it unquantized")
        if scheme == "int8_w8a8" and refusal("int8_weight_only", flavor, capabilities) is None:
            node.replace_input_with(a_dq, a_dq.args[0].args[0])  # DQ(Q(x)) -> x
            lines[layer] = f"{_describe('int8_weight_only', weight)}; activations float: {why}"
            continue
        if a_dq is not None and isinstance(a_dq.args[0], Node) and a_dq.args[0].target in QUANTIZE:
            node.replace_input_with(a_dq, a_dq.args[0].args[0])
        if w_dq is not None:
            node.replace_input_with(w_dq, _float_weight(gm, w_dq, floats))
            floats += 1
        lines[layer] = f"not quantized: {why}"
    gm.graph.eliminate_dead_code()  # the Q/DQ of layers made float above
    _check_rest(gm)
    _rewrite_fp8(gm)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm, lines


def _check_rest(gm: GraphModule) -> None:
    """Q/DQ nodes left that feed no layer handled above: same rules, no fallback."""
    for node in gm.graph.nodes:
        if node.target in QUANTIZE | DEQUANTIZE and node.users:
            _, why = _problem(gm, node, "quantized value")
            if why:
                raise QuantizationError(f"{node.name}: {why}")


def _is_qdq(node: Node) -> bool:
    target = getattr(node.target, "_op", node.target)  # edge ops wrap the ATen overload
    return node.op == "call_function" and (target in QUANTIZE | DEQUANTIZE
                                           or target in (QUANTIZE_FP8, DEQUANTIZE_FP8))


def unpaired_qdq(graph, rejected: dict[str, str]) -> dict[str, str]:
    """Partitioning: the Q/DQ nodes to reject with a rejected neighbour, so
    that no Q/DQ pair, and no DQ and its consumer, straddle a partition
    boundary (TensorRT must see each with its consumer). check_qdq_delegated
    then refuses the export naming them."""
    new: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for node in graph.nodes:
            if not _is_qdq(node) or node.name in rejected or node.name in new:
                continue
            neighbours = [*node.users, *(a for a in node.args if isinstance(a, Node)
                                          and _is_qdq(a))]
            gone = [n.name for n in neighbours if n.name in rejected or n.name in new]
            if gone:
                new[node.name] = f"kept with {gone[0]}, which TensorRT did not take"
                changed = True
    return new


def check_qdq_delegated(edge) -> None:
    """After partitioning: every Q/DQ node must be inside a TensorRT partition
    (ExecuTorch's portable runtime has no kernels for them, and TensorRT must
    see each Q/DQ with its consumer)."""
    left = []
    for method in edge.methods:
        for node in edge.exported_program(method).graph.nodes:
            if _is_qdq(node):
                left.append(f"{node.name} (method {method})")
    if left:
        raise QuantizationError(
            f"quantize/dequantize nodes left outside TensorRT: {', '.join(left)}. TensorRT did "
            "not take them with their consumers (the partition report says why), so the "
            "quantized layer would be split across partitions. Nothing was written. Export "
            "with allow_unquantized=True after excluding those layers from the quantizer, or "
            "fix what TensorRT rejected")
