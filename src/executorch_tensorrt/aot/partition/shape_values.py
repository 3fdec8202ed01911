"""Shape values (SymInts: `sym_size`, size arithmetic) never cross into a
TensorRT partition: each partition computes the ones it reads.

A shape value that crossed would reach the partition as a 0-D INT64 network
input. The engine would then need it as a shape tensor with its own values in
every optimization profile, and ExecuTorch would pass it as a plain int, not a
tensor, which no executor binds. Recomputing it is one Shape/Gather in the
partition. Two steps, because a partitioner may not change the graph:

1. `private_shape_values`, a pass before partitioning: every node that reads a
   shape value gets its own copy of the computation, reading the dimension
   from a tensor that node already reads where one carries the same symbol,
   else from a user input (neither adds a dependency between partitions).
2. `attach`, in the partitioner: a shape value read by one partition only
   joins that partition.
"""
from __future__ import annotations

import torch
from torch.fx.passes.infra.pass_base import PassResult

_SYM_SIZE = torch.ops.aten.sym_size.int


def is_shape_value(node: torch.fx.Node) -> bool:
    return isinstance(node.meta.get("val"), torch.SymInt)


def _dim_expr(tensor, dim: int):
    val = tensor.meta.get("val") if isinstance(tensor, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or not -val.dim() <= dim < val.dim():
        return None
    size = val.shape[dim]
    return size.node.expr if isinstance(size, torch.SymInt) else None


def _user_inputs(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    return [n for n in graph.nodes if n.op == "placeholder"
            and isinstance(n.meta.get("val"), torch.Tensor)]


def _source(leaf: torch.fx.Node, reader: torch.fx.Node,
            inputs: list[torch.fx.Node]) -> tuple[torch.fx.Node, int]:
    """Where `reader`'s copy of `leaf` (a sym_size) reads its dimension."""
    tensor, dim = leaf.args[0], int(leaf.args[1])
    expr = _dim_expr(tensor, dim)
    if expr is None:
        return tensor, dim
    for t in [*reader.all_input_nodes, *inputs]:
        val = t.meta.get("val")
        for d in range(val.dim() if isinstance(val, torch.Tensor) else 0):
            if _dim_expr(t, d) == expr:
                return t, d
    return tensor, dim


def _copy(node: torch.fx.Node, reader: torch.fx.Node, inputs: list[torch.fx.Node],
          graph: torch.fx.Graph) -> torch.fx.Node:
    if node.op != "call_function":
        return node  # a user's own int input: nothing to compute
    if node.target is _SYM_SIZE:
        args = _source(node, reader, inputs)
    else:
        args = tuple(_copy(a, reader, inputs, graph)
                     if isinstance(a, torch.fx.Node) and is_shape_value(a) else a
                     for a in node.args)
    with graph.inserting_before(reader):
        new = graph.call_function(node.target, args, dict(node.kwargs))
    new.meta.update(node.meta)
    return new


def private_shape_values(graph_module: torch.fx.GraphModule) -> PassResult:
    """Gives every reader of a shape value its own copy (step 1 above);
    originals no one reads any more go."""
    graph = graph_module.graph
    inputs = _user_inputs(graph)
    readers = [n for n in graph.nodes if n.op == "call_function" and not is_shape_value(n)
               and any(is_shape_value(a) for a in n.all_input_nodes)]
    for reader in readers:
        for value in [a for a in reader.all_input_nodes if is_shape_value(a)]:
            if value.op == "call_function":
                reader.replace_input_with(value, _copy(value, reader, inputs, graph))
    for node in reversed(list(graph.nodes)):  # readers before what they read
        if node.op == "call_function" and is_shape_value(node) and not node.users:
            graph.erase_node(node)
    graph_module.recompile()
    return PassResult(graph_module, bool(readers))


def _chain(value: torch.fx.Node, inside: set[torch.fx.Node]) -> list[torch.fx.Node]:
    """`value` and the shape values it is computed from, outside `inside`."""
    out, todo = [], [value]
    while todo:
        node = todo.pop()
        if node in inside or node in out or node.op != "call_function":
            continue
        out.append(node)
        todo.extend(a for a in node.all_input_nodes if is_shape_value(a))
    return out


def attach(groups: list[list[torch.fx.Node]]) -> list[torch.fx.Node]:
    """Moves each shape value a group reads from outside (with what it is
    computed from) into that group, where the group is its only reader and
    its tensor source is a user input or already reaches the group (so no new
    dependency between partitions). Returns the moved nodes."""
    of = {n: i for i, g in enumerate(groups) for n in g}
    moved: list[torch.fx.Node] = []
    for i, group in enumerate(groups):
        members = set(group)
        reached = {a for n in group for a in n.all_input_nodes} | members
        for value in {a for n in group for a in n.all_input_nodes
                      if is_shape_value(a) and a not in members}:
            chain = _chain(value, members)
            own = members | set(chain)
            if not chain or any(u not in own for n in chain for u in n.users):
                continue
            sources = {n.args[0] for n in chain if n.target is _SYM_SIZE}
            if not all(s.op == "placeholder" or s in reached for s in sources):
                continue
            for node in chain:
                if node in of and node not in members:
                    groups[of[node]].remove(node)
                of[node] = i
                group.append(node)
            members |= set(chain)
            moved.extend(chain)
    return moved
