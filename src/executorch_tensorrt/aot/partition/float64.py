"""float64 math that TensorRT can take: rewritten on the exported program
before partitioning (a partitioner may not change the graph), because
TensorRT has no float64 type.

- A subgraph that reads no input (sin/cos position tables built from `arange`)
  and involves float64 is computed once here and becomes a constant: what the
  rest of the graph reads from it is stored, usually already cast to float32.
- An input-dependent float64 region (rotary angles from position ids) whose
  every result is cast to float32 or lower before use is computed in float32:
  the cast would drop the extra precision anyway, except for what float32
  rounding of the intermediate values adds (docs/precision.md states it).
  A float64 value that reaches an output, or is used any other way, stays
  float64 and with ExecuTorch: what the caller gets does not change.
"""
from __future__ import annotations

import torch
from executorch.exir.passes.constant_prop_pass import get_fake_mode, replace_with_constant_node
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument
from torch.utils import _pytree as pytree

_WIDE = torch.float64
_NARROW = torch.float32
_CAST_DOWN_TO = {torch.float32, torch.float16, torch.bfloat16}
_CASTS = {"to", "_to_copy", "_to_dim_order_copy"}
# torch.export checks a value's dtype with these; they follow the value.
_METADATA_CHECK = "_assert_tensor_metadata"


def _op(node: torch.fx.Node) -> str:
    return getattr(node.target, "__name__", str(node.target)).split(".")[0]


def _vals(node: torch.fx.Node) -> list[torch.Tensor]:
    return [v for v in pytree.tree_leaves(node.meta.get("val"))
            if isinstance(v, torch.Tensor)]


def _is_wide(node: torch.fx.Node) -> bool:
    return any(v.dtype == _WIDE for v in _vals(node))


def _constant_tensor(ep, node: torch.fx.Node) -> torch.Tensor | None:
    sig = ep.graph_signature
    if name := sig.inputs_to_lifted_tensor_constants.get(node.name):
        return ep.constants[name]
    if name := sig.inputs_to_parameters.get(node.name):
        return ep.state_dict[name]
    if (name := sig.inputs_to_buffers.get(node.name)) and name not in sig.buffers_to_mutate.values():
        return ep.constants.get(name, ep.state_dict.get(name))
    return None


def _input_independent(ep) -> set[torch.fx.Node]:
    """Nodes computed from constants alone (no user input, no mutable state),
    pure, structurally: nothing is evaluated here."""
    const: set[torch.fx.Node] = set()
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            if _constant_tensor(ep, node) is not None:
                const.add(node)
        elif node.op == "call_function" and not node.is_impure() and _vals(node):
            if all(a in const for a in node.all_input_nodes):
                const.add(node)
    return const


def _drop_metadata_checks(ep, nodes: set[torch.fx.Node]) -> None:
    for node in list(ep.graph.nodes):
        if _op(node) == _METADATA_CHECK and node.args and node.args[0] in nodes:
            ep.graph.erase_node(node)


def fold_float64_constants(ep) -> int:
    """Replaces each input-independent subgraph that involves float64 by the
    constants its users read. Returns how many constants were made. Other
    input-independent subgraphs (a weight's transpose) are left alone: folding
    them would copy weights."""
    const = _input_independent(ep)
    wide: set[torch.fx.Node] = set()  # constant nodes with a float64 value upstream
    for node in ep.graph.nodes:
        if node in const and (_is_wide(node) or any(a in wide for a in node.all_input_nodes)):
            wide.add(node)
    _drop_metadata_checks(ep, wide)
    frontier = [n for n in wide if n.op == "call_function"
                and any(u not in const for u in n.users)]
    if not frontier:
        return 0
    values: dict[torch.fx.Node, object] = {}
    with torch.no_grad():
        for node in ep.graph.nodes:  # topological order; only what the frontier needs
            if node not in const:
                continue
            if node.op == "placeholder":
                values[node] = _constant_tensor(ep, node)
                continue
            args, kwargs = pytree.tree_map(
                lambda a: values[a] if isinstance(a, torch.fx.Node) else a, (node.args, node.kwargs))
            values[node] = node.target(*args, **kwargs)
    fake_mode = get_fake_mode(ep)
    first_input = next(n for n in ep.graph.nodes
                       if n.op == "placeholder" and n.name in ep.graph_signature.user_inputs)
    specs = {s.arg.name: s for s in ep.graph_signature.input_specs}
    for node in frontier:
        value = values[node]
        if not isinstance(value, torch.Tensor):
            continue
        value = value.contiguous() if 0 in value.stride() else value.clone()
        placeholder, fqn = replace_with_constant_node(node, value, first_input, fake_mode, ep)
        specs[placeholder.name] = InputSpec(kind=InputKind.CONSTANT_TENSOR,
                                            arg=TensorArgument(name=placeholder.name),
                                            target=fqn, persistent=True)
    ep.graph.eliminate_dead_code()
    _drop_unused_constants(ep, specs)
    return len(frontier)


