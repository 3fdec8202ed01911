"""What a partition's inputs must satisfy for eager PyTorch to accept them,
read from the partition's graph at export.

ONNX's Gather wraps negative indices and onnxruntime or TensorRT refuse
out-of-range ones with their own words (or read garbage), where eager raises
IndexError. So preprocess records, per integer input that reaches the index
operand of an indexing op over a dimension of static size n (directly or
through ops that keep its values), the half-open range eager accepts
(`index_range`), and the groups of input dimensions torch.export gave one
symbol (`equal_dims`: "2 tokens with 1 position" is refused). The runtime
checks both per call (runtime/input_checks.py, native/src/plans/input_checks.cpp).

What eager accepts (measured with torch 2.13 on the CPU, n = 5): embedding,
index_select and gather take [0, n) (-1 raises); index.Tensor takes [-n, n).
Ops not listed here, and indexed dimensions of dynamic size, get no range.
"""
from __future__ import annotations

import torch

from ...blob.metadata import Binding

__all__ = ["equal_dims", "index_ranges"]

_INT_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)

# Ops whose output holds (some of) its first operand's values unchanged.
_KEEPS_VALUES = {
    "view", "view_copy", "reshape", "_unsafe_view", "squeeze", "squeeze_copy", "unsqueeze",
    "unsqueeze_copy", "expand", "expand_copy", "clone", "_clone_dim_order", "alias",
    "alias_copy", "_to_copy", "_to_dim_order_copy", "flatten",
}


def _op_name(node: torch.fx.Node) -> str | None:
    """The ATen (or dim_order_ops) name of a call, edge or not: "embedding"."""
    if node.op != "call_function":
        return None
    op = getattr(node.target, "_op", node.target)  # an EdgeOpOverload wraps the OpOverload
    schema = getattr(op, "_schema", None)
    if schema is None:
        return None
    return schema.name.split("::")[-1]


def _static_size(tensor: torch.fx.Node, dim: int) -> int | None:
    val = tensor.meta.get("val") if isinstance(tensor, torch.fx.Node) else None
    shape = getattr(val, "shape", None)
    if shape is None or not -len(shape) <= dim < len(shape):
        return None
    size = shape[dim]
    return size if isinstance(size, int) else None  # a SymInt: dynamic, not checked


def _int_valued(node: torch.fx.Node) -> bool:
    val = node.meta.get("val")
    return getattr(val, "dtype", None) in _INT_DTYPES


def _ranges_at(user: torch.fx.Node, value: torch.fx.Node) -> list[tuple[int, int]]:
    """The ranges eager accepts for `value` where `user` reads it as an index."""
    name, args = _op_name(user), user.args
    found = []
    if name == "embedding" and len(args) > 1 and args[1] is value:
        n = _static_size(args[0], 0)
        if n is not None:
            found.append((0, n))
    elif name in ("index_select", "gather") and len(args) > 2 and args[2] is value:
        dim = args[1]
        n = _static_size(args[0], dim) if isinstance(dim, int) else None
        if n is not None:
            found.append((0, n))
    elif name == "index" and len(args) > 1 and isinstance(args[1], (list, tuple)):
        for dim, index in enumerate(args[1]):
            if index is value:
                n = _static_size(args[0], dim)
                if n is not None:
                    found.append((-n, n))
    return found


def _user_inputs(program: torch.export.ExportedProgram, inputs: list[Binding]) -> list:
    """The placeholder of each input binding, by position (the ONNX exporter
    may rename inputs, "arg_0", but keeps their order); where the counts or
    ranks disagree, none (nothing is recorded)."""
    users = set(program.graph_signature.user_inputs)
    nodes = [n for n in program.graph.nodes if n.op == "placeholder" and n.name in users]
    nodes = nodes[:len(inputs)]  # delegate-owned state follows the user's inputs
    if len(nodes) != len(inputs):
        return [None] * len(inputs)
    ranks = [len(getattr(n.meta.get("val"), "shape", ())) for n in nodes]
    if ranks != [len(b.shape) for b in inputs]:
        return [None] * len(inputs)
    return nodes


def index_ranges(program: torch.export.ExportedProgram,
                 inputs: list[Binding]) -> dict[int, tuple[int, int]]:
    """Per input binding (by index) of an integer dtype: the intersection of
    the ranges every indexing op it reaches accepts. An empty intersection
    (no value could pass) is not recorded: the blob's schema wants lo < hi."""
    ranges: dict[int, tuple[int, int]] = {}
    for k, node in enumerate(_user_inputs(program, inputs)):
        if node is None or not _int_valued(node):
            continue
        lo, hi, seen, todo = None, None, {node}, [node]
        while todo:
            value = todo.pop()
            for user in value.users:
                for a, b in _ranges_at(user, value):
                    lo, hi = (a, b) if lo is None else (max(lo, a), min(hi, b))
                if (_op_name(user) in _KEEPS_VALUES and user.args and user.args[0] is value
                        and _int_valued(user) and user not in seen):
                    seen.add(user)
                    todo.append(user)
        if lo is not None and lo < hi:  # an empty intersection: no check, as documented
            ranges[k] = (lo, hi)
    return ranges


def equal_dims(program: torch.export.ExportedProgram,
               inputs: list[Binding]) -> list[list[list[int]]]:
    """Groups of [input index, dim] that torch.export gave the same symbolic
    size (so eager would have refused unequal sizes), each of 2 or more."""
    groups: dict[str, list[list[int]]] = {}
    for k, node in enumerate(_user_inputs(program, inputs)):
        shape = getattr(node.meta.get("val"), "shape", None) if node is not None else None
        for d, size in enumerate(shape or ()):
            if isinstance(size, torch.SymInt):
                groups.setdefault(str(size.node.expr), []).append([k, d])
    return [g for g in groups.values() if len(g) >= 2]
