"""Parses a GGUF file's header, metadata and tensor table, checking each field before use.

The layout (GGUF v2/v3, little-endian): magic "GGUF", u32 version, u64 tensor
count, u64 metadata count; metadata as (string key, u32 type, value); tensor
infos as (string name, u32 n_dims, u64 dims[n_dims] fastest first, u32 ggml
type, u64 offset); padding to `general.alignment` (default 32); the data.
Strings are u64 length + UTF-8 bytes. Every count, length, type, dimension and
offset is checked against what is left of the file before it is used, so a
damaged or hostile file ends in a CheckpointError naming the field, never in
a read outside the file or an allocation the file's size does not justify.
Tensor data is read per tensor (`read_tensor_bytes`).
"""
from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from ...errors import CheckpointError
from .common import open_checked

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_STRING = 64 * 1024 * 1024
MAX_ARRAY_DEPTH = 3
DEFAULT_ALIGNMENT = 32
# value type -> struct format (scalar types); 8 = string, 9 = array
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # GGUF order: dims[0] is the fastest (a row's length)
    kind: GGMLQuantizationType
    start: int  # absolute file offset
    size: int  # bytes

    @property
    def shape(self) -> tuple[int, ...]:
        """torch order: [..., rows, row length]."""
        return tuple(reversed(self.dims))


class _Cursor:
    def __init__(self, f, path, size: int):
        self.f, self.path, self.size, self.at = f, path, size, 0

    def fail(self, field: str, got, want: str):
        raise CheckpointError(f"{self.path}: {field} is {got} (at byte {self.at}); expected "
                              f"{want}. The GGUF file is damaged or truncated: download or "
                              "convert it again")

    def left(self) -> int:
        return self.size - self.at

    def take(self, n: int, field: str) -> bytes:
        if n > self.left():
            self.fail(f"{field} size", n, f"at most the {self.left()} bytes left")
        data = self.f.read(n)
        if len(data) != n:
            self.fail(f"{field} bytes", f"{len(data)} read", f"{n} (the file changed)")
        self.at += n
        return data

    def scalar(self, fmt: str, field: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), field))[0]

    def string(self, field: str) -> str:
        n = self.scalar("<Q", f"{field} length")
        if n > min(MAX_STRING, self.left()):
            self.fail(f"{field} length", n, f"at most {min(MAX_STRING, self.left())}")
        try:
            return self.take(n, field).decode("utf-8")
        except UnicodeDecodeError:
            self.fail(field, "not UTF-8", "a UTF-8 string")

    def value(self, vtype: int, field: str, depth: int = 0):
        if vtype in SCALARS:
            return self.scalar(SCALARS[vtype], field)
        if vtype == STRING:
            return self.string(field)
        if vtype != ARRAY:
            self.fail(f"{field} value type", vtype, "0..12")
        if depth >= MAX_ARRAY_DEPTH:
            self.fail(f"{field} array nesting", depth + 1, f"at most {MAX_ARRAY_DEPTH}")
        item = self.scalar("<I", f"{field} item type")
        count = self.scalar("<Q", f"{field} item count")
        smallest = struct.calcsize(SCALARS[item]) if item in SCALARS else (
            8 if item == STRING else 12 if item == ARRAY else None)
        if smallest is None:
            self.fail(f"{field} item type", item, "0..12")
        if count * smallest > self.left():
            self.fail(f"{field} item count", count,
                      f"at most {self.left() // smallest} (what the file has left)")
        if item in SCALARS:  # read numeric arrays whole: tokenizer scores are large
            raw = self.take(count * smallest, field)
            return np.frombuffer(raw, dtype=np.dtype(SCALARS[item])).tolist()
        return [self.value(item, field, depth + 1) for _ in range(count)]


