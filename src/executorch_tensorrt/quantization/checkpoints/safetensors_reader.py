"""Reads safetensors files tensor by tensor, checking the header before any read.

A checkpoint is untrusted input: the 8-byte header length, the JSON header,
every entry's dtype, shape and data offsets are checked against the file's
real size before a byte of tensor data is read, and each tensor is read on
its own (seek + readinto), never the whole file. A sharded checkpoint
(`model.safetensors.index.json`) is one `SafetensorsFolder` over its shards.

The layout (safetensors' own format): u64 little-endian header size N, N
bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, optional
"__metadata__": {str: str}}, then the data; offsets count from byte 8 + N.
"""
from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from ...errors import CheckpointError
from .common import open_checked

# Larger headers are refused: real ones are kilobytes to a few megabytes.
MAX_HEADER_BYTES = 100 * 1024 * 1024
MAX_DIMS = 8
DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
INDEX_NAME = "model.safetensors.index.json"


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int  # absolute file offset
    size: int  # bytes


def refuse(path, what: str, got, want: str) -> CheckpointError:
    return CheckpointError(f"{path}: {what} is {got}; expected {want}. The file is damaged "
                           "or not a safetensors checkpoint: download or convert it again")


class SafetensorsFile:
    """One .safetensors file: its validated table of tensors, read one at a time."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._file, self.file_size = open_checked(self.path, ".safetensors")
        self.metadata: dict[str, str] = {}
        self.entries: dict[str, TensorEntry] = self._read_header()

    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _read_header(self) -> dict[str, TensorEntry]:
        if self.file_size < 8:
            raise refuse(self.path, "the file size", self.file_size, "at least 8 bytes")
        (n,) = struct.unpack("<Q", self._file.read(8))
        if n < 2 or n > min(MAX_HEADER_BYTES, self.file_size - 8):
            raise refuse(self.path, "the header size", n,
                         f"2..{min(MAX_HEADER_BYTES, self.file_size - 8)} (the file's bytes after "
                         "the 8-byte size)")
        raw = self._file.read(n)
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise refuse(self.path, "the JSON header", f"unparseable ({type(e).__name__})",
                         "a JSON object") from None
        if not isinstance(header, dict):
            raise refuse(self.path, "the JSON header", type(header).__name__, "a JSON object")
        data_start, data_size = 8 + n, self.file_size - 8 - n
        entries, spans = {}, []
        for name, info in header.items():
            if name == "__metadata__":
                if not isinstance(info, dict) or not all(
                        isinstance(k, str) and isinstance(v, str) for k, v in info.items()):
                    raise refuse(self.path, "__metadata__", repr(info)[:80],
                                 "an object of strings")
                self.metadata = info
                continue
            entry = self._entry(name, info, data_size)
            entries[name] = TensorEntry(name, entry[0], entry[1], data_start + entry[2],
                                        entry[3] - entry[2])
            spans.append((entry[2], entry[3], name))
        spans.sort()
        for (_, end, first), (begin, _, second) in zip(spans, spans[1:]):
            if begin < end:
                raise refuse(self.path, f"tensor {second!r} data_offsets", f"starting at {begin}",
                             f"no overlap with {first!r}, which ends at {end}")
        return entries

    def _entry(self, name, info, data_size: int):
        where = f"tensor {name!r}"
        if not isinstance(info, dict):
            raise refuse(self.path, where, type(info).__name__, "an object")
        dtype = DTYPES.get(info.get("dtype")) if isinstance(info.get("dtype"), str) else None
        if dtype is None:
            raise refuse(self.path, f"{where} dtype", repr(info.get("dtype"))[:40],
                         f"one of {sorted(DTYPES)}")
        shape = info.get("shape")
        if (not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(
                type(d) is int and 0 <= d < 2 ** 48 for d in shape)):
            raise refuse(self.path, f"{where} shape", repr(shape)[:80],
                         f"a list of at most {MAX_DIMS} non-negative integers")
        offsets = info.get("data_offsets")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(type(o) is int for o in offsets)):
            raise refuse(self.path, f"{where} data_offsets", repr(offsets)[:80],
                         "[begin, end], two integers")
        begin, end = offsets
        if not 0 <= begin <= end <= data_size:
            raise refuse(self.path, f"{where} data_offsets", offsets,
                         f"0 <= begin <= end <= {data_size} (the data's size)")
        nbytes = math.prod(shape) * dtype.itemsize
        if end - begin != nbytes:
            raise refuse(self.path, f"{where} byte size", end - begin,
                         f"{nbytes} for {info['dtype']} {shape}")
        return dtype, tuple(shape), begin, end

    def entry(self, name: str) -> TensorEntry:
        if name not in self.entries:
            raise CheckpointError(f"{self.path}: has no tensor {name!r}; the checkpoint is "
                                  "incomplete or of another layout than its config names")
        return self.entries[name]

    def read(self, name: str) -> torch.Tensor:
        """The tensor `name`, read from its own byte range only."""
        entry = self.entry(name)
        out = torch.empty(entry.shape, dtype=entry.dtype)
        view = memoryview(out.view(-1).view(torch.uint8).numpy()) if out.numel() else None
        self._file.seek(entry.start)
        got = self._file.readinto(view) if view is not None else 0
        if got != entry.size:
            raise refuse(self.path, f"tensor {name!r} bytes", f"{got} read",
                         f"{entry.size} (the file changed or is truncated)")
        return out

    def read_rows_into(self, name: str, first_row: int, out: torch.Tensor) -> None:
        """Rows first_row.. of tensor `name` into the contiguous `out` (its dtype,
        out.shape[0] rows): a large tensor read in blocks, no copy of it whole."""
        entry = self.entry(name)
        row_bytes = entry.size // entry.shape[0] if entry.shape and entry.shape[0] else 0
        want = out.numel() * out.element_size()
        if (out.dtype != entry.dtype or not out.is_contiguous() or tuple(out.shape[1:])
                != entry.shape[1:] or first_row < 0 or first_row + out.shape[0] > entry.shape[0]):
            raise CheckpointError(f"{self.path}: rows {first_row}..{first_row + out.shape[0]} "
                                  f"{out.dtype} of tensor {name!r} ({entry.dtype} "
                                  f"{list(entry.shape)}) asked for; a reader's own error")
        self._file.seek(entry.start + first_row * row_bytes)
        got = self._file.readinto(memoryview(out.view(-1).view(torch.uint8).numpy())) if want else 0
        if got != want:
            raise refuse(self.path, f"tensor {name!r} bytes", f"{got} read",
                         f"{want} (the file changed or is truncated)")


class SafetensorsFolder:
    """A checkpoint's tensors over one file or the shards its index names."""

    def __init__(self, path: str | os.PathLike):
        path = Path(path)
        index = path / INDEX_NAME if path.is_dir() else None
        if index is not None and index.is_file():
            shards = self._shards(index)
        elif path.is_dir():
            shards = sorted(path.glob("*.safetensors"))
            if not shards:
                raise CheckpointError(f"{path}: holds no .safetensors file and no {INDEX_NAME}; "
                                      "give a checkpoint folder as published")
        else:
            shards = [path]
        self.files = [SafetensorsFile(s) for s in shards]
        self.where: dict[str, SafetensorsFile] = {}
        for f in self.files:
            for name in f.entries:
                if name in self.where:
                    raise CheckpointError(f"{f.path}: tensor {name!r} is also in "
                                          f"{self.where[name].path}; a checkpoint names each "
                                          "tensor once: remove the stray file")
                self.where[name] = f

    @staticmethod
    def _shards(index: Path) -> list[Path]:
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            files = sorted(set(weight_map.values()))
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
            raise CheckpointError(f"{index}: is not a safetensors index (a JSON object with a "
                                  "'weight_map' of tensor -> file); download it again") from None
        for name in files:
            if not isinstance(name, str) or Path(name).name != name:
                raise CheckpointError(f"{index}: names shard {name!r}; expected a file name in "
                                      "the same folder (no path parts)")
        return [index.parent / name for name in files]

    def names(self) -> list[str]:
        return list(self.where)

    def entry(self, name: str) -> TensorEntry:
        return self._file(name).entry(name)

    def read(self, name: str) -> torch.Tensor:
        return self._file(name).read(name)

    def read_rows_into(self, name: str, first_row: int, out: torch.Tensor) -> None:
        self._file(name).read_rows_into(name, first_row, out)

    def _file(self, name: str) -> SafetensorsFile:
        if name not in self.where:
            raise CheckpointError(f"{self.files[0].path.parent}: has no tensor {name!r}; the "
                                  "checkpoint is incomplete or of another layout than its "
                                  "config names")
        return self.where[name]

    def close(self) -> None:
        for f in self.files:
            f.close()
