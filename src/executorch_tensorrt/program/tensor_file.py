"""Tensor files (`.etensors`, format ETTENSR1): named tensors, whole, in a
small binary layout the C++ runner reads and writes without a library.
docs/verification.md documents the layout; in short (little-endian):

  header   8 bytes  magic b"ETTENSR1"
           u32      version (1)
           u32      number of tensors
  tensor   u32      name length, then the UTF-8 name
           u32      dtype: ExecuTorch ScalarType code (6 float32, 4 int64, ...)
           u32      rank, then rank x i64 sizes
           u64      byte count (= element count x element size), then the
                    elements in row-major (contiguous) order

Reference files hold `input.0, input.1, ...` and `output.0, ...`; runners
read `input.*` (`--inputs`) and write `output.*` (`--outputs`).

numpy only (no torch), so `verify` starts fast. bfloat16 has no numpy dtype:
it is kept as its raw uint16 bits (`as_float64` widens it).
"""
from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes  # float8_e4m3fn for numpy
import numpy as np

from ..dtypes import DTYPES as ALL_DTYPES
from ..output_files import write_bytes_whole

MAGIC = b"ETTENSR1"
VERSION = 1
MAX_RANK = 16
MAX_NAME = 1024
MAX_TENSORS = 1 << 16
SUFFIX = ".etensors"

# ExecuTorch ScalarType code -> (name, numpy storage dtype, little-endian):
# dtypes.py's rows that numpy has, bfloat16 stored as its uint16 bits.
DTYPES: dict[int, tuple[str, np.dtype]] = {
    d.scalar_type: (d.numpy, np.dtype("<u2") if d.numpy == "bfloat16"
                    else np.dtype(getattr(ml_dtypes, d.numpy, None) or d.numpy).newbyteorder("<"))
    for d in ALL_DTYPES if d.numpy}
CODE_OF_NAME = {name: code for code, (name, _) in DTYPES.items()}


class TensorFileError(ValueError):
    """A tensor file that cannot be read (names the file and the byte offset)."""


@dataclass
class Tensor:
    """One stored tensor: its dtype name (bfloat16 stored as uint16 bits)."""
    name: str
    dtype: str
    array: np.ndarray

    @property
    def shape(self) -> list[int]:
        return list(self.array.shape)

    def as_float64(self) -> np.ndarray:
        if self.dtype == "bfloat16":
            bits = self.array.astype(np.uint32) << 16
            return bits.view(np.float32).astype(np.float64)
        return self.array.astype(np.float64)


def is_tensor_file(path: str | Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def write_tensors(path: str | Path, tensors: list[Tensor]) -> Path:
    out = bytearray(MAGIC + struct.pack("<II", VERSION, len(tensors)))
    for t in tensors:
        name = t.name.encode()
        code = CODE_OF_NAME[t.dtype]
        data = np.array(t.array, dtype=DTYPES[code][1], order="C")  # keeps rank 0
        out += struct.pack("<I", len(name)) + name
        out += struct.pack("<II", code, data.ndim)
        out += struct.pack(f"<{data.ndim}q", *data.shape)
        out += struct.pack("<Q", data.nbytes) + data.tobytes()
    return write_bytes_whole(path, bytes(out))


class _Reader:
    def __init__(self, data: bytes, path: str):
        self.data, self.path, self.pos = data, path, 0

    def take(self, n: int, what: str) -> bytes:
        if n > len(self.data) - self.pos:
            raise TensorFileError(
                f"{self.path}: truncated at byte {self.pos}: {what} needs {n} bytes, "
                f"{len(self.data) - self.pos} left")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str, what: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))


def read_tensors(path: str | Path) -> list[Tensor]:
    """Every tensor in the file; validates each size against the file."""
    path = Path(path)
    r = _Reader(path.read_bytes(), str(path))
    if r.take(len(MAGIC), "the magic") != MAGIC:
        raise TensorFileError(f"{path} is not a tensor file (no {MAGIC.decode()} magic)")
    version, count = r.unpack("<II", "the header")
    if version != VERSION:
        raise TensorFileError(f"{path}: tensor file version {version}, this reader knows "
                              f"{VERSION}")
    if count > MAX_TENSORS:
        raise TensorFileError(f"{path}: {count} tensors exceeds the limit {MAX_TENSORS}")
    tensors = []
    for i in range(count):
        (name_len,) = r.unpack("<I", f"tensor {i}'s name length")
        if name_len > MAX_NAME:
            raise TensorFileError(f"{path}: tensor {i}'s name is {name_len} bytes (limit "
                                  f"{MAX_NAME})")
        name = r.take(name_len, f"tensor {i}'s name").decode(errors="replace")
        code, rank = r.unpack("<II", f"tensor {name!r}'s dtype and rank")
        if code not in DTYPES:
            raise TensorFileError(f"{path}: tensor {name!r} has dtype code {code}, not one of "
                                  f"{sorted(DTYPES)}")
        if rank > MAX_RANK:
            raise TensorFileError(f"{path}: tensor {name!r} has rank {rank} (limit {MAX_RANK})")
        sizes = r.unpack(f"<{rank}q", f"tensor {name!r}'s sizes")
        if any(s < 0 for s in sizes):
            raise TensorFileError(f"{path}: tensor {name!r} has a negative size {list(sizes)}")
        dtype_name, np_dtype = DTYPES[code]
        (nbytes,) = r.unpack("<Q", f"tensor {name!r}'s byte count")
        want = math.prod(sizes) * np_dtype.itemsize
        if nbytes != want:
            raise TensorFileError(f"{path}: tensor {name!r} ({dtype_name} {list(sizes)}) "
                                  f"records {nbytes} bytes, its shape needs {want}")
        raw = r.take(nbytes, f"tensor {name!r}'s data")
        array = np.frombuffer(raw, dtype=np_dtype).reshape(sizes)
        tensors.append(Tensor(name, dtype_name, array))
    if r.pos != len(r.data):
        raise TensorFileError(f"{path}: {len(r.data) - r.pos} stray bytes after the last tensor")
    return tensors


_INDEXED = re.compile(r"^(input|output)\.(\d+)$")


def select(tensors: list[Tensor], kind: str) -> list[Tensor]:
    """The `kind.0, kind.1, ...` tensors in index order ('input' or 'output')."""
    found = {}
    for t in tensors:
        m = _INDEXED.match(t.name)
        if m and m.group(1) == kind:
            found[int(m.group(2))] = t
    if sorted(found) != list(range(len(found))):
        raise TensorFileError(f"the {kind} tensors are numbered {sorted(found)}, not 0..n-1")
    return [found[i] for i in range(len(found))]


# ---- torch conversion (imported lazily: the reader and verify stay torch-free) ----

def from_torch(name: str, tensor) -> Tensor:
    import torch

    t = tensor.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return Tensor(name, "bfloat16", t.view(torch.int16).numpy().view(np.uint16).copy())
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype not in CODE_OF_NAME:
        raise TensorFileError(f"tensor {name!r} has dtype {t.dtype}, which tensor files do not "
                              f"hold (supported: {sorted(CODE_OF_NAME)})")
    return Tensor(name, dtype, t.numpy().copy())


def to_torch(t: Tensor):
    import torch

    if t.dtype == "bfloat16":
        return torch.from_numpy(np.array(t.array, copy=True).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.array(t.array, copy=True))
