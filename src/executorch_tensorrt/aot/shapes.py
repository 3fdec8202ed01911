"""torch.export dynamic dimensions -> TensorRT optimization profile bounds."""
from __future__ import annotations

import sympy
import torch

from ..errors import ExportError
from ..tensorrt.options import InputProfile

__all__ = ["InputProfile", "input_profiles"]


def _finite_int(value) -> int | None:
    """int(value), or None for an infinite bound (sympy oo, torch's int_oo)."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None


def _bounds(ep: torch.export.ExportedProgram, dim, where: str) -> tuple[int, int]:
    if isinstance(dim, int):
        return dim, dim
    expr = dim.node.expr
    if isinstance(expr, (int, sympy.Integer)):
        return int(expr), int(expr)
    lows, highs = {}, {}
    for sym in expr.free_symbols:
        vr = ep.range_constraints.get(sym)
        if vr is None:
            raise ExportError(f"{where}: dimension {expr} has no range in the exported program")
        lo, hi = _finite_int(vr.lower), _finite_int(vr.upper)
        if lo is None or hi is None:
            raise ExportError(
                f"{where}: dynamic dimension {sym} has no finite upper bound, and TensorRT "
                "needs one for its optimization profile; give it one, e.g. "
                "torch.export.Dim('batch', min=1, max=8)")
        # torch.export specialises sizes 0 and 1, so Dim(min=1) arrives as a
        # lower bound of 2; the ONNX graph is size-generic, so admit 1 again.
        lows[sym], highs[sym] = (1 if lo == 2 else lo), hi
    low, high = int(expr.subs(lows)), int(expr.subs(highs))
    return min(low, high), max(low, high)


def input_profiles(ep: torch.export.ExportedProgram) -> list[InputProfile]:
    """One profile per user input tensor of `ep`, in order."""
    user_inputs = set(ep.graph_signature.user_inputs)
    profiles = []
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in user_inputs:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        lo, hi = zip(*(_bounds(ep, d, f"input {node.name!r} dim {i}")
                       for i, d in enumerate(val.shape))) if val.dim() else ((), ())
        profiles.append(InputProfile(tuple(lo), tuple(hi), tuple(hi)))
    return profiles
