"""Fusion rules for vision transformers' chains.

Measured on ViT and LeViT (docs/benchmarks.md), three patterns cost the
onnxruntime fallback full-size elementwise passes that TensorRT removes while
building but onnxruntime does not:

- the edge dialect's safe softmax (scaled_dot_product_attention's math path):
  Softmax plus Equal(x, -inf) -> Not -> Cast -> ReduceMax -> Cast -> Not ->
  Where(_, 0, softmax), which makes a row that is -inf throughout give 0
  instead of NaN. Such a row only comes from masking; where the logits are
  matmuls plus finite constants (an all-zero or finite bias), it cannot
  occur unless the activations are already non-finite, so the chain is a
  plain Softmax. An Add of an all-zero constant before it (the folded
  "no mask" mask) goes too. Any other input (a caller's mask, a Where)
  keeps the chain.
- hardswish written as x * Clip(x + 3, 0, 6) / 6: HardSwish (opset 14).
- an eval BatchNorm1d after a bias-free Linear (LeViT's Linear+BN):
  MatMul(x, W) [-> Reshape to [N, C]] -> BatchNormalization becomes
  MatMul(x, W * s) -> Add(beta - mean * s) [-> Reshape], s = gamma /
  sqrt(var + eps), folded in float64 and stored as new float32 weights.

Each rule keeps to fusions.py's contract (removed values have no other
reader and are no graph output; the new node takes the chain's last node's
metadata). The helpers are graph_match.py's.
"""
from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from .graph_match import near, only_reader, other_input, replace, scalar

# A constant read to check its values is at most this many elements (masks and
# biases of attention scores; never a large weight).
_MAX_CHECKED_ELEMENTS = 1 << 22
_MAX_DEPTH = 16
# Ops whose output is finite when their inputs are (barring float overflow).
_ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div"})
_FINITE_FROM_FINITE = frozenset({"MatMul", "Gemm", "Sigmoid", "Tanh", "Softmax",
                                 "LayerNormalization", "Conv"})
_DATA_MOVEMENT = frozenset({"Reshape", "Transpose", "Expand", "Unsqueeze", "Squeeze",
                            "Slice", "Identity", "Gather", "Concat", "Split", "Tile"})


def _constant(value: ir.Value | None) -> np.ndarray | None:
    """The values of a small constant (initializer or Constant node)."""
    if value is None:
        return None
    tensor = value.const_value
    producer = value.producer()
    if tensor is None and producer is not None and producer.op_type == "Constant":
        attr = producer.attributes.get("value")
        tensor = attr.value if attr is not None else None
    if tensor is None or math.prod(tensor.shape) > _MAX_CHECKED_ELEMENTS:
        return None
    return np.asarray(tensor.numpy())


def _finite(value: ir.Value | None, depth: int = 0) -> bool:
    """True when `value` is built from matmuls, finite constants and
    arithmetic on them, so it has no -inf unless an activation already
    overflowed. Graph inputs, Where, Log and anything unknown are not."""
    if value is None or depth > _MAX_DEPTH:
        return False
    data = _constant(value)
    if data is not None:
        return data.dtype.kind == "f" and bool(np.isfinite(data).all())
    node = value.producer()
    if node is None:  # a graph input or a weight too large to read
        return False
    if node.op_type in _FINITE_FROM_FINITE:
        return True
    if node.op_type in _ARITHMETIC:
        return all(_finite(v, depth + 1) for v in node.inputs)
    if node.op_type in _DATA_MOVEMENT:
        return _finite(node.inputs[0], depth + 1)
    return False


# -- safe softmax -> Softmax ----------------------------------------------------
def fuse_safe_softmax(graph: ir.Graph, where: ir.Node) -> bool:
    if where.op_type != "Where" or len(where.inputs) != 3:
        return False
    condition, zeros, probabilities = where.inputs
    softmax = probabilities.producer()
    if (softmax is None or softmax.op_type != "Softmax"
            or only_reader(probabilities) is not where):
        return False
    zero = _constant(zeros)
    if zero is None or zero.size == 0 or np.any(zero != 0):
        return False
    x = softmax.inputs[0]
    axis = softmax.attributes.get_int("axis", -1)
    chain = masked_rows(condition, where, x, axis)
    if chain is None or not _finite(x):
        return False
    replace(graph, [softmax, *chain, where], "Softmax", [_without_zero_add(graph, x)],
             [ir.AttrInt64("axis", axis)])
    return True


