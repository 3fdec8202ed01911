"""The TensorRT delegate's processed blob: the TR01 layout plus extensions.

Layout (all integers little-endian; see docs/blob-format.md)::

    offset 0   header, 32 bytes, struct "<4sIIIQ8s":
               magic b"TR01", metadata offset (u32), metadata size (u32),
               engine offset (u32, multiple of 16), engine size (u64),
               8 reserved bytes (byte 0: schema version 1, the rest zero)
    offset 32  metadata: compact UTF-8 JSON object, "io_bindings" first
               zero padding to a multiple of 16
               engine bytes (the serialized TensorRT engine)
               for each extension section, in order: zero padding to a
               multiple of 16, then the section's bytes ("onnx" first)

The sections are listed in the metadata's "sections" key
(``[{"name": "onnx", "offset": ..., "size": ...}, ...]``, absolute offsets),
so a parser that knows only TR01 still finds the engine at the header's
offset and ignores everything after it.

Both readers of this format, :func:`read_blob` here and
``etrt_validate_blob`` in ``native/src/blob_header.cpp``, check every offset
and size before using it and accept and reject the same blobs.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .errors import InvalidProgramError

__all__ = [
    "ALIGNMENT",
    "BlobError",
    "Blob",
    "DTYPE_TO_SCALAR_TYPE",
    "HEADER_FORMAT",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_JSON_DEPTH",
    "MAX_OBJECT_KEYS",
    "READ_DTYPES",
    "SCHEMA_VERSION",
    "SECTION_ONNX",
    "Section",
    "WRITE_DTYPES",
    "read_blob",
    "write_blob",
]

MAGIC = b"TR01"
HEADER_FORMAT = "<4sIIIQ8s"
HEADER_SIZE = struct.calcsize(HEADER_FORMAT)  # 32
ALIGNMENT = 16
SCHEMA_VERSION = 1
SECTION_ONNX = "onnx"

#: Metadata JSON may nest at most this many arrays/objects (the top-level
#: object counts as one).
MAX_JSON_DEPTH = 64
#: The objects whose keys this format checks for repeats (the top-level
#: object, each io_bindings entry, each sections entry) may hold at most
#: this many keys.
MAX_OBJECT_KEYS = 128

_U32_MAX = 0xFFFFFFFF
_U64_MAX = 0xFFFFFFFFFFFFFFFF
_I64_MAX = 0x7FFFFFFFFFFFFFFF
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1

#: The dtype strings of io_bindings entries, as ExecuTorch's upstream
#: TensorRT delegate writes them (backends/nvidia/tensorrt/backend.py,
#: ``_trt_dtype_to_string``), with the ExecuTorch ScalarType code each one
#: corresponds to. "float8" is TensorRT's FP8, i.e. Float8_e4m3fn.
DTYPE_TO_SCALAR_TYPE: Mapping[str, int] = {
    "uint8": 0,  # Byte
    "int8": 1,  # Char
    "int32": 3,  # Int
    "int64": 4,  # Long
    "float16": 5,  # Half
    "float32": 6,  # Float
    "bool": 11,  # Bool
    "bfloat16": 15,  # BFloat16
    "float8": 24,  # Float8_e4m3fn
}
#: What write_blob accepts as a dtype: the names above, or "" for "not
#: recorded" (Torch-TensorRT's ExecuTorch path writes "").
WRITE_DTYPES = frozenset(DTYPE_TO_SCALAR_TYPE) | {""}
# read_blob also accepts str(torch.dtype), which an earlier Torch-TensorRT
# ExecuTorch helper wrote ("torch.float32").
_TORCH_DTYPE_NAMES = ("uint8", "int8", "int16", "int32", "int64", "float16",
                      "float32", "float64", "bool", "bfloat16",
                      "float8_e4m3fn", "float8_e5m2")
READ_DTYPES = WRITE_DTYPES | {"torch." + n for n in _TORCH_DTYPE_NAMES}

_BINDING_KEYS = ("name", "dtype", "shape", "is_input")
# Keys write_blob fills in itself.
_RESERVED_WRITE_KEYS = ("sections",)


class BlobError(InvalidProgramError):
    """A blob (or the input to write_blob) is malformed; the message says how."""


@dataclass(frozen=True)
class Section:
    """An extension section stored after the engine."""

    name: str
    offset: int
    size: int
    data: bytes = field(repr=False)


@dataclass(frozen=True)
class Blob:
    """A parsed blob.

    ``metadata`` is the JSON object without its "sections" key (the section
    table is ``sections``), so ``read_blob(write_blob(e, m)).metadata == m``.
    """

    engine: bytes = field(repr=False)
    metadata: dict
    onnx: bytes | None = field(repr=False)
    sections: tuple[Section, ...] = ()
    metadata_offset: int = 0
    metadata_size: int = 0
    engine_offset: int = 0
    engine_size: int = 0
    reserved: bytes = b"\0" * 8

    @property
    def io_bindings(self) -> list:
        return self.metadata["io_bindings"]

    @property
    def schema_version(self) -> int:
        """Reserved byte 0 (1 for blobs written here and by Torch-TensorRT,
        0 for ExecuTorch's upstream delegate)."""
        return self.reserved[0]

    def section(self, name: str) -> bytes | None:
        for s in self.sections:
            if s.name == name:
                return s.data
        return None


# --------------------------------------------------------------------------
# Shared checks (used for writing and reading)


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) & ~(ALIGNMENT - 1)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _show(v: Any, limit: int = 40) -> str:
    s = repr(v)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _check_object_keys(obj: dict, where: str, key_info: dict | None) -> None:
    """Key count and repeated keys, from the parse hook's record (reading) or
    from the dict itself (writing, where keys cannot repeat)."""
    if key_info is not None:
        count, dup = key_info.get(id(obj), (len(obj), None))
    else:
        count, dup = len(obj), None
    if dup is not None:
        raise BlobError(f"duplicate key {_show(dup)} in {where}")
    if count > MAX_OBJECT_KEYS:
        raise BlobError(f"{where} has more than {MAX_OBJECT_KEYS} keys ({count})")


