"""Fusion rules for a decoder's attention and MLP chains.

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
- `broadcast_grouped_values`: grouped-query attention repeats each value
  cache head for its group of query heads (Unsqueeze -> Expand -> Reshape)
  before probabilities @ values. ONNX MatMul broadcasts: the probabilities
  reshaped to [B, kv_heads, group, S, L] (query head h = kv * group + g reads
  cache head kv) times the unsqueezed cache [B, kv_heads, 1, L, D] is the same
  product matrix by matrix (each one [S, L] @ [L, D], as before), without the
  Expand's copy. The key side's repeat stays: its Transpose and scale sit
  between the repeat and the MatMul, and reading it by broadcasting needs as
  many nodes as it saves.
- `drop_identity`: an Identity between two nodes (not a graph input or output).
- `swap_negated_where`: Where(Not(c), a, b) is Where(c, b, a); the Not goes
  when every reader is such a Where.
- `branch_first_step`: Where(c, a, b) on a one-element c, where a's work
  (a matmul at least) serves only such Wheres, becomes If(c) computing a in
  its then-branch only: a decoder's kept cross-attention keys and values are
  projected on the first step alone.
- `branch_kept_writes`: the same for states written on a first step only
  (aot/state/kept_write.py's KeepFirst markers): If(c) projects the update in
  its then-branch and passes an empty one in its else-branch, and each state
  is written by TensorScatter at position 0 (kv_update.py's marker), in place.

Each rule keeps fusions.py's contract: values it removes have no other reader
and are no graph output, and every new node takes the metadata of a node it
replaces.
"""
from __future__ import annotations

import numpy as np
import onnx_ir as ir

from .graph_match import (initializer, ints, known, new_node, only_reader, other_input, replace,
                          scalar)
from .vision_fusions import masked_rows
from .state_markers import KEEP_OP, MARKER_DOMAIN, MARKER_OP


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
    mul = _silu_mul(sigmoid)
    if mul is None:
        return False
    replace(graph, [sigmoid, mul], "Swish", [sigmoid.inputs[0]], [ir.AttrFloat32("alpha", 1.0)])
    return True


def has_silu(graph: ir.Graph) -> bool:
    """Whether fuse_swish has a chain to fold (fusions.fuse moves such a model to opset 24)."""
    return any(_silu_mul(node) is not None for node in graph)


def _silu_mul(sigmoid: ir.Node) -> ir.Node | None:
    """The Mul of x * Sigmoid(x), the Sigmoid's only reader."""
    if sigmoid.op_type != "Sigmoid":
        return None
    mul = only_reader(sigmoid.outputs[0])
    if mul is None or mul.op_type != "Mul" or len(mul.inputs) != 2 \
            or other_input(mul, sigmoid.outputs[0]) is not sigmoid.inputs[0]:
        return None
    return mul


# -- probabilities @ repeated value cache -> broadcast MatMul over the cache itself --------
def broadcast_grouped_values(graph: ir.Graph, matmul: ir.Node) -> bool:
    if matmul.op_type != "MatMul" or len(matmul.inputs) != 2:
        return False
    left, right = matmul.inputs
    grouped = _grouped(right, matmul)
    if grouped is None:
        return False
    unsqueeze, expand, reshape = grouped
    batch, kv_heads, group, _, _ = ints(expand.inputs[1])
    rows = _rows_of(left, matmul, batch, kv_heads * group)
    out = matmul.outputs[0]
    if (rows is None or out.shape is None
            or not all(isinstance(d, int) for d in [*out.shape[:-2], out.shape[-1]])):
        return False
    probabilities, folded = rows
    by_group = initializer(graph, f"{matmul.name}_by_kv_head",
                           np.array([batch, kv_heads, group, -1, probabilities.shape[-1]],
                                    np.int64), ir.DataType.INT64)
    split = new_node("Reshape", [probabilities, by_group], matmul, None)
    graph.insert_before(matmul, split)
    chain, operands = [expand, reshape, *folded, matmul], [split.outputs[0], unsqueeze.outputs[0]]
    after = only_reader(out)
    target = ints(after.inputs[1]) if after is not None and after.op_type == "Reshape" else None
    if target is not None and 0 not in target:  # a 0 would copy a dimension of the 5-D product
        replace(graph, chain, "MatMul", operands).outputs[0].shape = None  # 5-D now
        return True
    product = new_node("MatMul", operands, matmul, None)
    graph.insert_before(matmul, product)
    back = initializer(graph, f"{matmul.name}_by_head",
                       np.array([*out.shape[:-2], -1, out.shape[-1]], np.int64), ir.DataType.INT64)
    replace(graph, chain, "Reshape", [product.outputs[0], back])
    return True