class GGUFFile:
    """A GGUF file's metadata and validated tensor table."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._file, self.file_size = open_checked(self.path, ".gguf")
        self.metadata: dict = {}
        self.tensors: dict[str, TensorInfo] = {}
        self._parse()

    def close(self) -> None:
        self._file.close()

    def _parse(self) -> None:
        c = _Cursor(self._file, self.path, self.file_size)
        magic = c.take(4, "the magic")
        if magic != MAGIC:
            c.fail("the magic", magic, "b'GGUF' (this is not a GGUF file)")
        version = c.scalar("<I", "the version")
        if version not in VERSIONS:
            hint = " (a big-endian file: convert it little-endian)" if (
                version >> 24) in VERSIONS else ""
            c.fail("the version", f"{version}{hint}", f"one of {list(VERSIONS)}")
        n_tensors = c.scalar("<Q", "the tensor count")
        n_kv = c.scalar("<Q", "the metadata count")
        if n_kv * 13 > c.left():  # key length 8 + type 4 + a value of at least 1
            c.fail("the metadata count", n_kv, f"at most {c.left() // 13}")
        for i in range(n_kv):
            key = c.string(f"metadata key {i}")
            if key in self.metadata:
                c.fail(f"metadata key {key!r}", "repeated", "each key once")
            self.metadata[key] = c.value(c.scalar("<I", f"metadata {key!r} type"),
                                         f"metadata {key!r}")
        if n_tensors * 32 > c.left():  # name 8 + n_dims 4 + a dim 8 + type 4 + offset 8
            c.fail("the tensor count", n_tensors, f"at most {c.left() // 32}")
        self._names: set[str] = set()
        infos = [self._info(c, i) for i in range(n_tensors)]
        alignment = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1) or (
                alignment > 1 << 20):
            c.fail("metadata 'general.alignment'", alignment, "a power of two up to 1 MiB")
        data_start = -(-c.at // alignment) * alignment
        data_size = max(self.file_size - data_start, 0)
        spans = []
        for name, dims, kind, offset in infos:
            block, type_size = GGML_QUANT_SIZES[kind]
            if dims[0] % block:
                c.fail(f"tensor {name!r} row length", dims[0],
                       f"a multiple of {kind.name}'s block of {block}")
            size = dims[0] // block * type_size * math.prod(dims[1:])
            if offset % alignment or offset > data_size or size > data_size - offset:
                c.fail(f"tensor {name!r} offset", offset,
                       f"a multiple of {alignment} with its {size} bytes inside the "
                       f"{data_size} bytes of data")
            self.tensors[name] = TensorInfo(name, dims, kind, data_start + offset, size)
            spans.append((offset, offset + size, name))
        spans.sort()
        for (_, end, first), (begin, _, second) in zip(spans, spans[1:]):
            if begin < end:
                c.fail(f"tensor {second!r} offset", begin,
                       f"no overlap with {first!r}, which ends at {end}")

    def _info(self, c: _Cursor, i: int):
        name = c.string(f"tensor {i}'s name")
        if name in self._names:
            c.fail(f"tensor name {name!r}", "repeated", "each name once")
        n_dims = c.scalar("<I", f"tensor {name!r} n_dims")
        if not 1 <= n_dims <= MAX_DIMS:
            c.fail(f"tensor {name!r} n_dims", n_dims, f"1..{MAX_DIMS}")
        dims = tuple(c.scalar("<Q", f"tensor {name!r} dims") for _ in range(n_dims))
        if any(d == 0 or d >= 2 ** 40 for d in dims) or math.prod(dims) >= 2 ** 48:
            c.fail(f"tensor {name!r} dims", list(dims), "positive sizes below 2**40, "
                   "2**48 elements in all")
        raw_kind = c.scalar("<I", f"tensor {name!r} type")
        try:
            kind = GGMLQuantizationType(raw_kind)
        except ValueError:
            c.fail(f"tensor {name!r} type", raw_kind, "a ggml type this gguf package knows")
        if kind not in GGML_QUANT_SIZES:
            c.fail(f"tensor {name!r} type", kind.name, "a ggml type with a known block size")
        offset = c.scalar("<Q", f"tensor {name!r} offset")
        self._names.add(name)
        return name, dims, kind, offset

    def read_tensor_bytes(self, name: str) -> np.ndarray:
        """The tensor's raw bytes (uint8, [rows..., bytes per row]), read from its range only."""
        info = self.tensors[name]
        self._file.seek(info.start)
        raw = bytearray(info.size)
        got = self._file.readinto(raw)
        if got != info.size:
            raise CheckpointError(f"{self.path}: tensor {name!r} has {got} of its {info.size} "
                                  "bytes: the file changed or is truncated")
        row_bytes = info.size // max(math.prod(info.dims[1:]), 1)
        return np.frombuffer(raw, dtype=np.uint8).reshape(*reversed(info.dims[1:]), row_bytes)