def _check_bindings(bindings: Any, dtypes: frozenset, key_info: dict | None) -> None:
    if not isinstance(bindings, (list, tuple)):
        raise BlobError(f"'io_bindings' must be an array, got {type(bindings).__name__}")
    seen: dict[str, int] = {}
    for i, b in enumerate(bindings):
        where = f"io_bindings[{i}]"
        if not isinstance(b, dict):
            raise BlobError(f"{where} must be an object, got {type(b).__name__}")
        _check_object_keys(b, where, key_info)
        for k in _BINDING_KEYS:
            if k not in b:
                raise BlobError(f"{where} lacks {k!r} (every binding needs "
                                "name, dtype, shape and is_input)")
        name = b["name"]
        if not isinstance(name, str) or not name:
            raise BlobError(f"{where}.name must be a non-empty string, got {_show(name)}")
        if any(ord(c) < 0x20 for c in name):
            raise BlobError(f"{where}.name {_show(name)} contains a control character")
        dtype = b["dtype"]
        if not isinstance(dtype, str) or dtype not in dtypes:
            raise BlobError(f"{where}.dtype {_show(dtype)} is not a known dtype "
                            f"(one of {sorted(DTYPE_TO_SCALAR_TYPE)}, or \"\")")
        shape = b["shape"]
        if not isinstance(shape, (list, tuple)) or not all(
            _is_int(d) and -1 <= d <= _I64_MAX for d in shape
        ):
            raise BlobError(f"{where}.shape must be an array of integers >= -1 "
                            f"(-1 for a dynamic dimension), got {_show(shape)}")
        if not isinstance(b["is_input"], bool):
            raise BlobError(f"{where}.is_input must be true or false, got {_show(b['is_input'])}")
        if name in seen:
            raise BlobError(f"duplicate binding name {_show(name)} "
                            f"(io_bindings[{seen[name]}] and {where})")
        seen[name] = i


def _check_top_level(meta: dict, dtypes: frozenset, key_info: dict | None) -> None:
    # aliased_io, hardware_compatible and device_id are read by key by
    # Torch-TensorRT's parser, which refuses a blob where they have other types.
    _check_object_keys(meta, "the metadata object", key_info)
    if "io_bindings" not in meta:
        raise BlobError("metadata has no 'io_bindings' key")
    _check_bindings(meta["io_bindings"], dtypes, key_info)
    if "aliased_io" in meta:
        a = meta["aliased_io"]
        if not isinstance(a, list):
            raise BlobError(f"'aliased_io' must be an array, got {type(a).__name__}")
        if a:
            raise BlobError("aliased_io entries (Torch-TensorRT in-place output "
                            "aliasing) are not supported by this delegate")
    if "hardware_compatible" in meta and not isinstance(meta["hardware_compatible"], bool):
        raise BlobError("'hardware_compatible' must be true or false, got "
                        f"{_show(meta['hardware_compatible'])}")
    if "device_id" in meta:
        d = meta["device_id"]
        if not _is_int(d) or not _I32_MIN <= d <= _I32_MAX:
            raise BlobError(f"'device_id' must be a 32-bit integer, got {_show(d)}")
    if "onnx_node_sources" in meta:
        _check_node_sources(meta["onnx_node_sources"], key_info)


