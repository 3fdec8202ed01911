"""Checks of the TensorRT uses tensorrt_api_calls.py collects: against a
TensorRT Python module (names, properties, pybind's documented signatures) and
against the GPU stand-in's classes (read with ast: the stand-in imports torch)."""
from __future__ import annotations

import ast
import inspect
import pathlib
import re
from dataclasses import dataclass

from tensorrt_api_calls import MODULE, Use


@dataclass(frozen=True)
class Signature:
    names: tuple[str, ...]  # parameters after self
    required: int  # leading parameters without a default
    varargs: bool


def _split(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return parts + ([cur.strip()] if cur.strip() else [])


def signatures(member, name: str) -> list[Signature]:
    """Every overload pybind documents for `member` (`name(self: ..., a: T = d) -> R`)."""
    doc = getattr(member, "__doc__", None) or ""
    out = []
    for line in doc.splitlines():
        found = re.match(rf"^\s*(?:\d+\.\s*)?{re.escape(name)}\((.*)\)\s*->", line)
        if not found or found.group(1) == "*args, **kwargs":
            continue
        params = _split(found.group(1))
        if params and params[0].startswith("self"):
            params = params[1:]
        names = tuple(p.split(":")[0].split("=")[0].strip() for p in params)
        varargs = any(n.startswith("*") for n in names)
        required = next((k for k, p in enumerate(params) if "=" in p), len(params))
        out.append(Signature(names, required, varargs))
    return out


def call_fits(sig: Signature, positional: int, keywords: tuple[str, ...]) -> bool:
    if sig.varargs:
        return True
    if positional > len(sig.names) or any(k not in sig.names[positional:] for k in keywords):
        return False
    given = set(sig.names[:positional]) | set(keywords)
    return all(n in given for n in sig.names[:sig.required])


def problems(module, uses: list[Use], exempt: dict[tuple[str, str], str]) -> list[str]:
    """Each use that `module` does not have, or calls with arguments no overload
    takes, or calls a property / assigns a method. Guarded uses (hasattr, a
    default, except AttributeError) and `exempt` ones (other TensorRT versions)
    may be missing; RTX-only uses are not checked against standard TensorRT."""
    out = []
    rtx = module.__name__.startswith("tensorrt_rtx")
    for u in uses:
        owner = module if u.cls == MODULE else getattr(module, u.cls, None)
        if owner is None:
            if not (u.guarded or (u.rtx_only and not rtx)):
                out.append(f"{u.where}: {module.__name__} has no class {u.cls} ({u.name})")
            continue
        if u.name == "__init__":
            member = owner
        elif not hasattr(owner, u.name):
            if not (u.guarded or (u.rtx_only and not rtx) or (u.cls, u.name) in exempt):
                out.append(f"{u.where}: {module.__name__}.{u.cls} has no attribute {u.name!r}")
            continue
        else:
            member = inspect.getattr_static(owner, u.name)
        if isinstance(member, property):
            if u.call is not None:
                out.append(f"{u.where}: {u.cls}.{u.name} is a property, called as a method")
            elif u.store and member.fset is None:
                out.append(f"{u.where}: {u.cls}.{u.name} is read-only, assigned")
            continue
        if u.call is None or u.call[0] < 0 or u.cls == MODULE:
            continue
        sigs = signatures(owner.__init__ if u.name == "__init__" else getattr(owner, u.name),
                          u.name)
        if sigs and not any(call_fits(s, *u.call) for s in sigs):
            out.append(f"{u.where}: {u.cls}.{u.name} called with {u.call[0]} positional "
                       f"argument(s) and keywords {list(u.call[1])}; {module.__name__} takes "
                       + " or ".join(f"({', '.join(s.names)})" for s in sigs))
    return out


# --- the GPU stand-in -----------------------------------------------------------------------

# The stand-in's class for each TensorRT class it stands in for.
STAND_INS = {"IExecutionContext": "AddContext"}


def stand_in_problems(module, uses: list[Use], stand_in: pathlib.Path) -> list[str]:
    """Every method the runtime calls unguarded on a class the stand-in replaces
    exists on the stand-in, with TensorRT's number of parameters, and takes each
    call site's arguments (read with ast: the stand-in imports torch)."""
    tree = ast.parse(stand_in.read_text())
    classes = {c.name: c for c in tree.body if isinstance(c, ast.ClassDef)}
    out = []
    for trt_cls, ours in STAND_INS.items():
        if ours not in classes:
            out.append(f"{stand_in}: no class {ours} (the stand-in for {trt_cls})")
            continue
        methods = {f.name: f for f in classes[ours].body if isinstance(f, ast.FunctionDef)}
        for u in uses:
            if u.cls != trt_cls or u.call is None or u.guarded:
                continue
            if u.name not in methods:
                out.append(f"{u.where}: the runtime calls {trt_cls}.{u.name}, which the stand-in "
                           f"{ours} lacks")
                continue
            f = methods[u.name]
            names = tuple(a.arg for a in f.args.args[1:])
            sig = Signature(names, len(names) - len(f.args.defaults), f.args.vararg is not None)
            theirs = signatures(getattr(getattr(module, trt_cls), u.name), u.name)
            if theirs and not any(len(s.names) == len(names) for s in theirs):
                out.append(f"{stand_in}: {ours}.{u.name}{names} has {len(names)} parameters, "
                           f"{module.__name__}'s {trt_cls}.{u.name} "
                           + " or ".join(str(len(s.names)) for s in theirs))
            if u.call[0] >= 0 and not call_fits(sig, *u.call):
                out.append(f"{u.where}: {ours}.{u.name}{names} does not take this call's "
                           f"{u.call[0]} positional argument(s), keywords {list(u.call[1])}")
    return out
