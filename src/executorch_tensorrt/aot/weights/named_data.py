"""A partition's weights into ExecuTorch's named data, each stored once.

A weight that is the model's own tensor is handed to the NamedDataStore as a
view of that tensor (`TensorBackedData`), hashed once and written once, when
ExecuTorch streams the program to disk: no copy in memory or on disk. A
weight export made (fp16/bf16 conversions, constants the ONNX optimizer
folded) is written to a temp file while it is hashed and handed over as
file-backed data, so the new bytes do not stay in memory. The key is the
content hash, so equal weights in any partition or method share one entry
(ExecuTorch merges the stores of all lowered modules by key and by content).
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np
import torch
from executorch.exir._serialize._cord import FileBackedData
from executorch.exir._serialize._named_data_store import NamedDataStore

from .content import Weight, digest, named_data_key, write_hashed

_WRITE_CHUNK = 16 << 20


class TensorBackedData(FileBackedData):
    """Named data read from a live tensor when the program is written.

    ExecuTorch's store and Cord take bytes or FileBackedData (they ask its
    length, a prefix, its sha256, and have it write itself to the output);
    this is a FileBackedData without a file. The tensor must not change until
    the program is written (export writes it at once)."""

    def __init__(self, view: np.ndarray, sha256: bytes) -> None:  # noqa: super not called: no file
        self._view = view          # flat uint8, sharing the tensor's memory
        self._path = None
        self._size = int(view.nbytes)
        self._sha256 = sha256
        self._finalizer = None

    def prefix(self, size: int) -> bytes:
        return self._view[:size].tobytes()

    def to_bytes(self) -> bytes:
        return self._view.tobytes()

    def write_to_file(self, outfile: io.BufferedIOBase) -> None:
        for start in range(0, self._size, _WRITE_CHUNK):
            outfile.write(memoryview(self._view[start:start + _WRITE_CHUNK]))

    def close(self) -> None:
        self._view = np.zeros(0, np.uint8)

# Named data offsets are aligned so that executors can view them as tensors
# of any dtype (and vectorized kernels read aligned memory).
WEIGHT_ALIGNMENT = 64


@dataclass
class StoredWeights:
    store: NamedDataStore
    entries: list[dict] = field(default_factory=list)  # the blob's "weights"
    digests: list[str] = field(default_factory=list)   # sha256 hex, in graph order

    @property
    def weights_id(self) -> str:
        """Names these weights' contents (an engine cache key part)."""
        return ",".join(f"{e['name']}={d}" for e, d in zip(self.entries, self.digests))


def _data(w: Weight, owned: bool) -> tuple[FileBackedData, str]:
    """The weight as named data, and its sha256 hex."""
    if owned and isinstance(w.value, torch.Tensor) and w.value.is_contiguous() \
            and w.value.dtype != torch.bool:
        sha = digest(w)
        return TensorBackedData(w.byte_view(), bytes.fromhex(sha)), sha
    path, sha = write_hashed(w)
    return FileBackedData.move_from(path, sha256=bytes.fromhex(sha)), sha


def store_weights(weights: list[Weight], external_tag: str | None,
                  owned: bool = True) -> StoredWeights:
    """Adds every weight to a new NamedDataStore; `external_tag` sends them to
    `<external_tag>.ptd` instead of the .pte. `owned=False`: the tensors were
    made by the export (a precision conversion), so they go to temp files."""
    result = StoredWeights(NamedDataStore())
    added: set[str] = set()
    for w in weights:
        data, sha = _data(w, owned)
        key = named_data_key(sha)
        if key in added:  # the same bytes twice in one partition
            data.close()
        else:
            result.store.add_named_data(key, data, alignment=WEIGHT_ALIGNMENT,
                                        external_tag=external_tag)
            added.add(key)
        result.entries.append({"name": w.name, "key": key, "dtype": w.dtype,
                               "shape": list(w.shape), "nbytes": w.nbytes})
        result.digests.append(sha)
    return result
