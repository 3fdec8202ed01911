"""Small checks of parsed JSON values that every metadata type shares.

They sit apart from the metadata types so that the top-level metadata
(``metadata.py``) and the state entries (``metadata_state.py``) both use them
without importing each other; the reader uses them for its section table.
``key_info`` is the JSON parse hook's record of key counts and repeats
(reading); a metadata object built in Python passes None (a dict has no repeats).
"""
from __future__ import annotations

import re
from typing import Any

from .format import MAX_OBJECT_KEYS, BlobError, show

_DIGEST = re.compile(r"[0-9a-f]{64}")


def check_object_keys(obj: dict, where: str, key_info: dict | None) -> None:
    if key_info is not None:
        count, dup = key_info.get(id(obj), (len(obj), None))
    else:
        count, dup = len(obj), None
    if dup is not None:
        raise BlobError(f"duplicate key {show(dup)} in {where}")
    if count > MAX_OBJECT_KEYS:
        raise BlobError(f"{where} has more than {MAX_OBJECT_KEYS} keys ({count})")


def check_digest(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _DIGEST.fullmatch(value):
        raise BlobError(f"{where} must be a SHA-256 digest (64 lowercase hex digits), got "
                        f"{show(value)}: the blob's metadata is corrupt; re-export the program")
    return value


def check_name(v: Any, where: str) -> str:
    if not isinstance(v, str) or not v or any(ord(c) < 0x20 for c in v):
        raise BlobError(f"{where} must be a non-empty string without control characters, "
                        f"got {show(v)}")
    return v


def ordered(known: dict, extra: tuple, order: tuple) -> dict:
    """One JSON object from a type's fields (`known`, absent ones left out),
    the keys it does not know (`extra`, carried as is) and the key order it was
    read in (`order`): keys in that order first, then the rest as given, so a
    parsed object writes back byte for byte and a built one in field order."""
    extras = dict(extra)
    out = {}
    for k in order:
        if k in known:
            out[k] = known[k]
        elif k in extras:
            out[k] = extras[k]
    for k, v in known.items():
        out.setdefault(k, v)
    for k, v in extra:
        out.setdefault(k, v)
    return out


def extras(obj: dict, known: tuple | frozenset) -> tuple:
    """The (key, value) pairs of `obj` that a type does not know, in order."""
    return tuple((k, v) for k, v in obj.items() if k not in known)


def parse_named(items, section: str, what: str, parse) -> tuple:
    """`parse(item, where)` for each entry of the array `section`, refusing a
    name seen twice (e.g. "duplicate weight name 'w' (weights[0] and weights[2])")."""
    seen: dict[str, int] = {}
    out = []
    for i, item in enumerate(items):
        where = f"{section}[{i}]"
        entry = parse(item, where)
        if entry.name in seen:
            raise BlobError(f"duplicate {what} name {show(entry.name)} "
                            f"({section}[{seen[entry.name]}] and {where})")
        seen[entry.name] = i
        out.append(entry)
    return tuple(out)
