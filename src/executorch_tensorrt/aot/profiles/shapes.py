"""torch.export dynamic dimensions -> TensorRT optimization profiles.

A profile gives each dynamic symbol of a program (a torch.export Dim) a range
and an opt value; an input's min/opt/max shapes follow from its dimensions'
expressions. Symbols keep their names from the whole program to its
partitions, so profiles resolved once on the whole program (the `$<symbol>`
keys of option.py) apply to every partition.
"""
from __future__ import annotations

import itertools
import math
import re

import sympy
import torch

from ...errors import ExportError
from ...tensorrt.options import InputProfile
from .option import ProfileOption, Range, normalize_profiles

__all__ = ["InputProfile", "input_profile_sets", "input_profiles",
           "resolve_profiles"]

SymbolProfile = dict[str, Range]  # symbol name -> (min, opt, max); others span their range
_MAX_COVERAGE_CELLS = 200_000


def _finite_int(value) -> int | None:
    """int(value), or None for an infinite bound (sympy oo, torch's int_oo)."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None


def _symbol_range(ep: torch.export.ExportedProgram, sym, where: str) -> tuple[int, int]:
    vr = ep.range_constraints.get(sym)
    if vr is None:
        raise ExportError(f"{where}: dimension {sym} has no range in the exported program")
    lo, hi = _finite_int(vr.lower), _finite_int(vr.upper)
    if lo is None or hi is None:
        raise ExportError(
            f"{where}: dynamic dimension {sym} has no finite upper bound, and TensorRT "
            "needs one for its optimization profile; give it one, e.g. "
            "torch.export.Dim('batch', min=1, max=8)")
    # torch.export specialises sizes 0 and 1, so Dim(min=1) may arrive as a
    # lower bound of 2; the ONNX graph is size-generic, so admit 1 again.
    return (1 if lo == 2 else lo), hi


def _bounds(ep, dim, where: str, chosen: SymbolProfile) -> Range:
    """min, opt, max of one dimension; symbols in `chosen` take its range,
    others their export range with opt at the top."""
    if isinstance(dim, int):
        return dim, dim, dim
    expr = dim.node.expr
    if isinstance(expr, (int, sympy.Integer)):
        return int(expr), int(expr), int(expr)
    values: list[dict] = [{}, {}, {}]
    for sym in expr.free_symbols:
        lo, hi = _symbol_range(ep, sym, where)
        for v, x in zip(values, chosen.get(sym.name, (lo, hi, hi))):
            v[sym] = x
    low, opt, high = (int(expr.subs(v)) for v in values)
    low, high = min(low, high), max(low, high)
    return low, min(max(opt, low), high), high


def _user_inputs(ep) -> list[torch.fx.Node]:
    user_inputs = set(ep.graph_signature.user_inputs)
    return [n for n in ep.graph.nodes if n.op == "placeholder" and n.name in user_inputs
            and isinstance(n.meta.get("val"), torch.Tensor)]


def input_profile_sets(ep: torch.export.ExportedProgram,
                       profiles: list[SymbolProfile] | None = None) -> list[list[InputProfile]]:
    """One optimization profile (one InputProfile per user input tensor of
    `ep`, in order) per entry of `profiles` (resolve_profiles), or one over the
    export ranges; profiles equal for these inputs are kept once."""
    sets: list[list[InputProfile]] = []
    for chosen in profiles or [{}]:
        current = []
        for node in _user_inputs(ep):
            val = node.meta["val"]
            dims = [_bounds(ep, d, f"input {node.name!r} dim {i}", chosen)
                    for i, d in enumerate(val.shape)]
            lo, opt, hi = (tuple(d[k] for d in dims) for k in range(3))
            current.append(InputProfile(lo, opt, hi))
        if current not in sets:
            sets.append(current)
    return sets


def input_profiles(ep: torch.export.ExportedProgram) -> list[InputProfile]:
    """The single profile over the export ranges (one per user input, in order)."""
    return input_profile_sets(ep)[0]


# -- the user's option, resolved on the whole program ------------------------------------

def _source_name(source) -> str:
    name = source.name
    return name() if callable(name) else name


def _dimension_names(ep) -> tuple[dict[str, str], dict[str, str], dict[str, tuple[int, int]]]:
    """(key -> symbol name for every way a user may name a dynamic dimension,
    symbol name -> how messages name it, symbol name -> export range)."""
    keys: dict[str, str] = {}
    shown: dict[str, str] = {}
    ranges: dict[str, tuple[int, int]] = {}
    debug_names: dict[str, str] = {}
    for i, node in enumerate(_user_inputs(ep)):
        for d, size in enumerate(node.meta["val"].shape):
            if not isinstance(size, torch.SymInt) or not isinstance(size.node.expr, sympy.Symbol):
                continue
            sym = size.node.expr
            env = size.node.shape_env
            for source in env.var_to_sources.get(sym, []):  # the Dim names torch.export kept
                name = getattr(env, "source_name_to_debug_name", {}).get(_source_name(source))
                if name:
                    debug_names.setdefault(sym.name, name)
            ranges[sym.name] = _symbol_range(ep, sym, f"input {node.name!r} dim {d}")
            keys[f"{i}:{d}"] = keys[f"{node.name}:{d}"] = sym.name
            shown.setdefault(sym.name, f"{node.name}:{d}")
    for sym_name, name in debug_names.items():
        keys.setdefault(name, sym_name)
        shown[sym_name] = name
    for sym_name in ranges:
        keys[f"${sym_name}"] = sym_name
    return keys, shown, ranges


def _automatic(count: int, ranges: dict[str, tuple[int, int]]) -> list[SymbolProfile]:
    """Power-of-two buckets of the widest dynamic dimension, opt at each
    bucket's top: [1, 2048] in 3 gives 1..16, 17..256, 257..2048."""
    dynamic = {s: r for s, r in ranges.items() if r[0] < r[1]}
    if not dynamic:
        raise ExportError(f"profiles={count} asks for {count} optimization profiles, but the "
                          "program has no dynamic dimension to split; drop the option or "
                          "export with dynamic shapes")
    sym = max(sorted(dynamic), key=lambda s: (dynamic[s][1] / max(dynamic[s][0], 1),
                                              dynamic[s][1]))
    lo, hi = dynamic[sym]
    base = max(lo, 1)
    tops: list[int] = []
    for k in range(1, count):
        top = 1 << math.ceil(math.log2(base * (hi / base) ** (k / count)) - 1e-9)
        if top >= hi:
            break
        if top >= lo and (not tops or top > tops[-1]):
            tops.append(top)
    tops.append(hi)
    out, start = [], lo
    for top in tops:
        out.append({sym: (start, top, top)})
        start = top + 1
    return out