def _check_name(v: Any, where: str) -> None:
    if not isinstance(v, str) or not v or any(ord(c) < 0x20 for c in v):
        raise BlobError(f"{where} must be a non-empty string without control characters, "
                        f"got {_show(v)}")


def _check_node_sources(sources: Any, key_info: dict | None) -> None:
    """Profiling's map (docs/profiling.md): [{"node": ONNX node name,
    "edge_nodes": [edge node names it came from]}, ...]."""
    if not isinstance(sources, (list, tuple)):
        raise BlobError(f"'onnx_node_sources' must be an array, got {type(sources).__name__}")
    for i, entry in enumerate(sources):
        where = f"onnx_node_sources[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"node", "edge_nodes"}:
            raise BlobError(f"{where} must be an object with exactly 'node' and 'edge_nodes', "
                            f"got {_show(entry)}")
        _check_object_keys(entry, where, key_info)
        _check_name(entry["node"], f"{where}.node")
        edges = entry["edge_nodes"]
        if not isinstance(edges, (list, tuple)):
            raise BlobError(f"{where}.edge_nodes must be an array, got {_show(edges)}")
        for j, e in enumerate(edges):
            _check_name(e, f"{where}.edge_nodes[{j}]")


# --------------------------------------------------------------------------
# Writing


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
                        raise BlobError(f"metadata key {_show(k)} at {path} is not a string")
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


def _metadata_text(meta: Mapping[str, Any], sections: list[dict]) -> tuple[str, int]:
    """The metadata JSON text, io_bindings first, then the scalar fields that
    upstream parsers read by key, then the rest in the caller's order, then
    "sections". Also returns where the io_bindings array ends."""
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
    metadata: dict,
    onnx: bytes | None = None,
    *,
    sections: Mapping[str, bytes] | Iterable[tuple[str, bytes]] | None = None,
) -> bytes:
    """Serializes an engine, its metadata and optional extension sections.

    ``metadata`` must hold ``io_bindings`` (a list of
    ``{"name", "dtype", "shape", "is_input"}`` objects, extra keys allowed);
    every other JSON-serializable key is carried as is. ``onnx`` becomes the
    first section ("onnx"); ``sections`` adds more named sections after it.
    The key "sections" is the writer's own and may not be passed in.
    """
    engine = _as_bytes(engine, "engine")
    if not engine:
        raise BlobError("engine is empty (engine size 0): a blob must carry an engine")
    if not isinstance(metadata, Mapping):
        raise BlobError(f"metadata must be a dict, got {type(metadata).__name__}")
    for k in _RESERVED_WRITE_KEYS:
        if k in metadata:
            raise BlobError(f"metadata key {k!r} is written by write_blob itself; "
                            "pass section data through the onnx/sections arguments")
    _check_jsonable(metadata)
    meta = dict(metadata)
    _check_top_level(meta, WRITE_DTYPES, None)

    named: list[tuple[str, bytes]] = []
    if onnx is not None:
        named.append((SECTION_ONNX, _as_bytes(onnx, "onnx")))
    if sections is not None:
        items = sections.items() if isinstance(sections, Mapping) else sections
        for name, data in items:
            named.append((name, _as_bytes(data, f"section {name!r}")))
    seen = set()
    for name, _ in named:
        if not isinstance(name, str) or not name:
            raise BlobError(f"section name must be a non-empty string, got {_show(name)}")
        if name in seen:
            raise BlobError(f"duplicate section name {name!r}")
        seen.add(name)

    # The section offsets are part of the metadata whose length decides
    # them: recompute until the text stops changing (offsets only grow, and
    # their digit counts with them, so this settles in a few rounds).
    table: list[dict] = []
    for _ in range(32):
        try:
            text, bindings_end = _metadata_text(meta, table)
            meta_bytes = text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise BlobError(f"metadata holds a string that is not valid Unicode: {e}") from None
        engine_offset = _align(HEADER_SIZE + len(meta_bytes))
        cursor = engine_offset + len(engine)
        new_table = []
        for name, data in named:
            off = _align(cursor)
            new_table.append({"name": name, "offset": off, "size": len(data)})
            cursor = off + len(data)
        if new_table == table:
            break
        table = new_table
    else:  # pragma: no cover - the loop settles in <= 3 rounds
        raise BlobError("internal error: section offsets did not settle")

    if len(meta_bytes) > _U32_MAX or engine_offset > _U32_MAX:
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
    out += struct.pack(HEADER_FORMAT, MAGIC, HEADER_SIZE, len(meta_bytes), engine_offset,
                       len(engine), bytes([SCHEMA_VERSION]) + b"\0" * 7)
    out += meta_bytes
    out += b"\0" * (engine_offset - len(out))
    out += engine
    for entry, (_, data) in zip(table, named):
        out += b"\0" * (entry["offset"] - len(out))
        out += data
    blob = bytes(out)
    _parse(memoryview(blob))  # what is written here must read back here
    return blob