def masked_rows(condition: ir.Value, where: ir.Node, x: ir.Value,
                 axis: int) -> list[ir.Node] | None:
    """The nodes of Not(Cast(ReduceMax(Cast(Not(Equal(x, -inf))), [axis]))),
    in graph order, when `condition` is that and only `where` reads it."""
    chain, value, reader = [], condition, where
    for op_type in ("Not", "Cast", "ReduceMax", "Cast", "Not", "Equal"):
        node = value.producer()
        if node is None or node.op_type != op_type or only_reader(value) is not reader:
            return None
        chain.append(node)
        value, reader = node.inputs[0], node
    reduce_max, equal = chain[2], chain[5]
    rank = len(x.shape) if x.shape is not None else None
    axes = _constant(reduce_max.inputs[1]) if len(reduce_max.inputs) > 1 else None
    if axes is None and "axes" in reduce_max.attributes:  # before opset 18
        axes = np.asarray(reduce_max.attributes.get_ints("axes"))
    if (rank is None or axes is None or axes.size != 1
            or int(axes.reshape(-1)[0]) % rank != axis % rank
            or reduce_max.attributes.get_int("keepdims", 1) != 1):
        return None
    if other_input(equal, x) is None or scalar(other_input(equal, x)) != -math.inf:
        return None
    return list(reversed(chain))


def _without_zero_add(graph: ir.Graph, x: ir.Value) -> ir.Value:
    """x itself, or y when x = Add(y, all-zero constant) of y's own shape
    (the mask of an unmasked attention) and the softmax is its one reader."""
    add = x.producer()
    if add is None or add.op_type != "Add" or len(add.inputs) != 2 or x.is_graph_output() \
            or len(x.uses()) != 2:  # the Softmax and the Equal, both being removed
        return x
    for y, other in (add.inputs, reversed(add.inputs)):
        zero = _constant(other)
        if (zero is not None and zero.size and not np.any(zero != 0) and y.shape is not None
                and x.shape is not None and list(y.shape) == list(x.shape)
                and zero.ndim <= len(y.shape)):
            return y
    return x


# -- x * Clip(x + 3, 0, 6) / 6 -> HardSwish --------------------------------------
def fuse_hardswish(graph: ir.Graph, clip: ir.Node) -> bool:
    if clip.op_type != "Clip" or len(clip.inputs) != 3:
        return False
    shifted, low, high = clip.inputs
    add = shifted.producer()
    if (add is None or add.op_type != "Add" or len(add.inputs) != 2
            or not (near(scalar(low), 0.0) and near(scalar(high), 6.0))
            or only_reader(shifted) is not clip):
        return False
    x = next((v for v in add.inputs if near(scalar(other_input(add, v)), 3.0)), None)
    gate = only_reader(clip.outputs[0])
    if x is None or gate is None or gate.op_type != "Mul" or other_input(gate, clip.outputs[0]) \
            is not x:
        return False
    scale = only_reader(gate.outputs[0])
    if scale is None or not (
            (scale.op_type == "Div" and scale.inputs[0] is gate.outputs[0]
             and near(scalar(scale.inputs[1]), 6.0))
            or (scale.op_type == "Mul" and near(scalar(other_input(scale, gate.outputs[0])),
                                                  1 / 6))):
        return False
    replace(graph, [add, clip, gate, scale], "HardSwish", [x])
    return True


