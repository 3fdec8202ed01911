"""The `profiles` option (export, TensorRTCompileSpec, `--profiles` /
`--profile` on the command line): its forms, checked for shape alone; what
they mean for a program is aot/profiles/shapes.py's (docs/gpu-runtime.md,
"Optimization profiles").

Forms:
- None (the default): one optimization profile spanning each dynamic
  dimension's export range, opt at its top (as before several were possible);
- an int N: at most N profiles that split the widest dynamic dimension into
  power-of-two buckets, opt at each bucket's top;
- a list of profiles, each a dict {dimension: (min, opt, max)}: a dimension is
  a torch.export Dim (or its name, e.g. "batch"), or "INPUT:DIM" / (INPUT, DIM)
  with INPUT an input's index or name (e.g. "x:0", "0:0"); dimensions a profile
  does not name span their whole export range.
The partitioner resolves each dimension to the program's symbol and passes
them on as "$<symbol>" keys (internal; a user never writes them).
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ...tensorrt.options import MAX_OPTIMIZATION_PROFILES

Range = tuple[int, int, int]  # min, opt, max of one dimension
ProfileOption = tuple[tuple[tuple[str, Range], ...], ...]  # per profile: sorted (key, range)

_INPUT_DIM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+):([0-9]+)")
_NAME = re.compile(r"\$?[A-Za-z_][A-Za-z0-9_]*")
_EXPECTED = ("profiles must be None (one profile over the export ranges), an int N (N "
             "profiles splitting the widest dynamic dimension) or a list of dicts "
             "{dimension: (min, opt, max)}, a dimension being a torch.export Dim, its name, "
             "or 'INPUT:DIM'")


def _dimension_key(key: Any, where: str) -> str:
    """'batch', 'x:0', '0:0' or '$s17' for the forms a user may write."""
    if isinstance(key, tuple) and len(key) == 2 and all(
            isinstance(k, (int, str)) and not isinstance(k, bool) for k in key):
        key = f"{key[0]}:{key[1]}"
    elif not isinstance(key, str) and isinstance(getattr(key, "__name__", None), str):
        key = key.__name__  # a torch.export.Dim (a class named after the dimension)
    if not isinstance(key, str) or not (_INPUT_DIM.fullmatch(key) or _NAME.fullmatch(key)):
        raise ValueError(f"{where}: dimension {key!r} is not a torch.export Dim, a Dim's name "
                         "(e.g. 'batch'), or 'INPUT:DIM' with INPUT an input's index or name "
                         "(e.g. 'x:0', '0:0')")
    return key


def _range(value: Any, where: str) -> Range:
    if isinstance(value, Mapping) and set(value) == {"min", "opt", "max"}:
        value = (value["min"], value["opt"], value["max"])
    if (not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                       for v in value)):
        raise ValueError(f"{where} is {value!r}; expected (min, opt, max): three "
                         "non-negative integers")
    lo, opt, hi = value
    if not lo <= opt <= hi:
        raise ValueError(f"{where} is {list(value)}: min {lo}, opt {opt}, max {hi} are not "
                         "ordered min <= opt <= max")
    return lo, opt, hi


def normalize_profiles(value: Any) -> int | ProfileOption | None:
    """The option in its checked, hashable form; raises ValueError naming the
    bad value and what is expected."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"profiles={value!r}: {_EXPECTED}")
    if isinstance(value, int):
        if not 1 <= value <= MAX_OPTIMIZATION_PROFILES:
            raise ValueError(f"profiles={value}: the number of optimization profiles must be "
                             f"1 to {MAX_OPTIMIZATION_PROFILES}")
        return value
    if isinstance(value, Mapping) or not isinstance(value, Sequence) or isinstance(value, str):
        raise ValueError(f"profiles={value!r}: {_EXPECTED}")
    if not value:
        raise ValueError("profiles is an empty list; pass None for the default (one profile)")
    if len(value) > MAX_OPTIMIZATION_PROFILES:
        raise ValueError(f"profiles lists {len(value)} optimization profiles; at most "
                         f"{MAX_OPTIMIZATION_PROFILES} are supported")
    out = []
    for k, entry in enumerate(value):
        if isinstance(entry, Mapping):
            items = list(entry.items())
        elif (isinstance(entry, Sequence) and not isinstance(entry, str)
              and all(isinstance(i, Sequence) and len(i) == 2 for i in entry)):
            items = list(entry)  # the hashable form again
        else:
            raise ValueError(f"profiles[{k}] is {entry!r}; expected a dict "
                             "{dimension: (min, opt, max)}")
        if not items:
            raise ValueError(f"profiles[{k}] names no dimension; give each profile at least "
                             "one {dimension: (min, opt, max)}")
        ranges: dict[str, Range] = {}
        for key, v in items:
            name = _dimension_key(key, f"profiles[{k}]")
            if name in ranges:
                raise ValueError(f"profiles[{k}] names dimension {name!r} twice")
            ranges[name] = _range(v, f"profiles[{k}][{name!r}]")
        out.append(tuple(sorted(ranges.items())))
    return tuple(out)


def profiles_json(option: int | ProfileOption | None) -> Any:
    """The option as JSON (a compile spec's value); normalize_profiles reads it back."""
    if option is None or isinstance(option, int):
        return option
    return [{k: list(r) for k, r in profile} for profile in option]


def parse_profile_text(text: str) -> dict[str, list[int]]:
    """One `--profile` of the command line: 'DIM=MIN:OPT:MAX[,DIM=MIN:OPT:MAX...]',
    DIM a Dim's name or INPUT:DIM (e.g. 'batch=1:8:16' or '0:0=1:8:16,1:0=1:8:16')."""
    out: dict[str, list[int]] = {}
    for part in text.split(","):
        key, eq, value = part.strip().rpartition("=")
        numbers = value.split(":")
        if not eq or not key or len(numbers) != 3 or not all(n.isdigit() for n in numbers):
            raise ValueError(f"--profile {text!r}: expected DIM=MIN:OPT:MAX[,DIM=MIN:OPT:MAX...] "
                             "with DIM a Dim's name or INPUT:DIM, e.g. batch=1:8:16 or "
                             "0:0=17:256:256")
        out[key.strip()] = [int(n) for n in numbers]
    return out