def _drop_unused_constants(ep, specs: dict[str, InputSpec]) -> None:
    """Lifted constants only the folded subgraph read (parameters and buffers stay)."""
    sig = ep.graph_signature
    for node in list(ep.graph.find_nodes(op="placeholder")):
        name = sig.inputs_to_lifted_tensor_constants.get(node.name)
        if name is not None and not node.users and node.name in specs:
            ep.constants.pop(name, None)
            ep.graph.erase_node(node)
            del specs[node.name]
    sig.input_specs = [specs[n.name] for n in ep.graph.find_nodes(op="placeholder")]
    ep.graph_module.recompile()


def _regions(ep) -> list[set[torch.fx.Node]]:
    """Connected float64 regions of the graph."""
    wide = {n for n in ep.graph.nodes if n.op in ("placeholder", "call_function") and _is_wide(n)}
    seen: set[torch.fx.Node] = set()
    regions = []
    for start in wide:
        if start in seen:
            continue
        region, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node in region:
                continue
            region.add(node)
            todo += [m for m in (*node.all_input_nodes, *node.users) if m in wide]
        seen |= region
        regions.append(region)
    return regions


def _cast_down(user: torch.fx.Node) -> bool:
    if _op(user) not in _CASTS:
        return False
    return bool(_vals(user)) and all(v.dtype in _CAST_DOWN_TO for v in _vals(user))


def _narrowable(ep, region: set[torch.fx.Node]) -> bool:
    for node in region:
        if node.op == "placeholder" and _constant_tensor(ep, node) is None:
            return False  # a float64 user input: the caller passes float64
        for user in node.users:
            if user not in region and not _cast_down(user) and _op(user) != _METADATA_CHECK:
                return False  # an output, or a use that keeps the wide value
    return True


def narrow_float64(ep) -> int:
    """Computes in float32 each float64 region whose every result is cast to
    float32 or lower. Returns the number of nodes narrowed."""
    sig = ep.graph_signature
    narrowed = 0
    for region in _regions(ep):
        if not _narrowable(ep, region):
            continue
        _drop_metadata_checks(ep, region)
        for node in region:
            if node.op == "placeholder":
                fqn = (sig.inputs_to_lifted_tensor_constants.get(node.name)
                       or sig.inputs_to_parameters.get(node.name)
                       or sig.inputs_to_buffers.get(node.name))
                store = ep.constants if fqn in ep.constants else ep.state_dict
                # A new tensor: the caller's model may share the old one.
                store[fqn] = store[fqn].to(_NARROW)
            else:  # dtype arguments: `to(x, float64)`, `arange(..., dtype=float64)`
                node.args, node.kwargs = pytree.tree_map(
                    lambda a: _NARROW if a is _WIDE else a, (node.args, node.kwargs))
            node.meta["val"] = pytree.tree_map(
                lambda v: v.to(_NARROW) if isinstance(v, torch.Tensor) and v.dtype == _WIDE else v,
                node.meta["val"])
            node.meta.pop("tensor_meta", None)
            narrowed += 1
    if narrowed:
        ep.graph_module.recompile()
    return narrowed


def rewrite_float64(ep) -> None:
    """Both rewrites, in place: folding first, so a constant table never
    counts as an input-dependent region."""
    fold_float64_constants(ep)
    narrow_float64(ep)
