"""read_blob: validates a TR01 blob, its metadata schema and its digests.

Every offset and size is checked before it is used, overflow-safe
(``offset <= size and length <= size - offset``); see docs/blob-format.md.
This is the one reader of the metadata: the C++ adapter checks only the
fixed header and the engine/metadata regions before handing the bytes here.
"""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Any, NamedTuple

from .format import (
    ALIGNMENT,
    ENGINE_DIGEST_KEY,
    HEADER_FORMAT,
    HEADER_SIZE,
    MAGIC,
    MAGIC_ALIASED,
    MAX_JSON_DEPTH,
    READ_DTYPES,
    SECTION_DIGEST_KEY,
    SECTION_ONNX,
    Blob,
    BlobError,
    Section,
    is_int,
    show,
)
from .json_checks import check_digest, check_object_keys
from .metadata import BlobMetadata
from .metadata_state import check_state_sections


class _Layout(NamedTuple):
    metadata_offset: int
    metadata_size: int
    engine_offset: int
    engine_size: int
    reserved: bytes
    metadata: BlobMetadata  # without "sections" and the engine digest
    engine_sha256: str | None
    sections: list  # (name, offset, size, sha256 or None)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_int(s: str) -> int:
    # Python refuses to convert integers of more than 4300 digits; such a
    # number is valid JSON, and out of range wherever this format reads one.
    if len(s) > 64:
        return -(2**256) if s.startswith("-") else 2**256
    return int(s)


def _json_depth(obj: Any) -> int:
    deepest = 0
    stack = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, (dict, list)):
            deepest = max(deepest, d)
            if deepest > MAX_JSON_DEPTH:
                return deepest
            stack.extend((v, d + 1) for v in (o.values() if isinstance(o, dict) else o))
    return deepest


def _region(a: int, n: int) -> str:
    return f"[{a}, {a + n})"


def _check_in_bounds(what: str, off: int, n: int, size: int) -> None:
    """`n` bytes at `off` lie inside a blob of `size` bytes (no wrap-around)."""
    if off > size or n > size - off:
        raise BlobError(f"{what} region {_region(off, n)} is out of bounds (blob has {size} bytes)")


