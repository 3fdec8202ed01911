"""Typed optimization profiles: "profiles" (profile 0) and "optimization_profiles".

One ``Profile`` per dynamic input gives its min, opt and max shapes; a
profile set holds one per dynamic input, and an engine has one or more sets
(docs/blob-format.md). The checks here are the ones the TensorRT executor
relies on when it picks a profile for a call's shapes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..tensorrt.options import MAX_OPTIMIZATION_PROFILES
from .format import I64_MAX, BlobError, is_int, show
from .json_checks import extras, ordered

_KEYS = ("name", "min", "opt", "max")


@dataclass(frozen=True)
class Profile:
    """One dynamic input's shape range in one optimization profile."""

    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]
    extra: tuple[tuple[str, Any], ...] = ()
    key_order: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def to_json(self) -> dict:
        return ordered({"name": self.name, "min": list(self.min), "opt": list(self.opt),
                        "max": list(self.max)}, self.extra, self.key_order)


ProfileSet = tuple[Profile, ...]


def parse_profiles(profiles: Any, bindings: Sequence) -> ProfileSet:
    """One optimization profile per dynamic input: min <= opt <= max per
    dimension, each of the input's rank, static dimensions fixed."""
    if not isinstance(profiles, (list, tuple)):
        raise BlobError(f"'profiles' must be an array, got {type(profiles).__name__}")
    inputs = {b.name: b for b in bindings if b.is_input}
    seen: set[str] = set()
    out = []
    for i, p in enumerate(profiles):
        where = f"profiles[{i}]"
        if not isinstance(p, dict):
            raise BlobError(f"{where} must be an object with name, min, opt and max, "
                            f"got {type(p).__name__}")
        name = p.get("name")
        if not isinstance(name, str) or name not in inputs:
            raise BlobError(f"{where}.name {show(name)} names no input binding "
                            f"(inputs: {show(sorted(inputs), 80)})")
        if name in seen:
            raise BlobError(f"{where}: a second profile for input {name!r}")
        seen.add(name)
        shape = inputs[name].shape
        dims = {}
        for key in ("min", "opt", "max"):
            v = p.get(key)
            if not isinstance(v, (list, tuple)) or len(v) != len(shape) or not all(
                    is_int(d) and 0 <= d <= I64_MAX for d in v):
                raise BlobError(f"{where}.{key} must be an array of {len(shape)} non-negative "
                                f"integers (the rank of input {name!r}), got {show(v)}")
            dims[key] = tuple(v)
        for d, (s, lo, opt, hi) in enumerate(zip(shape, dims["min"], dims["opt"], dims["max"])):
            if not lo <= opt <= hi:
                raise BlobError(f"{where} (input {name!r}) dimension {d}: min {lo}, opt {opt}, "
                                f"max {hi} are not ordered min <= opt <= max")
            if s >= 0 and not lo == hi == s:
                raise BlobError(f"{where} (input {name!r}) dimension {d} is static ({s}) but "
                                f"the profile gives min {lo}, max {hi}")
        out.append(Profile(name, dims["min"], dims["opt"], dims["max"], extras(p, _KEYS),
                           tuple(p)))
    return tuple(out)


def parse_optimization_profiles(sets: Any, first: ProfileSet | None,
                                bindings: Sequence) -> tuple[ProfileSet, ...]:
    """"optimization_profiles": every optimization profile of the engine, in
    engine order (docs/blob-format.md). Each is checked like "profiles", names
    the same inputs, profile 0 is "profiles" itself (`first`: what readers that
    know one profile use), and together they leave no gap in any dimension's
    range (a size between two profiles would match no engine profile)."""
    if not isinstance(sets, (list, tuple)) or not 1 <= len(sets) <= MAX_OPTIMIZATION_PROFILES:
        raise BlobError("'optimization_profiles' must be an array of 1 to "
                        f"{MAX_OPTIMIZATION_PROFILES} profiles, got {show(sets)}")
    if first is None:
        raise BlobError("'optimization_profiles' is set but 'profiles' (profile 0) is not: the "
                        "metadata is inconsistent; re-export the program")
    names = sorted(p.name for p in first)
    parsed = []
    for k, profiles in enumerate(sets):
        try:
            one = parse_profiles(profiles, bindings)
        except BlobError as e:
            raise BlobError(f"optimization_profiles[{k}]: {e}") from None
        if sorted(p.name for p in one) != names:
            raise BlobError(f"optimization_profiles[{k}] names inputs "
                            f"{show(sorted(p.name for p in one), 80)}, profile 0 names "
                            f"{show(names, 80)}: every profile gives every dynamic input")
        parsed.append(one)
    if [p.to_json() for p in parsed[0]] != [p.to_json() for p in first]:
        raise BlobError("optimization_profiles[0] differs from 'profiles': profile 0 must be "
                        "'profiles' itself; the metadata is corrupt")
    for name in names:
        per_profile = [next(p for p in one if p.name == name) for one in parsed]
        for d in range(len(per_profile[0].min)):
            spans = sorted((p.min[d], p.max[d]) for p in per_profile)
            reach = spans[0][1]
            for lo, hi in spans[1:]:
                if lo > reach + 1:
                    raise BlobError(f"optimization_profiles leave input {name!r} dimension {d} "
                                    f"sizes {reach + 1}..{lo - 1} in no profile, between "
                                    "two that cover the sizes around them; the metadata is "
                                    "corrupt")
                reach = max(reach, hi)
    return tuple(parsed)
