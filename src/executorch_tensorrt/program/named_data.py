"""The named data of a saved program for `inspect`: each key with its size,
the file it is in (the .pte's own segment or the .ptd beside it) and the
TensorRT partitions whose weights use it.

A .ptd is read up to the end of its index (header and flatbuffer): the
sizes come from its segment table, so inspecting a multi-gigabyte weights
file reads only kilobytes of it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class NamedDataEntry:
    key: str
    nbytes: int | None  # None: the key is in no file given
    location: str       # "pte", a .ptd file name, or "missing"
    users: list[str] = field(default_factory=list)  # "forward[0] fc.weight"


class DataFileError(ValueError):
    """A .ptd that is truncated or not an ExecuTorch data file."""


def read_ptd_index(path: str | Path) -> dict[str, int]:
    """key -> size in bytes of every named-data entry of a .ptd, from its
    header and index only; raises DataFileError for a file that is not a
    .ptd or whose segments lie past its end."""
    return {key: size for key, (_, size) in read_ptd_segments(path).items()}


def read_ptd_segments(path: str | Path) -> dict[str, tuple[int, int]]:
    """key -> (offset in the file, size) of every named-data entry of a .ptd,
    each checked to lie inside the file (read_ptd_index's checks)."""
    from executorch.extension.flat_tensor.serialize.serialize import (
        FlatTensorHeader, _deserialize_to_flat_tensor)

    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8 + FlatTensorHeader.EXPECTED_LENGTH)
        try:
            header = FlatTensorHeader.from_bytes(head[8:])
        except Exception as e:  # noqa: BLE001 - the reader raises several kinds
            raise DataFileError(f"{path} is not an ExecuTorch data file (.ptd): {e}") from None
        if not header.is_valid() or head[4:8] != b"FT01":
            raise DataFileError(f"{path} is not an ExecuTorch data file (.ptd): no valid "
                                "flat tensor header")
        end = header.flatbuffer_offset + header.flatbuffer_size
        if end > size:
            raise DataFileError(f"{path} is truncated: its index ends at byte {end}, the file "
                                f"has {size}")
        f.seek(0)
        index = f.read(end)
    try:
        flat = _deserialize_to_flat_tensor(index)
    except Exception as e:  # noqa: BLE001
        raise DataFileError(f"{path}: its index does not parse: {e}") from None
    sizes: dict[str, tuple[int, int]] = {}
    for entry in flat.named_data:
        if not 0 <= entry.segment_index < len(flat.segments):
            raise DataFileError(f"{path}: key {entry.key!r} names segment "
                                f"{entry.segment_index} of {len(flat.segments)}")
        segment = flat.segments[entry.segment_index]
        if header.segment_base_offset + segment.offset + segment.size > size:
            raise DataFileError(f"{path} is truncated: key {entry.key!r} ends past the file's "
                                f"{size} bytes")
        sizes[entry.key] = (int(header.segment_base_offset + segment.offset), int(segment.size))
    return sizes


def pte_named_data(pte_file) -> dict[str, int]:
    """key -> size of the named data stored in the .pte itself (a PTEFile)."""
    named = getattr(pte_file, "named_data", None)
    if named is None:
        return {}
    return {key: len(named.buffers[entry.buffer_index]) for key, entry in named.pte_data.items()}


def collect(methods, in_pte: dict[str, int], in_ptd: dict[str, int],
            ptd_name: str | None) -> list[NamedDataEntry]:
    """One entry per key the program stores or its TensorRT partitions use."""
    entries: dict[str, NamedDataEntry] = {}
    for key, nbytes in in_pte.items():
        entries[key] = NamedDataEntry(key, nbytes, "pte")
    for key, nbytes in in_ptd.items():
        entries.setdefault(key, NamedDataEntry(key, nbytes, ptd_name or ".ptd"))
    for m in methods:
        for i, d in enumerate(m.delegates):
            for w in (d.meta.weights or ()) if d.meta is not None and not d.error else ():
                entry = entries.setdefault(w.key, NamedDataEntry(w.key, None, "missing"))
                entry.users.append(f"{m.name}[{i}] {w.name}")
    return list(entries.values())


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def format_named_data(entries: list[NamedDataEntry], ptd: str | None) -> str:
    if not entries:
        return "named data: none"
    stored = [e for e in entries if e.nbytes is not None]
    lines = [f"named data: {len(stored)} keys, {_size(sum(e.nbytes for e in stored))}"]
    for where in ["pte", *([ptd] if ptd else [])]:
        here = [e for e in entries if e.location == where]
        lines.append(f"  in {'the .pte' if where == 'pte' else where}: {len(here)} keys, "
                     f"{_size(sum(e.nbytes for e in here))}")
    for e in entries:
        size = f"{e.nbytes} bytes" if e.nbytes is not None else "MISSING"
        users = "; ".join(e.users) or "no TensorRT partition"
        lines.append(f"  {e.key}  {size}  in {e.location}  used by {users}")
    missing = [e for e in entries if e.nbytes is None]
    if missing:
        lines.append(f"  {len(missing)} key(s) used by TensorRT partitions are in no file given: "
                     "pass the program's .ptd (--data)")
    return "\n".join(lines)