def _parse_layout(mv: memoryview) -> _Layout:
    """Header, regions, metadata schema and section table; no digests."""
    size = len(mv)
    if size < HEADER_SIZE:
        raise BlobError(f"truncated blob: {size} bytes, fewer than the {HEADER_SIZE}-byte "
                        "TR01 header")
    magic, meta_off, meta_size, eng_off, eng_size, reserved = struct.unpack_from(
        HEADER_FORMAT, mv, 0)
    if magic not in (MAGIC, MAGIC_ALIASED):
        raise BlobError(f"bad magic {bytes(magic)!r}: not a TR01 (or TR02) TensorRT blob")
    if meta_off < HEADER_SIZE:
        raise BlobError(f"metadata offset {meta_off} overlaps the {HEADER_SIZE}-byte header")
    if eng_off % ALIGNMENT:
        raise BlobError(f"engine offset {eng_off} is not {ALIGNMENT}-byte aligned")
    _check_in_bounds("metadata", meta_off, meta_size, size)
    _check_in_bounds("engine", eng_off, eng_size, size)
    if meta_off < eng_off + eng_size and eng_off < meta_off + meta_size:
        raise BlobError(f"metadata region {_region(meta_off, meta_size)} overlaps the engine "
                        f"region {_region(eng_off, eng_size)}")
    if meta_off > eng_off:
        raise BlobError(f"metadata region {_region(meta_off, meta_size)} must precede the "
                        f"engine region {_region(eng_off, eng_size)}")
    if meta_size == 0:
        raise BlobError("metadata is empty: expected a JSON object with 'io_bindings'")
    try:
        text = bytes(mv[meta_off:meta_off + meta_size]).decode("utf-8")
    except UnicodeDecodeError as e:
        raise BlobError(f"metadata is not valid UTF-8 (at metadata byte {e.start})") from None

    key_info: dict[int, tuple[int, str | None]] = {}

    def hook(pairs: list) -> dict:
        d = dict(pairs)
        dup = None
        if len(d) != len(pairs):
            seen = set()
            for k, _ in pairs:
                if k in seen:
                    dup = k
                    break
                seen.add(k)
        key_info[id(d)] = (len(pairs), dup)
        return d

    try:
        meta = json.loads(text, object_pairs_hook=hook, parse_constant=_reject_constant,
                          parse_int=_parse_int)
    except RecursionError:
        raise BlobError(f"metadata JSON nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:
        raise BlobError(f"metadata is not valid JSON: {e}") from None
    if _json_depth(meta) > MAX_JSON_DEPTH:
        raise BlobError(f"metadata JSON nests deeper than {MAX_JSON_DEPTH} levels")
    if not isinstance(meta, dict):
        raise BlobError(f"metadata JSON must be an object, got {type(meta).__name__}")
    engine_digest = meta.pop(ENGINE_DIGEST_KEY, None)
    if engine_digest is not None:
        check_digest(engine_digest, f"'{ENGINE_DIGEST_KEY}'")
    has_table, table = "sections" in meta, meta.pop("sections", None)
    parsed = BlobMetadata.from_json(meta, READ_DTYPES, key_info)
    if (magic == MAGIC_ALIASED) != bool(parsed.aliased_io):
        raise BlobError(f"magic {bytes(magic)!r} with {len(parsed.aliased_io or ())} "
                        "aliased_io entries: a blob is TR02 exactly when it has aliased "
                        "(in-place) outputs; the header or the metadata is corrupt")

    sections: list[tuple[str, int, int, str | None]] = []
    if has_table:
        if not isinstance(table, list):
            raise BlobError(f"'sections' must be an array, got {type(table).__name__}")
        prev_end, prev_what = eng_off + eng_size, "the engine region"
        names: set[str] = set()
        for i, s in enumerate(table):
            where = f"sections[{i}]"
            if not isinstance(s, dict):
                raise BlobError(f"{where} must be an object, got {type(s).__name__}")
            check_object_keys(s, where, key_info)
            name, off, n = s.get("name"), s.get("offset"), s.get("size")
            if not isinstance(name, str) or not name:
                raise BlobError(f"{where}.name must be a non-empty string, got {show(name)}")
            if not is_int(off) or off < 0:
                raise BlobError(f"{where}.offset must be a non-negative integer, got {show(off)}")
            if not is_int(n) or n < 0:
                raise BlobError(f"{where}.size must be a non-negative integer, got {show(n)}")
            if off % ALIGNMENT:
                raise BlobError(f"section {name!r} offset {off} is not {ALIGNMENT}-byte aligned")
            _check_in_bounds(f"section {name!r}", off, n, size)
            if off < prev_end:
                raise BlobError(f"section {name!r} region {_region(off, n)} overlaps or "
                                f"precedes {prev_what} (sections follow the engine, in order)")
            if name in names:
                raise BlobError(f"duplicate section name {name!r}")
            names.add(name)
            digest = s.get(SECTION_DIGEST_KEY)
            if digest is not None:
                check_digest(digest, f"{where}.{SECTION_DIGEST_KEY}")
            sections.append((name, off, n, digest))
            prev_end, prev_what = off + n, f"section {name!r}"
    recorded = [engine_digest] + [d for *_, d in sections]
    if any(d is None for d in recorded) and any(d is not None for d in recorded):
        # A writer records all digests or none: a missing one means the
        # metadata was altered (e.g. a key renamed), not an older writer.
        raise BlobError("the blob records SHA-256 digests for some of its regions but not "
                        f"all ('{ENGINE_DIGEST_KEY}' and each section's "
                        f"'{SECTION_DIGEST_KEY}'): its metadata is corrupt; re-export the program")
    parsed.check_engine_kind(eng_size, {name for name, *_ in sections})
    check_state_sections(parsed.state or (), {name: n for name, _, n, _ in sections})
    return _Layout(meta_off, meta_size, eng_off, eng_size, bytes(reserved), parsed,
                   engine_digest, sections)


def _verify(data: bytes | memoryview, what: str, off: int, recorded: str) -> None:
    actual = hashlib.sha256(data).hexdigest()
    if actual != recorded:
        raise BlobError(f"{what} (bytes {_region(off, len(data))} of the blob) is corrupt: its "
                        f"SHA-256 is {actual[:16]}..., the blob records {recorded[:16]}... from "
                        "export. The .pte was damaged or altered after export; re-export the "
                        "program (or copy it again from its source)")


def parse(mv: memoryview, *, check_digests: bool = True) -> _Layout:
    """Validates the blob in `mv`; with check_digests, also every recorded digest."""
    layout = _parse_layout(mv)
    if check_digests and layout.engine_sha256 is not None:
        eo, es = layout.engine_offset, layout.engine_size
        _verify(mv[eo:eo + es], "the engine", eo, layout.engine_sha256)
        for name, off, n, digest in layout.sections:
            _verify(mv[off:off + n], f"section {name!r}", off, digest)
    return layout


def read_blob(data: bytes | bytearray | memoryview, *, check_digests: bool = True) -> Blob:
    """Parses and validates a blob; raises BlobError naming what is wrong.

    Blobs written here record a SHA-256 digest of the engine and of each
    section, which are checked unless ``check_digests`` is False (for tools
    that show a damaged blob's metadata); blobs without digests
    (Torch-TensorRT's, ExecuTorch upstream's) load without that check.
    """
    try:
        mv = memoryview(data)
    except TypeError:
        raise BlobError(f"blob must be bytes-like, got {type(data).__name__}") from None
    if mv.ndim != 1 or mv.itemsize != 1:
        try:
            mv = mv.cast("B")
        except TypeError:
            raise BlobError("blob must be a contiguous byte buffer") from None
    layout = parse(mv, check_digests=False)
    # Copy first, then check the copies: the caller's buffer may change
    # after the check, the returned bytes cannot.
    eo, es = layout.engine_offset, layout.engine_size
    engine = bytes(mv[eo:eo + es])
    sections = tuple(Section(name, off, n, bytes(mv[off:off + n]), digest)
                     for name, off, n, digest in layout.sections)
    if check_digests and layout.engine_sha256 is not None:
        _verify(engine, "the engine", eo, layout.engine_sha256)
        for s in sections:
            _verify(s.data, f"section {s.name!r}", s.offset, s.sha256)
    return Blob(
        engine=engine,
        meta=layout.metadata,
        onnx=next((s.data for s in sections if s.name == SECTION_ONNX), None),
        sections=sections,
        metadata_offset=layout.metadata_offset,
        metadata_size=layout.metadata_size,
        engine_offset=eo,
        engine_size=es,
        reserved=layout.reserved,
        engine_sha256=layout.engine_sha256,
    )