# -- MatMul(x, W) [-> Reshape] -> BatchNormalization -> MatMul + Add ----------------
def fold_batch_norm(graph: ir.Graph, norm: ir.Node) -> bool:
    if (norm.op_type != "BatchNormalization" or len(norm.outputs) != 1
            or norm.attributes.get_int("training_mode", 0) != 0 or len(norm.inputs) != 5):
        return False
    y = norm.inputs[0]
    stats = [_constant(v) for v in norm.inputs[1:]]
    if y.shape is None or len(y.shape) != 2 or any(s is None or s.ndim != 1 for s in stats):
        return False  # channels are the last axis only for [N, C]
    reshape = y.producer() if y.producer() is not None and y.producer().op_type == "Reshape" \
        else None
    product = reshape.inputs[0] if reshape is not None else y
    matmul = product.producer()
    if (matmul is None or matmul.op_type != "MatMul" or only_reader(product) is not
            (reshape or norm) or (reshape is not None and only_reader(y) is not norm)):
        return False
    weight = matmul.inputs[1]
    w = weight.const_value
    channels = y.shape[1]
    # [K, C], or [1, K, C] where the edge dialect wrote the Linear as a bmm
    if (w is None or len(w.shape) < 2 or any(d != 1 for d in w.shape[:-2])
            or not isinstance(channels, int) or w.shape[-1] != channels
            or product.shape is None or product.shape[-1] != channels
            or w.dtype != ir.DataType.FLOAT or any(s.shape != (channels,) for s in stats)):
        return False
    gamma, beta, mean, var = (s.astype(np.float64) for s in stats)
    scale = gamma / np.sqrt(var + norm.attributes.get_float("epsilon", 1e-5))
    folded = _initializer(graph, f"{weight.name}_bn_folded",
                          (w.numpy().astype(np.float64) * scale).astype(np.float32))
    bias = _initializer(graph, f"{weight.name}_bn_bias", (beta - mean * scale).astype(np.float32))
    new_matmul = ir.Node("", "MatMul", [matmul.inputs[0], folded], name=matmul.name)
    new_matmul.metadata_props.update(matmul.metadata_props)
    _like(new_matmul.outputs[0], product, f"{product.name}_bn_folded")
    graph.insert_before(matmul, new_matmul)
    if reshape is None:
        replace(graph, [matmul, norm], "Add", [new_matmul.outputs[0], bias])
        return True
    # The Add before the Reshape (the bias is per last axis either way): onnxruntime
    # fuses MatMul + Add into one Gemm only when they are adjacent.
    add = ir.Node("", "Add", [new_matmul.outputs[0], bias], name=f"{norm.name}_bias")
    add.metadata_props.update(norm.metadata_props)
    _like(add.outputs[0], product, f"{product.name}_bn_bias")
    graph.insert_before(matmul, add)
    replace(graph, [matmul, reshape, norm], "Reshape", [add.outputs[0], reshape.inputs[1]])
    return True


def _initializer(graph: ir.Graph, name: str, data: np.ndarray) -> ir.Value:
    while name in graph.initializers:
        name += "_"
    value = ir.Value(name=name, shape=ir.Shape(data.shape), type=ir.TensorType(ir.DataType.FLOAT),
                     const_value=ir.Tensor(data, name=name))
    graph.register_initializer(value)
    return value


def _like(new: ir.Value, old: ir.Value, name: str) -> None:
    new.name, new.shape, new.type = name, old.shape, old.type


# -- Div(x, Expand(n, shape(x))) -> Div(x, n) --------------------------------------
def drop_broadcast_expand(graph: ir.Graph, binary: ir.Node) -> bool:
    """An Expand that only feeds an elementwise op which would broadcast the
    same way (Swin V2's F.normalize: x / clamp(norm).expand_as(x)) writes a
    full-size copy for nothing."""
    if binary.op_type not in _ARITHMETIC or len(binary.inputs) != 2:
        return False
    for side, expanded in enumerate(binary.inputs):
        expand = expanded.producer() if expanded is not None else None
        if expand is None or expand.op_type != "Expand" or only_reader(expanded) is not binary:
            continue
        source, other, out = expand.inputs[0], binary.inputs[1 - side], binary.outputs[0]
        shapes = [v.shape for v in (source, other, expanded, out)]
        if any(s is None or not all(isinstance(d, int) for d in s) for s in shapes):
            continue
        if (tuple(np.broadcast_shapes(tuple(shapes[0]), tuple(shapes[1]))) == tuple(shapes[3])
                == tuple(np.broadcast_shapes(tuple(shapes[2]), tuple(shapes[1])))):
            binary.replace_input_with(side, source)
            graph.remove(expand, safe=True)
            return True
    return False
