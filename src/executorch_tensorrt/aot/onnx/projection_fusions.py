"""Fusion rules for an attention block's projections.

A decoder layer projects one normalized input three times (Q, K, V), each as
MatMul [+ bias Add] -> Reshape to heads -> Transpose: 9-12 small nodes per
layer, and onnxruntime's fallback pays its per-node dispatch on each (most of
a small LLM's decode step: docs/llm.md). Two rules make it 4-5 nodes:

- `fuse_shared_input_matmuls`: MatMuls of one input by constant 2-D weights
  (each with a constant bias Add, or none with one) become one MatMul by the
  weights side by side [+ one Add], then a Split on the last axis. Applied
  only when it removes nodes (two bias-free projections would stay two nodes).
- `sink_split_below_heads`: a last-axis Split whose every output is reshaped
  to (heads_i, head_dim) with one shared prefix and then transposed by one
  shared permutation becomes one Reshape to (sum heads_i, head_dim), one
  Transpose and a Split along the heads axis.

The arithmetic is the same (the concatenated weights hold the same numbers;
each output element is the same dot product). Each rule keeps fusions.py's
contract: values it removes have no other reader and are no graph output, and
every new node takes the metadata of a node it replaces.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from .graph_match import initializer, ints, new_node, only_reader, other_input


@dataclass
class _Projection:
    """x @ weight [+ bias]: a MatMul and its bias Add, or one Gemm."""
    node: ir.Node
    add: ir.Node | None   # the MatMul's bias Add (a Gemm holds its bias)
    weight: ir.Tensor
    bias: ir.Tensor | None
    axis: int             # the weight's output-feature axis (Gemm transB=1: 0)

    @property
    def last(self) -> ir.Node:
        return self.add or self.node

    @property
    def nodes(self) -> int:
        return 2 if self.add is not None else 1


def fuse_shared_input_matmuls(graph: ir.Graph, matmul: ir.Node) -> bool:
    if matmul.op_type not in ("MatMul", "Gemm") or not matmul.inputs:
        return False
    x = matmul.inputs[0]
    found = {}
    for use in x.uses():
        projection = _projection(use.node, x)
        if projection is not None:
            found[projection.node] = projection
    if len(found) < 2:
        return False
    groups: dict[tuple, list[_Projection]] = {}
    for node in graph:  # graph order: the fused nodes go before the group's first
        if node in found:
            p = found[node]
            groups.setdefault((node.op_type, p.axis, p.weight.dtype, p.bias is not None,
                               p.add is not None), []).append(p)
    for group in groups.values():
        after = 2 + (group[0].add is not None)  # the node [+ Add] + Split
        if matmul in [p.node for p in group] and sum(p.nodes for p in group) > after:
            _fuse_group(graph, x, group)
            return True
    return False


def _projection(node: ir.Node, x: ir.Value) -> _Projection | None:
    """`node` as x @ constant weight [+ constant bias] whose output is no graph
    output: MatMul(x, [K, N]) [then an Add of [N] that alone reads it], or
    Gemm(x, W, [N]) with alpha = beta = 1 and x not transposed."""
    weight = node.inputs[1].const_value if len(node.inputs) > 1 and \
        node.inputs[1] is not None else None
    if (node.inputs[0] is not x or weight is None or len(weight.shape) != 2
            or node.outputs[0].is_graph_output()):
        return None
    if node.op_type == "Gemm":
        a = node.attributes
        if (a.get_int("transA", 0) or a.get_float("alpha", 1.0) != 1.0
                or a.get_float("beta", 1.0) != 1.0):
            return None
        axis = 0 if a.get_int("transB", 0) else 1
        bias = node.inputs[2].const_value if len(node.inputs) > 2 and \
            node.inputs[2] is not None else None
        if len(node.inputs) > 2 and node.inputs[2] is not None and (
                bias is None or tuple(bias.shape) != (weight.shape[axis],)):
            return None
        return _Projection(node, None, weight, bias, axis)
    if node.op_type != "MatMul" or len(node.inputs) != 2:
        return None
    add = only_reader(node.outputs[0])
    if add is not None and add.op_type == "Add" and len(add.inputs) == 2:
        other = other_input(add, node.outputs[0])
        bias = other.const_value if other is not None else None
        if (bias is not None and tuple(bias.shape) == (weight.shape[1],)
                and bias.dtype == weight.dtype):
            return _Projection(node, add, weight, bias, 1)
    return _Projection(node, None, weight, None, 1)


def _fuse_group(graph: ir.Graph, x: ir.Value, group: list[_Projection]) -> None:
    first = group[0].node  # the group's first node in graph order
    dtype, axis = group[0].weight.dtype, group[0].axis
    widths = [int(p.weight.shape[axis]) for p in group]
    weight = initializer(graph, f"{first.inputs[1].name}_side_by_side",
                         np.concatenate([p.weight.numpy() for p in group], axis=axis), dtype)
    bias = None if group[0].bias is None else initializer(
        graph, f"{first.name}_bias_side_by_side",
        np.concatenate([p.bias.numpy() for p in group]), group[0].bias.dtype)
    out_shape = (ir.Shape([*first.outputs[0].shape[:-1], sum(widths)])
                 if first.outputs[0].shape is not None else None)
    if first.op_type == "Gemm":
        new = [new_node("Gemm", [x, weight, *([bias] if bias is not None else [])], first,
                        out_shape, list(first.attributes.values()))]
    else:
        new = [new_node("MatMul", [x, weight], first, out_shape)]
        if bias is not None:
            new.append(new_node("Add", [new[0].outputs[0], bias], group[0].add, out_shape))
    sizes = initializer(graph, f"{first.name}_split_sizes", np.array(widths, np.int64),
                        ir.DataType.INT64)
    new.append(_split(new[-1].outputs[0], sizes, -1, [p.last for p in group]))
    for node in new:
        graph.insert_before(first, node)
    for p, value in zip(group, new[-1].outputs):
        p.last.outputs[0].replace_all_uses_with(value, replace_graph_outputs=True)
    graph.remove([n for p in group for n in (p.add, p.node) if n is not None], safe=True)


def sink_split_below_heads(graph: ir.Graph, split: ir.Node) -> bool:
    if split.op_type != "Split" or len(split.outputs) < 2 or len(split.inputs) < 2:
        return False
    y, sizes = split.inputs[0], ints(split.inputs[1])
    if y.shape is None or sizes is None or split.attributes.get_int("axis", 0) \
            not in (-1, len(y.shape) - 1):
        return False
    reshapes, transposes, targets = [], [], []
    for out in split.outputs:
        reshape = only_reader(out)
        if reshape is None or reshape.op_type != "Reshape" or reshape.inputs[0] is not out:
            return False
        target = ints(reshape.inputs[1])
        transpose = only_reader(reshape.outputs[0])
        if (target is None or len(target) < 3 or transpose is None
                or transpose.op_type != "Transpose"):
            return False
        reshapes.append(reshape)
        transposes.append(transpose)
        targets.append(target)
    rank, heads = len(targets[0]), [t[-2] for t in targets]
    if any(0 in t for t in targets):  # a 0 may copy an input dimension (allowzero=0)
        return False
    head_dim = targets[0][-1]
    perm = transposes[0].attributes.get_ints("perm", None)
    if (head_dim <= 0 or any(t[:-2] != targets[0][:-2] or t[-1] != head_dim for t in targets)
            or any(h <= 0 or h * head_dim != s for h, s in zip(heads, sizes))
            or perm is None or sorted(perm) != list(range(rank))
            or any(t.attributes.get_ints("perm", None) != perm for t in transposes)):
        return False
    shape = initializer(graph, f"{reshapes[0].name}_all_heads",
                        np.array([*targets[0][:-2], sum(heads), head_dim], np.int64),
                        ir.DataType.INT64)
    reshape = new_node("Reshape", [y, shape], reshapes[0], None,
                       list(reshapes[0].attributes.values()))
    transpose = new_node("Transpose", [reshape.outputs[0]], transposes[0], None,
                         [ir.AttrInt64s("perm", list(perm))])
    counts = initializer(graph, f"{split.name}_heads", np.array(heads, np.int64),
                         ir.DataType.INT64)
    new_split = _split(transpose.outputs[0], counts, list(perm).index(rank - 2), transposes)
    for node in (reshape, transpose, new_split):
        graph.insert_before(split, node)
    for old, value in zip(transposes, new_split.outputs):
        old.outputs[0].replace_all_uses_with(value, replace_graph_outputs=True)
    graph.remove([*transposes, *reshapes, split], safe=True)
    return True


def _split(value: ir.Value, sizes: ir.Value, axis: int, replaced: list) -> ir.Node:
    """Split(value, sizes) along `axis`, each output shaped and typed like the
    output of the node it replaces; metadata of the first."""
    node = ir.Node("", "Split", [value, sizes], [ir.AttrInt64("axis", axis)],
                   name=f"{replaced[0].name}_Split", num_outputs=len(replaced))
    for out, old in zip(node.outputs, replaced):
        out.name = f"{old.outputs[0].name}_split"
        out.shape, out.type = old.outputs[0].shape, old.outputs[0].type
    node.metadata_props.update(replaced[0].metadata_props)
    return node
