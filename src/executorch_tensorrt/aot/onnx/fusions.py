"""Folds chains the exporter spells out node by node back into single ONNX ops.

ExecuTorch's edge dialect decomposes GELU, RMS normalization and batched
matmuls before we see them, and the ONNX exporter writes each piece as its own
node: erf-GELU as five nodes, an RMS norm as seven, a rotary embedding as
seven, a 4-D matmul as a 3-D MatMul between three Reshapes. TensorRT fuses
them again while building, but the onnxruntime fallback pays its per-node
dispatch for every one (under a microsecond each, yet most of a small LLM's
decode step: docs/llm.md). Writing
them as the standard ops (Gelu, opset 20; RMSNormalization and
RotaryEmbedding, opset 23; MatMul on 4-D operands) helps both: TensorRT-RTX's
parser and builder take all four (tests/aot/test_onnx_fusions.py). Vision
transformers' chains (the safe softmax, hardswish, Linear + BatchNorm) have
their rules in vision_fusions.py, an attention block's Q/K/V projections in
projection_fusions.py, a decoder's masked softmax, SiLU and
grouped-query value repeats in decoder_fusions.py.

Every rule checks that the intermediate values it removes have no other
reader and are not graph outputs, so a chain that is used elsewhere is left
as it is. The fused node takes the metadata of the chain's last node, which
maps it back to that edge node (edge_tags.py); a folded matmul keeps the
MatMul's.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from .decoder_fusions import (branch_first_step, branch_kept_writes, broadcast_grouped_values,
                              drop_identity, fuse_swish, has_silu, shorten_masked_softmax,
                              swap_negated_where)
from .graph_match import ints, known, near, only_reader, other_input, replace, scalar
from .projection_fusions import fuse_shared_input_matmuls, sink_split_below_heads
from .vision_fusions import (drop_broadcast_expand, fold_batch_norm, fuse_hardswish,
                             fuse_safe_softmax)


# The opset where each folded op appeared; MatMul is there in every opset.
_OPSET = {"Gelu": 20, "RMSNormalization": 23, "RotaryEmbedding": 23, "MatMul": 1,
          "Softmax": 13, "HardSwish": 14, "BatchNormalization folded": 1, "Expand dropped": 8,
          "MatMul side by side": 13, "Split below heads": 13,  # Split's sizes as an input: 13
          "masked Softmax shortened": 18,  # ReduceMax's axes as an input: 18
          "Swish": 24, "grouped values broadcast": 13, "Identity dropped": 1,
          "Not folded into Where": 9, "first step branched": 11,
          "first-step writes in place": 11}
_STARTS = {"Gelu": "Erf", "RMSNormalization": "Pow", "RotaryEmbedding": "Neg"}
_CONVERTER_FROM = 18  # the oldest opset onnxscript's IR converter moves


def fuse(model: ir.Model) -> dict[str, int]:
    """Rewrites `model` in place; returns how many chains each rule folded.

    A model (the exporter's opset 18) with an Erf, Pow or Neg node first moves
    to opset 23, one with a SiLU (x * Sigmoid(x)) to 24, with onnxscript's
    converter (what torch.onnx.export(opset_version=...) runs), which works on
    the IR: the weights are not serialized."""
    ops = {node.op_type for node in model.graph}
    target = _OPSET["Swish"] if has_silu(model.graph) else \
        _OPSET["RMSNormalization"] if ops & set(_STARTS.values()) else 0
    if _CONVERTER_FROM <= _opset(model) < target:
        from onnxscript import version_converter

        version_converter.convert_version(model, target, fallback=False)

    counts = {}
    for name, rule in (("Gelu", _fuse_gelu), ("RMSNormalization", _fuse_rms_norm),
                       ("RotaryEmbedding", functools.partial(_fuse_rotary, halves={})),
                       ("MatMul", _fuse_batched_matmul), ("Softmax", fuse_safe_softmax),
                       ("HardSwish", fuse_hardswish),
                       ("BatchNormalization folded", fold_batch_norm),
                       ("Expand dropped", drop_broadcast_expand),
                       ("MatMul side by side", fuse_shared_input_matmuls),
                       ("Split below heads", sink_split_below_heads),
                       ("masked Softmax shortened", shorten_masked_softmax),
                       ("Swish", fuse_swish),
                       ("grouped values broadcast", broadcast_grouped_values),
                       ("Identity dropped", drop_identity),
                       ("Not folded into Where", swap_negated_where),
                       ("first step branched", branch_first_step),
                       ("first-step writes in place", branch_kept_writes)):
        if _opset(model) >= _OPSET[name]:
            counts[name] = sum(rule(model.graph, node) for node in list(model.graph)
                               if node.graph is model.graph)
    if any(counts.values()):  # what the chains alone read: cos/sin tables, reshape targets
        RemoveUnusedNodesPass()(model)
    return counts


def _opset(model: ir.Model) -> int:
    return model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1))


def _follow(value: ir.Value, op_type: str,
            other: Callable[[ir.Value | None], bool]) -> ir.Node | None:
    """The only reader of `value` when it is a binary `op_type` whose other
    operand passes `other`."""
    node = only_reader(value)
    if node is None or node.op_type != op_type or len(node.inputs) != 2:
        return None
    return node if other(other_input(node, value)) else None


# -- GELU: x * 0.5 * (1 + erf(x / sqrt(2))) -> Gelu ---------------------------
def _fuse_gelu(graph: ir.Graph, erf: ir.Node) -> bool:
    if erf.op_type != "Erf":
        return False
    scale = erf.inputs[0].producer()
    if scale is None or scale.op_type not in ("Div", "Mul") or len(scale.inputs) != 2:
        return False
    x, c = scale.inputs
    if not (near(scalar(c), math.sqrt(2.0)) if scale.op_type == "Div"
            else near(scalar(c), 1 / math.sqrt(2.0))):
        return False
    if only_reader(scale.outputs[0]) is not erf:
        return False
    add = _follow(erf.outputs[0], "Add", lambda v: near(scalar(v), 1.0))
    if add is None:
        return False
    half = lambda v: near(scalar(v), 0.5)  # noqa: E731
    by_x = lambda v: v is x  # noqa: E731
    chain = [scale, erf, add]
    first = only_reader(add.outputs[0])
    if first is None or first.op_type != "Mul" or len(first.inputs) != 2:
        return False
    operand = other_input(first, add.outputs[0])
    if half(operand) or by_x(operand):  # (1 + erf) * 0.5 * x, or (1 + erf) * x * 0.5
        second = _follow(first.outputs[0], "Mul", by_x if half(operand) else half)
        if second is None:
            return False
        chain += [first, second]
    else:  # (x * 0.5) * (1 + erf)
        pre = operand.producer() if operand is not None else None
        if (pre is None or pre.op_type != "Mul" or only_reader(operand) is not first
                or not (x in pre.inputs and half(other_input(pre, x)))):
            return False
        chain = [pre, *chain, first]
    replace(graph, chain, "Gelu", [x], [ir.AttrString("approximate", "none")])
    return True


# -- RMS norm: w * (x * 1/sqrt(mean(x^2) + eps)) -> RMSNormalization ----------
def _fuse_rms_norm(graph: ir.Graph, pow_: ir.Node) -> bool:
    if pow_.op_type != "Pow" or not near(scalar(pow_.inputs[1]), 2.0):
        return False
    x = pow_.inputs[0]
    if x.shape is None or x.dtype not in (ir.DataType.FLOAT, ir.DataType.FLOAT16,
                                          ir.DataType.BFLOAT16):
        return False
    mean = only_reader(pow_.outputs[0])
    if (mean is None or mean.op_type != "ReduceMean" or len(mean.inputs) != 2
            or ints(mean.inputs[1]) not in ([-1], [len(x.shape) - 1])
            or mean.attributes.get_int("keepdims", 1) != 1):
        return False
    add = only_reader(mean.outputs[0])
    epsilon = scalar(other_input(add, mean.outputs[0])) if add is not None \
        and add.op_type == "Add" else None
    if epsilon is None:
        return False
    sqrt = only_reader(add.outputs[0])
    if sqrt is None or sqrt.op_type != "Sqrt":
        return False
    inverse = only_reader(sqrt.outputs[0])
    if inverse is None:
        return False
    if inverse.op_type == "Reciprocal":  # x * (1 / sqrt)
        normalize = _follow(inverse.outputs[0], "Mul", lambda v: v is x)
        chain = [pow_, mean, add, sqrt, inverse, normalize]
    elif inverse.op_type == "Div" and inverse.inputs[0] is x:  # x / sqrt
        normalize, chain = inverse, [pow_, mean, add, sqrt, inverse]
    else:
        return False
    if normalize is None:
        return False
    last_dim = x.shape[-1]
    if not isinstance(last_dim, int):
        return False
    weigh = _follow(normalize.outputs[0], "Mul",
                    lambda w: w is not None and w.dtype == x.dtype and w.shape is not None
                    and list(w.shape) == [last_dim])
    if weigh is None:  # the op needs a scale; without one the chain stays
        return False
    weight = other_input(weigh, normalize.outputs[0])
    replace(graph, [*chain, weigh], "RMSNormalization", [x, weight],
             [ir.AttrInt64("axis", -1), ir.AttrFloat32("epsilon", epsilon),
              ir.AttrInt64("stash_type", int(ir.DataType.FLOAT))])
    return True


# -- rotary: x * cos + rotate_half(x) * sin -> RotaryEmbedding ----------------
def _fuse_rotary(graph: ir.Graph, neg: ir.Node, halves: dict) -> bool:
    """transformers' apply_rotary_pos_emb on [B, heads, S, D] with cos/sin of
    [B, S, D] unsqueezed at 1, where cos = Cos(Concat(f, f)) (each frequency
    twice, the half-split layout): RotaryEmbedding(x, Cos(f), Sin(f)), which
    reads [B, S, D/2] tables. `halves` shares those two nodes per table."""
    if neg.op_type != "Neg":
        return False
    high = neg.inputs[0].producer()
    cat = only_reader(neg.outputs[0])
    if high is None or cat is None or cat.op_type != "Concat" or len(cat.inputs) != 2 \
            or cat.inputs[0] is not neg.outputs[0] or only_reader(high.outputs[0]) is not neg:
        return False
    low = cat.inputs[1].producer()
    x = high.inputs[0] if high.op_type == "Slice" else None
    if (x is None or not known(x.shape, 4) or not isinstance(x.shape[3], int)
            or x.shape[3] % 2 or cat.attributes.get_int("axis", 0) not in (-1, 3)):
        return False
    half = x.shape[3] // 2
    if not (_is_slice(low, x, 0, half) and only_reader(low.outputs[0]) is cat
            and _is_slice(high, x, half, x.shape[3])):
        return False
    by_sin = _follow(cat.outputs[0], "Mul", lambda v: _table(v, "Sin") is not None)
    add = only_reader(by_sin.outputs[0]) if by_sin is not None else None
    if add is None or add.op_type != "Add":
        return False
    by_cos = other_input(add, by_sin.outputs[0]).producer()
    if (by_cos is None or by_cos.op_type != "Mul" or x not in by_cos.inputs
            or only_reader(by_cos.outputs[0]) is not add):
        return False
    cos = _table(other_input(by_cos, x), "Cos")
    sin = _table(other_input(by_sin, cat.outputs[0]), "Sin")
    if cos is None or sin is None:
        return False
    frequencies = cos.inputs[0].producer().inputs[0]
    # RotaryEmbedding reads [B, S, D/2] tables as they are: no broadcasting.
    if (frequencies is not sin.inputs[0].producer().inputs[0] or not known(frequencies.shape, 3)
            or list(frequencies.shape) != [x.shape[0], x.shape[2], half]):
        return False
    tables = [_half_table(graph, node, halves) for node in (cos, sin)]
    replace(graph, [low, high, neg, cat, by_sin, by_cos, add], "RotaryEmbedding",
             [x, *tables], [ir.AttrInt64("interleaved", 0)])
    return True


def _is_slice(node: ir.Node | None, x: ir.Value, start: int, end: int) -> bool:
    """`node` is Slice(x)[..., start:end] on the last of 4 axes, step 1."""
    if node is None or node.op_type != "Slice" or node.inputs[0] is not x:
        return False
    starts, ends = ints(node.inputs[1]), ints(node.inputs[2])
    axes = ints(node.inputs[3]) if len(node.inputs) > 3 else None
    steps = ints(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None \
        else [1]
    return (starts == [start] and ends is not None and len(ends) == 1
            and (ends[0] == end or (end == x.shape[3] and ends[0] >= end))
            and axes in ([-1], [3]) and steps == [1])


def _table(value: ir.Value | None, op_type: str) -> ir.Node | None:
    """The Cos/Sin node behind Unsqueeze(op_type(Concat(f, f, axis=-1)), [1])."""
    unsqueeze = value.producer() if value is not None else None
    if unsqueeze is None or unsqueeze.op_type != "Unsqueeze" or ints(unsqueeze.inputs[1]) != [1]:
        return None
    node = unsqueeze.inputs[0].producer()
    if node is None or node.op_type != op_type:
        return None
    cat = node.inputs[0].producer()
    if (cat is None or cat.op_type != "Concat" or len(cat.inputs) != 2
            or cat.inputs[0] is not cat.inputs[1] or cat.attributes.get_int("axis", 0) != -1
            or cat.inputs[0].shape is None or len(cat.inputs[0].shape) != 3):
        return None
    return node


def _half_table(graph: ir.Graph, node: ir.Node, halves: dict) -> ir.Value:
    """op_type(f) for the table node op_type(Concat(f, f)): [B, S, D/2]."""
    if node not in halves:
        frequencies = node.inputs[0].producer().inputs[0]
        half = ir.Node("", node.op_type, [frequencies], name=f"{node.outputs[0].name}_half")
        half.outputs[0].name = f"{node.outputs[0].name}_half"
        half.outputs[0].shape, half.outputs[0].type = frequencies.shape, node.outputs[0].type
        half.metadata_props.update(node.metadata_props)
        graph.insert_after(node, half)
        halves[node] = half.outputs[0]
    return halves[node]


# -- Reshape(4-D -> 3-D) x2 -> MatMul -> Reshape(3-D -> 4-D) -> MatMul -------
def _fuse_batched_matmul(graph: ir.Graph, matmul: ir.Node) -> bool:
    if matmul.op_type != "MatMul":
        return False
    unflatten = only_reader(matmul.outputs[0])
    out = unflatten.outputs[0] if unflatten is not None and unflatten.op_type == "Reshape" \
        else None
    if out is None or not known(out.shape, 4) or not known(matmul.outputs[0].shape, 3):
        return False
    batch = list(out.shape[:2])
    operands, chain = [], []
    for flat in matmul.inputs:
        reshape = flat.producer()
        if (reshape is None or reshape.op_type != "Reshape" or only_reader(flat) is not matmul
                or not known(flat.shape, 3)):
            return False
        source = reshape.inputs[0]
        if (not known(source.shape, 4) or list(source.shape[:2]) != batch
                or list(source.shape[2:]) != list(flat.shape[1:])):
            return False
        operands.append(source)
        chain.append(reshape)
    if list(out.shape[2:]) != list(matmul.outputs[0].shape[1:]):
        return False
    replace(graph, [*chain, matmul, unflatten], "MatMul", operands, origin=matmul)
    return True