def _grouped(value: ir.Value, reader: ir.Node) -> tuple[ir.Node, ir.Node, ir.Node] | None:
    """(Unsqueeze, Expand, Reshape) when `value` is Reshape(Expand(Unsqueeze(cache,
    [2]), [B, kv, group, L, D])) to [B, kv * group, L, D] or [B * kv * group, L, D],
    the cache [B, kv, L, D] of static shape, each value read by the next node only
    (the Unsqueeze's output by the Expand: it stays, read by the new MatMul)."""
    reshape = value.producer()
    if reshape is None or reshape.op_type != "Reshape" or only_reader(value) is not reader:
        return None
    expand = reshape.inputs[0].producer()
    if (expand is None or expand.op_type != "Expand"
            or only_reader(expand.outputs[0]) is not reshape):
        return None
    unsqueeze = expand.inputs[0].producer()
    if (unsqueeze is None or unsqueeze.op_type != "Unsqueeze" or ints(unsqueeze.inputs[1]) != [2]
            or only_reader(unsqueeze.outputs[0]) is not expand):
        return None
    shape = unsqueeze.inputs[0].shape
    if shape is None or len(shape) != 4 or not all(isinstance(d, int) and d > 0 for d in shape):
        return None
    b, kv, length, dim = shape
    target, into = ints(expand.inputs[1]), ints(reshape.inputs[1])
    if (target is None or len(target) != 5 or target[:2] != [b, kv] or target[2] < 1
            or target[3:] != [length, dim] or into is None):
        return None
    group = target[2]
    if into not in ([b, kv * group, length, dim], [b * kv * group, length, dim]):
        return None
    return unsqueeze, expand, reshape


def _rows_of(left: ir.Value, reader: ir.Node, batch: int,
             heads: int) -> tuple[ir.Value, list[ir.Node]] | None:
    """The [B, heads, S, L] operand behind `left` and the Reshape to
    [B * heads, S, L] between them, when `left` is one (read by `reader` only)."""
    reshape = left.producer()
    if reshape is not None and reshape.op_type == "Reshape" and only_reader(left) is reader:
        source, into = reshape.inputs[0], ints(reshape.inputs[1])
        if (source.shape is not None and len(source.shape) == 4
                and list(source.shape[:2]) == [batch, heads] and isinstance(source.shape[3], int)
                and into == [batch * heads, -1, source.shape[3]]):
            return source, [reshape]
    shape = left.shape
    if (shape is not None and len(shape) == 4 and list(shape[:2]) == [batch, heads]
            and isinstance(shape[3], int)):
        return left, []
    return None


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



# -- Where(first step, projection, stored) -> If(first step) -------------------------------
_WORK = {"MatMul", "Gemm", "Conv"}  # a branch is worth it only around real work


def branch_first_step(graph: ir.Graph, where: ir.Node) -> bool:
    """Where(c, a, b) with c one boolean element, where a's producers serve
    these Wheres only, becomes If(c) whose then-branch computes a and whose
    else-branch passes b: a's work runs only when c holds (a kept
    cross-attention cache, llm/cross_attention.py, projects at position 0
    only). Every such Where on the same c goes into one If, so projections
    the Wheres share (fused K|V matmuls) move together."""
    if where.op_type != "Where" or len(where.inputs) != 3 or not _one_element(where.inputs[0]):
        return False
    condition = where.inputs[0]
    wheres = [use.node for use in condition.uses()
              if use.node.op_type == "Where" and use.idx == 0 and use.node.graph is graph
              and _same_shapes(use.node)]
    cone = _exclusive_cone(graph, wheres)
    wheres = [w for w in wheres if w.inputs[1].producer() in cone]
    if not wheres or not any(node.op_type in _WORK for node in cone):
        return False
    cone_nodes = [node for node in graph if node in cone]  # graph order: topological
    graph.remove(cone_nodes)
    then_branch = ir.Graph([], [w.inputs[1] for w in wheres], nodes=cone_nodes,
                           name=f"{where.name}_then")
    passes = []
    for w in wheres:
        identity = ir.Node("", "Identity", [w.inputs[2]], name=f"{w.outputs[0].name}_else")
        identity.outputs[0].name = f"{w.outputs[0].name}_else"
        identity.outputs[0].shape, identity.outputs[0].type = w.inputs[2].shape, w.inputs[2].type
        passes.append(identity)
    else_branch = ir.Graph([], [p.outputs[0] for p in passes], nodes=passes,
                           name=f"{where.name}_else")
    branch = ir.Node("", "If", [condition], [ir.AttrGraph("then_branch", then_branch),
                                             ir.AttrGraph("else_branch", else_branch)],
                     num_outputs=len(wheres), name=where.name)
    branch.metadata_props.update(where.metadata_props)
    graph.insert_before(wheres[0], branch)
    for w, out in zip(wheres, branch.outputs):
        old = w.outputs[0]
        out.name, out.shape, out.type = old.name, old.shape, old.type
        old.replace_all_uses_with(out, replace_graph_outputs=True)
    graph.remove(wheres, safe=True)
    return True


