"""The weights of an exported partition, kept out of every protobuf.

`export_onnx` leaves each large initializer's bytes where torch holds them and
records one `Weight` per initializer; this module gives their bytes as a
zero-copy view, hashes them (once per live tensor), writes them to a temp file
while hashing where they must not stay in memory, and supplies stand-ins that
cost no memory for the partitioner's checks.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..torch_dtypes import BLOB_NAME_OF_TORCH

# Initializers smaller than this stay inside the ONNX graph (shape constants,
# scalars): not worth a named-data entry each.
INLINE_LIMIT = 1024
KEY_PREFIX = "etrt."
_CHUNK = 16 << 20
# Blocks a non-contiguous weight is made contiguous in (byte_chunks): at 16 MiB,
# glibc's growing mmap threshold kept about 130 MB of freed blocks resident.
_COPY_CHUNK = 4 << 20



@dataclass
class Weight:
    """One ONNX initializer whose bytes live outside the graph."""
    name: str            # ONNX initializer name
    value: Any           # torch.Tensor (the exporter's) or numpy array (a folded constant)
    dtype: str           # the blob's dtype string
    shape: tuple[int, ...]
    nbytes: int

    def byte_view(self) -> np.ndarray:
        """The bytes as a flat uint8 array; a view where the tensor is contiguous."""
        return _flat_bytes(self.value)

    def byte_chunks(self):
        """The bytes in order as flat uint8 arrays: _CHUNK-byte views where the
        tensor is contiguous; else blocks of its first axis (about _COPY_CHUNK
        bytes) made contiguous one at a time, never the whole (the exporter's
        transposed head of a 128k vocabulary is a 1 GB view in bf16)."""
        v = self.value
        if isinstance(v, torch.Tensor):
            v = v.detach()
            contiguous = v.is_contiguous()
        else:
            v = np.asarray(v)
            contiguous = v.flags.c_contiguous
        if contiguous or v.ndim < 2 or v.shape[0] == 0:
            view = self.byte_view()
            for start in range(0, view.nbytes, _CHUNK):
                yield view[start:start + _CHUNK]
            return
        row_bytes = max(1, self.nbytes // v.shape[0])
        rows = max(1, _COPY_CHUNK // row_bytes)
        for start in range(0, v.shape[0], rows):
            yield _flat_bytes(v[start:start + rows])


def _flat_bytes(v) -> np.ndarray:
    """A tensor's or array's bytes as a flat uint8 array, a view where it is
    contiguous (bool tensors as uint8)."""
    if isinstance(v, torch.Tensor):
        t = v.detach()
        if t.dtype == torch.bool:
            t = t.to(torch.uint8)
        return t.contiguous().reshape(-1).view(torch.uint8).numpy()
    return np.ascontiguousarray(v).reshape(-1).view(np.uint8)


def dtype_name(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        name = BLOB_NAME_OF_TORCH.get(value.dtype)
    else:
        name = str(np.asarray(value).dtype)
    if name not in BLOB_NAME_OF_TORCH.values():
        raise ValueError(f"a weight of dtype {value.dtype} cannot go to named data: the blob "
                         f"lists weights of {sorted(BLOB_NAME_OF_TORCH.values())} only")
    return name


def write_hashed(weight: Weight, directory: str | None = None) -> tuple[str, str]:
    """Writes the weight's bytes to a new temp file, hashing them on the way.
    Returns (path, sha256 hex). Reads the tensor in chunks: no second copy,
    not even of a non-contiguous one (Weight.byte_chunks)."""
    h = hashlib.sha256()
    fd, path = tempfile.mkstemp(prefix="etrt-weight-", suffix=".bin", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in weight.byte_chunks():
                h.update(memoryview(chunk))
                f.write(memoryview(chunk))
    except BaseException:
        os.unlink(path)
        raise
    return path, h.hexdigest()


def named_data_key(sha256_hex: str) -> str:
    """Equal bytes, equal key: partitions and methods sharing a weight share an entry."""
    return KEY_PREFIX + sha256_hex


def _zero_pages(nbytes: int) -> np.ndarray:
    """Zeros from calloc: untouched pages are the kernel's shared zero page, so
    a stand-in costs address space, not memory, even while TensorRT reads it."""
    return np.zeros(max(nbytes, 1), np.uint8)


def initializer_pointers(weights: list[Weight], stand_ins: bool) -> tuple[list, list]:
    """(name, pointer, nbytes) for TensorRT's parser, and the arrays that must
    stay alive while it reads them. Stand-ins are zeros, each at its own
    address (TensorRT tells weights apart by address)."""
    if stand_ins:
        offsets, total = [], 0
        for w in weights:
            offsets.append(total)
            total += -(-w.nbytes // 64) * 64
        zeros = _zero_pages(total)
        base = zeros.ctypes.data
        return [(w.name, base + o, w.nbytes) for w, o in zip(weights, offsets)], [zeros]
    entries, keep = [], []
    for w in weights:
        buf = w.byte_view()
        keep.append(buf)
        entries.append((w.name, buf.ctypes.data, w.nbytes))
    return entries, keep


_digests: dict[int, tuple] = {}
_digests_lock = threading.Lock()


def digest(weight: Weight) -> str:
    """sha256 hex of the weight's bytes, computed once per live tensor."""
    value = weight.value
    tensor = value if isinstance(value, torch.Tensor) else None
    if tensor is not None:
        with _digests_lock:
            hit = _digests.get(id(tensor))
        if hit is not None and hit[0]() is tensor and hit[1] == tensor._version:
            return hit[2]
    h = hashlib.sha256()
    for chunk in weight.byte_chunks():
        h.update(memoryview(chunk))
    result = h.hexdigest()
    if tensor is not None:
        with _digests_lock:
            _digests[id(tensor)] = (weakref.ref(tensor), tensor._version, result)
    return result


def content_id(weights: list[Weight]) -> str:
    """Names the contents of these weights, as named_data.StoredWeights does."""
    return ",".join(f"{w.name}={digest(w)}" for w in weights)
