"""write_blob: engine, metadata and sections into one TR01 blob (see docs/blob-format.md)."""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Any, Iterable, Mapping

from .format import (
    ENGINE_DIGEST_KEY,
    HEADER_FORMAT,
    HEADER_SIZE,
    MAGIC,
    MAGIC_ALIASED,
    MAX_JSON_DEPTH,
    SCHEMA_VERSION,
    SECTION_DIGEST_KEY,
    SECTION_ONNX,
    U32_MAX,
    WRITE_DTYPES,
    BlobError,
    align,
    show,
)
from .reader import parse
from .metadata import BlobMetadata
from .metadata_state import check_state_sections

# Keys write_blob fills in itself.
_RESERVED_WRITE_KEYS = ("sections", ENGINE_DIGEST_KEY)


def _check_jsonable(obj: Any) -> None:
    """What json.dumps would silently change or reject: non-string keys,
    non-JSON types, NaN/inf, cycles, and nesting deeper than the limit."""
    # Depth-first with explicit enter/leave steps: a sub-object shared by two
    # parents is fine, one that contains itself is a cycle.
    stack: list[tuple[Any, int, str, bool]] = [(obj, 1, "metadata", False)]
    active: set[int] = set()
    while stack:
        o, depth, path, leaving = stack.pop()
        if leaving:
            active.discard(id(o))
            continue
        if isinstance(o, (dict, list, tuple)):
            if depth > MAX_JSON_DEPTH:
                raise BlobError(f"metadata nests deeper than {MAX_JSON_DEPTH} levels at {path}")
            if id(o) in active:
                raise BlobError(f"metadata contains a reference cycle at {path}")
            active.add(id(o))
            stack.append((o, depth, path, True))
            if isinstance(o, dict):
                for k, v in o.items():
                    if not isinstance(k, str):
                        raise BlobError(f"metadata key {show(k)} at {path} is not a string")
                    stack.append((v, depth + 1, f"{path}[{k!r}]", False))
            else:
                for i, v in enumerate(o):
                    stack.append((v, depth + 1, f"{path}[{i}]", False))
        elif isinstance(o, float):
            if o != o or o in (float("inf"), float("-inf")):
                raise BlobError(f"metadata value at {path} is {o}, which JSON cannot carry")
        elif not (o is None or isinstance(o, (str, int, bool))):
            raise BlobError(f"metadata value at {path} has type {type(o).__name__}, "
                            "which JSON cannot carry")


def _dumps(v: Any) -> str:
    # ensure_ascii=False: names reach every upstream parser byte for byte
    # (Torch-TensorRT's C++ reader does not decode \\uXXXX escapes).
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _metadata_text(meta: Mapping[str, Any], engine_sha256: str,
                   sections: list[dict]) -> tuple[str, int]:
    """The metadata JSON text, io_bindings first, then the scalar fields that
    upstream parsers read by key, then the rest in the caller's order, then
    the engine digest and "sections". Also returns where the io_bindings array ends."""
    head = '{"io_bindings":' + _dumps(meta["io_bindings"])
    bindings_end = len(head)
    first = ["aliased_io", "hardware_compatible", "device_id"]
    parts = [head]
    for k in first:
        if k in meta:
            parts.append("," + _dumps(k) + ":" + _dumps(meta[k]))
    for k, v in meta.items():
        if k == "io_bindings" or k in first:
            continue
        parts.append("," + _dumps(k) + ":" + _dumps(v))
    parts.append("," + _dumps(ENGINE_DIGEST_KEY) + ":" + _dumps(engine_sha256))
    if sections:
        parts.append(',"sections":' + _dumps(sections))
    parts.append("}")
    return "".join(parts), bindings_end


def _as_bytes(v: Any, what: str) -> bytes:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    raise BlobError(f"{what} must be bytes, got {type(v).__name__}")