def _check_coverage(profiles: list[SymbolProfile], ranges: dict[str, tuple[int, int]],
                    shown: dict[str, str]) -> None:
    """Every combination of sizes inside the export ranges falls in some
    profile: a call the program admits must not find no engine profile."""
    syms = sorted({s for p in profiles for s in p})
    full = {s: (ranges[s][0], ranges[s][1], ranges[s][1]) for s in syms}
    cuts = {}
    for s in syms:
        lo, hi = ranges[s]
        points = {lo}
        for p in profiles:
            a, _, b = p.get(s, full[s])
            points.update(x for x in (a, b + 1) if lo <= x <= hi)
        cuts[s] = sorted(points)
    if math.prod(len(c) for c in cuts.values()) > _MAX_COVERAGE_CELLS:
        return  # too many to enumerate; the runtime names the profiles of a call outside
    for point in itertools.product(*(cuts[s] for s in syms)):
        if any(all(p.get(s, full[s])[0] <= v <= p.get(s, full[s])[2]
                   for s, v in zip(syms, point)) for p in profiles):
            continue
        where = []
        for s, v in zip(syms, point):
            nxt = [c for c in cuts[s] if c > v]
            end = nxt[0] - 1 if nxt else ranges[s][1]
            where.append(f"{shown[s]} = {v}" + (f"..{end}" if end != v else ""))
        raise ExportError(
            f"the optimization profiles leave {', '.join(where)} uncovered, inside the export "
            "range: calls of those sizes could not run; add a profile for them or narrow the "
            "dimension's range in torch.export")


def resolve_profiles(ep: torch.export.ExportedProgram, option) -> list[SymbolProfile] | None:
    """The `profiles` option (option.py) for the whole program `ep`:
    None for one profile over the export ranges, else one {symbol name:
    (min, opt, max)} per profile, checked against the export ranges (inside
    them, and covering them together)."""
    option = normalize_profiles(option)
    if option is None or option == 1:
        return None
    if not isinstance(option, int) and all(k.startswith("$") for p in option for k, _ in p):
        # Resolved and checked on the whole program by the partitioner; a
        # partition may not show every symbol among its own inputs.
        return [{k[1:]: r for k, r in p} for p in option]
    keys, shown, ranges = _dimension_names(ep)
    if isinstance(option, int):
        return _automatic(option, ranges)
    known = sorted(k for k in keys if not k.startswith("$") and not re.fullmatch(r"\d+:\d+", k))
    out: list[SymbolProfile] = []
    for k, profile in enumerate(option):
        chosen: SymbolProfile = {}
        for key, (lo, opt, hi) in profile:
            sym = keys.get(key)
            if sym is None:
                raise ExportError(
                    f"profiles[{k}] names dimension {key!r}, which is not a dynamic dimension "
                    f"of the program; its dynamic dimensions are {known or 'none'} (by Dim "
                    "name or INPUT:DIM, INPUT an input's index or name)")
            r_lo, r_hi = ranges[sym]
            if not (r_lo <= lo and hi <= r_hi):
                raise ExportError(f"profiles[{k}][{key!r}] is [{lo}, {opt}, {hi}], outside the "
                                  f"export range of {shown[sym]}: {r_lo}..{r_hi}")
            if chosen.get(sym, (lo, opt, hi)) != (lo, opt, hi):
                raise ExportError(f"profiles[{k}] gives {shown[sym]} two ranges: "
                                  f"{list(chosen[sym])} and [{lo}, {opt}, {hi}] (under "
                                  f"{key!r})")
            chosen[sym] = (lo, opt, hi)
        out.append(chosen)
    _check_coverage(out, ranges, shown)
    return out


def resolved_option(profiles: list[SymbolProfile] | None) -> ProfileOption | None:
    """resolve_profiles' answer as the option again, keyed "$<symbol>", for the
    partitions' compile specs."""
    if profiles is None:
        return None
    return tuple(tuple(sorted((f"${s}", r) for s, r in p.items())) for p in profiles)