def branch_kept_writes(graph: ir.Graph, marker: ir.Node) -> bool:
    """KeepFirst(cache, fresh, c) markers on one c become If(c), whose
    then-branch computes every `fresh` (their exclusive producers move into
    it) and whose else-branch passes empty updates (length 0 along the axis),
    each written into its cache at position 0 by the in-place cache update
    marker: a later step writes nothing and copies nothing."""
    if marker.domain != MARKER_DOMAIN or marker.op_type != KEEP_OP:
        return False
    condition = marker.inputs[2]
    order = {node: i for i, node in enumerate(graph)}
    markers = sorted({use.node for use in condition.uses()
                      if use.node.domain == MARKER_DOMAIN and use.node.op_type == KEEP_OP
                      and use.idx == 2 and use.node.graph is graph}, key=order.__getitem__)
    if any(m.inputs[0].shape is None or not known(m.inputs[0].shape, len(m.inputs[0].shape))
           for m in markers):
        return False  # left as it is: TensorRT's parser refuses it, the export stays functional
    cone = _exclusive_cone(graph, markers)
    cone_nodes = [node for node in graph if node in cone]  # graph order: topological
    graph.remove(cone_nodes)
    fresh, empties = [], []
    for m in markers:
        value = m.inputs[1]
        if value.producer() not in cone:  # an outer value: the branch names it by an Identity
            cone_nodes.append(_identity(value, f"{m.name}_fresh"))
            value = cone_nodes[-1].outputs[0]
        fresh.append(value)
        cache, axis = m.inputs[0], m.attributes.get_int("axis")
        shape = [0 if d == axis else n for d, n in enumerate(cache.shape)]
        empty = initializer(graph, f"{m.name}_nothing", np.zeros(shape, cache.dtype.numpy()),
                            cache.dtype)
        empties.append(_identity(empty, f"{m.name}_update_else"))
    then_branch = ir.Graph([], fresh, nodes=cone_nodes, name=f"{markers[0].name}_then")
    else_branch = ir.Graph([], [e.outputs[0] for e in empties], nodes=empties,
                           name=f"{markers[0].name}_else")
    branch = ir.Node("", "If", [condition], [ir.AttrGraph("then_branch", then_branch),
                                             ir.AttrGraph("else_branch", else_branch)],
                     num_outputs=len(markers), name=f"{markers[0].name}_first")
    branch.metadata_props.update(markers[0].metadata_props)
    graph.insert_before(markers[0], branch)
    start = initializer(graph, f"{markers[0].name}_position_0", np.zeros(1, np.int64),
                        ir.DataType.INT64)
    for m, update in zip(markers, branch.outputs):
        update.name, update.type = f"{m.name}_update", m.inputs[0].type
        write = ir.Node(MARKER_DOMAIN, MARKER_OP, [m.inputs[0], update, start],
                        [ir.AttrInt64("axis", m.attributes.get_int("axis"))], name=m.name)
        write.metadata_props.update(m.metadata_props)
        graph.insert_before(m, write)
        old = write.outputs[0]
        old.name, old.shape, old.type = m.outputs[0].name, m.outputs[0].shape, m.outputs[0].type
        m.outputs[0].replace_all_uses_with(old, replace_graph_outputs=True)
    graph.remove(markers, safe=True)
    return True


def _identity(value: ir.Value, name: str) -> ir.Node:
    node = ir.Node("", "Identity", [value], name=name)
    node.outputs[0].name, node.outputs[0].shape = name, value.shape
    node.outputs[0].type = value.type
    return node


def _one_element(value: ir.Value) -> bool:
    shape = value.shape
    return (value.dtype == ir.DataType.BOOL and shape is not None
            and all(d == 1 for d in shape))


def _same_shapes(where: ir.Node) -> bool:
    """Both branches have the output's shape (If broadcasts nothing)."""
    out = where.outputs[0]
    return known(out.shape, len(out.shape or ())) and all(
        v.shape == out.shape and v.type == out.type for v in where.inputs[1:])


def _exclusive_cone(graph: ir.Graph, wheres: list[ir.Node]) -> set[ir.Node]:
    """The nodes every output of which is read only by this set or as a
    Where's second input (the value it picks when the condition holds)."""
    sinks = set(wheres)
    wanted = {w.inputs[1].producer() for w in wheres} - {None}
    cone: set[ir.Node] = set()
    for node in reversed(list(graph)):  # readers come after their producers
        if node not in wanted or any(v.is_graph_output() or not v.uses() for v in node.outputs):
            continue
        if all(use.node in cone or (use.node in sinks and use.idx == 1)
               for v in node.outputs for use in v.uses()):
            cone.add(node)
            wanted.update(v.producer() for v in node.inputs if v is not None)
    return cone
