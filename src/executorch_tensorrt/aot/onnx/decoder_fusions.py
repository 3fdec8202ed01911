"""Fusion rules for a decoder's attention and MLP chains (issue #24).

transformers' decoders reach us with chains onnxruntime runs node by node
(docs/llm.md, "Where the one-thread time goes"); each rule here gives the same
values for every input, -inf and NaN included:

- `shorten_masked_softmax`: the edge dialect's safe softmax on a masked score
  (one that may hold -inf, so vision_fusions' plain Softmax does not apply):
  Where(Not(Cast(ReduceMax(Cast(Not(Equal(x, -inf)))))), zeros, Softmax(x)),
  zeros a constant or Expand(0, Shape(softmax)), becomes
  Where(Equal(ReduceMax(x), -inf), 0, Softmax(x)): a row's max is -inf exactly
  when every element is -inf (ONNX's ReduceMax follows numpy: a NaN in the row
  makes the max NaN, which is not -inf, as the original's Equal says). 10
  nodes become 4.
- `fuse_swish`: SiLU written as x * Sigmoid(x) becomes Swish(x) (opset 24,
  alpha 1), which onnxruntime's CPU kernels and TensorRT-RTX's parser take.
- `drop_identity`: an Identity between two nodes (not a graph input or output).
- `swap_negated_where`: Where(Not(c), a, b) is Where(c, b, a); the Not goes
  when every reader is such a Where.

Each rule keeps fusions.py's contract: values it removes have no other reader
and are no graph output, and every new node takes the metadata of a node it
replaces.
"""
from __future__ import annotations

import numpy as np
import onnx_ir as ir

from .graph_match import initializer, new_node, only_reader, other_input, replace, scalar
from .vision_fusions import masked_rows


# -- masked safe softmax -> Where(Equal(ReduceMax(x), -inf), 0, Softmax(x)) -------------
def shorten_masked_softmax(graph: ir.Graph, where: ir.Node) -> bool:
    if where.op_type != "Where" or len(where.inputs) != 3:
        return False
    condition, zeros, probabilities = where.inputs
    softmax = probabilities.producer()
    if softmax is None or softmax.op_type != "Softmax":
        return False
    zero, fill = _zero_fill(zeros, probabilities, where)
    readers = {use.node for use in probabilities.uses()}
    if zero is None or probabilities.is_graph_output() or readers - {where, *fill}:
        return False
    x = softmax.inputs[0]
    axis = softmax.attributes.get_int("axis", -1)
    chain = masked_rows(condition, where, x, axis)
    if chain is None:
        return False
    minus_inf = other_input(chain[0], x)  # the Equal's -inf
    axes = initializer(graph, f"{where.name}_row_axis", np.array([axis], np.int64),
                       ir.DataType.INT64)
    row_max = new_node("ReduceMax", [x, axes], where, None, [ir.AttrInt64("keepdims", 1)])
    row_max.outputs[0].type = x.type
    masked = new_node("Equal", [row_max.outputs[0], minus_inf], where, None)
    masked.outputs[0].type = condition.type
    graph.insert_before(where, [row_max, masked])
    replace(graph, [*chain, *fill, where], "Where", [masked.outputs[0], zero, probabilities])
    return True


def _zero_fill(zeros: ir.Value, probabilities: ir.Value,
               where: ir.Node) -> tuple[ir.Value | None, list[ir.Node]]:
    """The scalar zero behind `zeros` and the nodes that only broadcast it:
    a zero constant as it is, or Expand(zero, Shape(probabilities)) (which
    Where broadcasts the same way: its output has the softmax's shape)."""
    if scalar(zeros) == 0.0:
        return zeros, []
    expand = zeros.producer()
    if (expand is None or expand.op_type != "Expand" or only_reader(zeros) is not where
            or scalar(expand.inputs[0]) != 0.0):
        return None, []
    shape = expand.inputs[1].producer()
    if (shape is None or shape.op_type != "Shape" or shape.inputs[0] is not probabilities
            or only_reader(expand.inputs[1]) is not expand
            or shape.attributes.get_int("start", 0) != 0 or "end" in shape.attributes):
        return None, []
    return expand.inputs[0], [shape, expand]


# -- x * Sigmoid(x) -> Swish ----------------------------------------------------------------
def fuse_swish(graph: ir.Graph, sigmoid: ir.Node) -> bool:
    if sigmoid.op_type != "Sigmoid":
        return False
    x = sigmoid.inputs[0]
    mul = only_reader(sigmoid.outputs[0])
    if mul is None or mul.op_type != "Mul" or len(mul.inputs) != 2 \
            or other_input(mul, sigmoid.outputs[0]) is not x:
        return False
    replace(graph, [sigmoid, mul], "Swish", [x], [ir.AttrFloat32("alpha", 1.0)])
    return True


# -- small ones -------------------------------------------------------------------------------
def drop_identity(graph: ir.Graph, identity: ir.Node) -> bool:
    if identity.op_type != "Identity" or len(identity.inputs) != 1:
        return False
    source, out = identity.inputs[0], identity.outputs[0]
    if source.is_graph_input() or source.is_graph_output() or out.is_graph_output() \
            or source.producer() is None:
        return False
    out.replace_all_uses_with(source)
    graph.remove(identity, safe=True)
    return True


def swap_negated_where(graph: ir.Graph, not_: ir.Node) -> bool:
    if not_.op_type != "Not":
        return False
    negated = not_.outputs[0]
    readers = [use.node for use in negated.uses()]
    if (negated.is_graph_output() or not readers
            or any(r.op_type != "Where" or r.inputs[0] is not negated
                   or negated in r.inputs[1:] for r in readers)):
        return False
    for where in readers:
        condition, a, b = where.inputs
        where.replace_input_with(0, not_.inputs[0])
        where.replace_input_with(1, b)
        where.replace_input_with(2, a)
    graph.remove(not_, safe=True)
    return True

