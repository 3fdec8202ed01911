"""PT2E weight-only Linears with zero points -> the affine format (formats/affine.py).

A convert_pt2e graph whose Linear weight is `dequantize_per_channel(q, scale,
zero, axis 0, qmin, qmax, dtype)` (or per tensor) with a zero point other than
0, and whose input is float, computes W = (q - zero) * scale. TensorRT takes
no zero point; `to_affine` puts an AffineLinear (the symmetric int4 / int8 GEMM
plus a group-sum correction, exact) in the Linear's place, as a submodule the
graph calls. A code range of 16 values or fewer ([0, 15], [-8, 7]) is stored
as int4, up to 256 as int8.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from ..registry import steps_of
from .fx_nodes import graph_attr

_INTEGER = (torch.int8, torch.uint8)


def _free_name(gm: GraphModule, stem: str) -> str:
    i = 0
    while hasattr(gm, f"{stem}_{i}"):
        i += 1
    return f"{stem}_{i}"


def to_affine(gm: GraphModule, linear: Node, w_dq: Node, layer: str) -> str | None:
    """Replaces `linear` (aten.linear with weight `w_dq`) by an AffineLinear
    submodule when its weight is an integer one with zero points TensorRT's
    symmetric Q/DQ cannot take; returns the report's line, or None (not
    such a weight: the caller's rules apply)."""
    per_channel = "per_channel" in str(w_dq.target)
    dtype = w_dq.args[6] if per_channel else w_dq.args[-1]
    qmin, qmax = (w_dq.args[4], w_dq.args[5]) if per_channel else (w_dq.args[3], w_dq.args[4])
    q_node, bias = w_dq.args[0], linear.args[2] if len(linear.args) > 2 else None
    if (linear.target != torch.ops.aten.linear.default or dtype not in _INTEGER
            or not (isinstance(q_node, Node) and q_node.op == "get_attr")
            or (per_channel and w_dq.args[3] != 0)
            or not (bias is None or (isinstance(bias, Node) and bias.op == "get_attr"))):
        return None
    constant = [a if not isinstance(a, Node) else (graph_attr(gm, a.target)
                                                    if a.op == "get_attr" else None)
                for a in w_dq.args[1:3]]
    if any(c is None for c in constant):
        return None  # computed scales: refused by the caller (dynamic quantization)
    q = graph_attr(gm, q_node.target)
    out_features, in_features = q.shape
    scale, zero = (torch.as_tensor(c, dtype=torch.float32).reshape(-1, 1).expand(out_features, 1)
                   for c in constant)
    if not bool(torch.any(zero != 0)) and dtype == torch.int8:
        return None  # symmetric: the int8 path
    bits = 4 if qmax - qmin < 16 else 8
    center = qmin + 2 ** (bits - 1)  # q - center is signed in [-2**(bits-1), 2**(bits-1) - 1]
    signed = (q.to(torch.int16) - center).to(torch.int8)
    bias_value = graph_attr(gm, bias.target).detach() if bias is not None else None
    affine = steps_of("affine")
    module = affine.from_signed(layer, signed, scale.contiguous(), (zero - center).contiguous(),
                                bits, in_features, bias_value)
    name = _free_name(gm, "_etrt_affine_linear")
    gm.add_submodule(name, module)
    with gm.graph.inserting_before(linear):
        replacement = gm.graph.call_module(name, (linear.args[0],))
    replacement.meta = dict(linear.meta)
    linear.replace_all_uses_with(replacement)
    gm.graph.erase_node(linear)
    return affine.describe(module, "zero points")
