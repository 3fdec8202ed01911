"""A partition's weights into ExecuTorch's named data, each stored once.

Each weight is written to a temp file while it is hashed (no in-memory copy),
then handed to the NamedDataStore as file-backed data, which ExecuTorch
streams into the .pte or the .ptd. The key is the content hash, so equal
weights in any partition or method share one entry (ExecuTorch merges the
stores of all lowered modules by key and by content).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from executorch.exir._serialize._cord import FileBackedData
from executorch.exir._serialize._named_data_store import NamedDataStore

from .weights import Weight, named_data_key, write_hashed

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


def store_weights(weights: list[Weight], external_tag: str | None) -> StoredWeights:
    """Adds every weight to a new NamedDataStore; `external_tag` sends them to
    `<external_tag>.ptd` instead of the .pte."""
    result = StoredWeights(NamedDataStore())
    added: set[str] = set()
    for w in weights:
        path, digest = write_hashed(w)
        key = named_data_key(digest)
        if key in added:  # the same bytes twice in one partition
            FileBackedData(path, cleanup=True).close()
        else:
            data = FileBackedData.move_from(path, sha256=bytes.fromhex(digest))
            result.store.add_named_data(key, data, alignment=WEIGHT_ALIGNMENT,
                                        external_tag=external_tag)
            added.add(key)
        result.entries.append({"name": w.name, "key": key, "dtype": w.dtype,
                               "shape": list(w.shape), "nbytes": w.nbytes})
        result.digests.append(digest)
    return result