def write_blob(
    engine: bytes,
    metadata: BlobMetadata | Mapping[str, Any],
    onnx: bytes | None = None,
    *,
    sections: Mapping[str, bytes] | Iterable[tuple[str, bytes]] | None = None,
) -> bytes:
    """Serializes an engine, its metadata and optional extension sections.

    ``metadata`` is a ``BlobMetadata`` (blob/metadata.py; what the AOT side
    builds) or its JSON form, a dict that must hold ``io_bindings`` (a list
    of ``{"name", "dtype", "shape", "is_input"}`` objects, extra keys
    allowed); every other JSON-serializable key is carried as is. Either is
    checked here, with read_blob's checks. ``onnx`` becomes the
    first section ("onnx"); ``sections`` adds more named sections after it.
    The writer records a SHA-256 digest of the engine ("engine_sha256") and
    of each section (its entry's "sha256"), which read_blob checks. The keys
    "sections" and "engine_sha256" are the writer's own and may not be
    passed in.
    """
    engine = _as_bytes(engine, "engine")
    if isinstance(metadata, BlobMetadata):
        metadata = metadata.to_json()  # checked below like a dict: it may be built by hand
    if not isinstance(metadata, Mapping):
        raise BlobError(f"metadata must be a dict, got {type(metadata).__name__}")
    for k in _RESERVED_WRITE_KEYS:
        if k in metadata:
            raise BlobError(f"metadata key {k!r} is written by write_blob itself (sections "
                            "come from the onnx/sections arguments, digests are computed)")
    _check_jsonable(metadata)
    parsed = BlobMetadata.from_json(dict(metadata), WRITE_DTYPES, None)
    meta = parsed.to_json()

    named: list[tuple[str, bytes]] = []
    if onnx is not None:
        named.append((SECTION_ONNX, _as_bytes(onnx, "onnx")))
    if sections is not None:
        items = sections.items() if isinstance(sections, Mapping) else sections
        for name, data in items:
            named.append((name, _as_bytes(data, f"section {name!r}")))
    seen: set[str] = set()
    for name, _ in named:
        if not isinstance(name, str) or not name:
            raise BlobError(f"section name must be a non-empty string, got {show(name)}")
        if name in seen:
            raise BlobError(f"duplicate section name {name!r}")
        seen.add(name)
    parsed.check_engine_kind(len(engine), seen)
    check_state_sections(parsed.state or (), {name: len(data) for name, data in named})

    engine_sha256 = hashlib.sha256(engine).hexdigest()
    digests = [hashlib.sha256(data).hexdigest() for _, data in named]

    # The section offsets are part of the metadata whose length decides
    # them: recompute until the text stops changing (offsets only grow, and
    # their digit counts with them, so this settles in a few rounds).
    table: list[dict] = []
    for _ in range(32):
        try:
            text, bindings_end = _metadata_text(meta, engine_sha256, table)
            meta_bytes = text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise BlobError(f"metadata holds a string that is not valid Unicode: {e}") from None
        engine_offset = align(HEADER_SIZE + len(meta_bytes))
        cursor = engine_offset + len(engine)
        new_table = []
        for (name, data), digest in zip(named, digests):
            off = align(cursor)
            new_table.append({"name": name, "offset": off, "size": len(data),
                              SECTION_DIGEST_KEY: digest})
            cursor = off + len(data)
        if new_table == table:
            break
        table = new_table
    else:  # pragma: no cover - the loop settles in <= 3 rounds
        raise BlobError("internal error: section offsets did not settle")

    if len(meta_bytes) > U32_MAX or engine_offset > U32_MAX:
        raise BlobError(f"metadata of {len(meta_bytes)} bytes does not fit the TR01 header's "
                        "32-bit metadata size / engine offset")

    # Older Torch-TensorRT parsers find "hardware_compatible" and "device_id"
    # by searching the text after the io_bindings array: make sure the first
    # match there is the top-level key, or that there is none.
    tail = text[bindings_end:]
    for key in ("hardware_compatible", "device_id"):
        if key not in meta and f'"{key}"' in tail:
            raise BlobError(f'metadata mentions "{key}" but has no top-level {key!r} key; '
                            "Torch-TensorRT's parser would read the first mention as the "
                            f"blob's {key}. Set a top-level {key!r}.")

    out = bytearray()
    magic = MAGIC_ALIASED if parsed.aliased_io else MAGIC  # as Torch-TensorRT writes
    out += struct.pack(HEADER_FORMAT, magic, HEADER_SIZE, len(meta_bytes), engine_offset,
                       len(engine), bytes([SCHEMA_VERSION]) + b"\0" * 7)
    out += meta_bytes
    out += b"\0" * (engine_offset - len(out))
    out += engine
    for entry, (_, data) in zip(table, named):
        out += b"\0" * (entry["offset"] - len(out))
        out += data
    blob = bytes(out)
    parse(memoryview(blob), check_digests=False)  # what is written here must read back here
    return blob