# --------------------------------------------------------------------------
# Reading


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


def _parse(mv: memoryview) -> tuple:
    size = len(mv)
    if size < HEADER_SIZE:
        raise BlobError(f"truncated blob: {size} bytes, fewer than the {HEADER_SIZE}-byte "
                        "TR01 header")
    magic, meta_off, meta_size, eng_off, eng_size, reserved = struct.unpack_from(
        HEADER_FORMAT, mv, 0)
    if magic != MAGIC:
        if magic == b"TR02":
            raise BlobError("unsupported magic b'TR02': a Torch-TensorRT blob with aliased "
                            "(in-place) outputs, which this delegate does not support")
        raise BlobError(f"bad magic {bytes(magic)!r}: not a TR01 TensorRT blob")
    if meta_off < HEADER_SIZE:
        raise BlobError(f"metadata offset {meta_off} overlaps the {HEADER_SIZE}-byte header")
    if eng_off % ALIGNMENT:
        raise BlobError(f"engine offset {eng_off} is not {ALIGNMENT}-byte aligned")
    if eng_size == 0:
        raise BlobError("engine is empty (engine size 0): a blob must carry an engine")
    if meta_off > size or meta_size > size - meta_off:
        raise BlobError(f"metadata region {_region(meta_off, meta_size)} is out of bounds "
                        f"(blob has {size} bytes)")
    if eng_off > size or eng_size > size - eng_off:
        raise BlobError(f"engine region {_region(eng_off, eng_size)} is out of bounds "
                        f"(blob has {size} bytes)")
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
    _check_top_level(meta, READ_DTYPES, key_info)

    sections: list[tuple[str, int, int]] = []
    if "sections" in meta:
        table = meta["sections"]
        if not isinstance(table, list):
            raise BlobError(f"'sections' must be an array, got {type(table).__name__}")
        prev_end, prev_what = eng_off + eng_size, "the engine region"
        names: set[str] = set()
        for i, s in enumerate(table):
            where = f"sections[{i}]"
            if not isinstance(s, dict):
                raise BlobError(f"{where} must be an object, got {type(s).__name__}")
            _check_object_keys(s, where, key_info)
            name, off, n = s.get("name"), s.get("offset"), s.get("size")
            if not isinstance(name, str) or not name:
                raise BlobError(f"{where}.name must be a non-empty string, got {_show(name)}")
            if not _is_int(off) or off < 0:
                raise BlobError(f"{where}.offset must be a non-negative integer, got {_show(off)}")
            if not _is_int(n) or n < 0:
                raise BlobError(f"{where}.size must be a non-negative integer, got {_show(n)}")
            if off % ALIGNMENT:
                raise BlobError(f"section {name!r} offset {off} is not {ALIGNMENT}-byte aligned")
            if off > size or n > size - off:
                raise BlobError(f"section {name!r} region {_region(off, n)} is out of bounds "
                                f"(blob has {size} bytes)")
            if off < prev_end:
                raise BlobError(f"section {name!r} region {_region(off, n)} overlaps or "
                                f"precedes {prev_what} (sections follow the engine, in order)")
            if name in names:
                raise BlobError(f"duplicate section name {name!r}")
            names.add(name)
            sections.append((name, off, n))
            prev_end, prev_what = off + n, f"section {name!r}"
        del meta["sections"]
    header = (meta_off, meta_size, eng_off, eng_size, bytes(reserved))
    return header, meta, sections


def read_blob(data: bytes | bytearray | memoryview) -> Blob:
    """Parses and validates a blob; raises BlobError naming what is wrong."""
    try:
        mv = memoryview(data)
    except TypeError:
        raise BlobError(f"blob must be bytes-like, got {type(data).__name__}") from None
    if mv.ndim != 1 or mv.itemsize != 1:
        try:
            mv = mv.cast("B")
        except TypeError:
            raise BlobError("blob must be a contiguous byte buffer") from None
    (meta_off, meta_size, eng_off, eng_size, reserved), meta, table = _parse(mv)
    sections = tuple(Section(name, off, n, bytes(mv[off:off + n])) for name, off, n in table)
    onnx = next((s.data for s in sections if s.name == SECTION_ONNX), None)
    return Blob(
        engine=bytes(mv[eng_off:eng_off + eng_size]),
        metadata=meta,
        onnx=onnx,
        sections=sections,
        metadata_offset=meta_off,
        metadata_size=meta_size,
        engine_offset=eng_off,
        engine_size=eng_size,
        reserved=reserved,
    )
