"""The program's named data, as the executors read it.

A blob with ``"weights_location": "named_data"`` keeps its large ONNX
initializers outside itself, in ExecuTorch's named data (the .pte's own
segment, or a .ptd passed at load), listed in ``"weights"`` as
``{name, key, dtype, shape, nbytes}``. The adapter hands init a lookup
(etrt_init_args.get_named_data); ExecuTorch maps a program loaded from a path,
so the bytes are used where they lie and never copied here. Every view is
read-only and checked against the blob's size before anyone reads it; it
stays valid until the delegate is destroyed (the adapter holds the buffers),
so an executor must drop its views in close().

``InMemoryNamedData`` serves the same lookups from Python buffers: executor
tests and tools that hold a blob and its weights without a program.
"""
from __future__ import annotations

import abc
import ctypes
import hashlib
import math
import os
import re
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..blob import Blob
from ..blob.format import WEIGHT_DTYPES, weight_nbytes
from ..blob.metadata import WeightEntry
from ..errors import NamedDataError
from .adapter import abi

# "0" skips the content check (the .ptd is already trusted, e.g. pinned by its
# hash); anything else, or unset, checks. docs/security.md gives its cost.
VERIFY_WEIGHTS_ENV = "EXECUTORCH_TENSORRT_VERIFY_WEIGHTS"
# The exporter's content keys: "etrt." + the SHA-256 of the weight's bytes.
_CONTENT_KEY = re.compile(r"etrt\.([0-9a-f]{64})")

__all__ = ["AdapterNamedData", "InMemoryNamedData", "NamedData", "WeightBuffer",
           "blob_weights", "PASS_THE_PTD"]

PASS_THE_PTD = ("pass the .ptd (Runtime.load_program(pte, data_path=...), C++ Module(pte, ptd), "
                "runner --data)")


@dataclass(frozen=True)
class WeightBuffer:
    """One weight of a blob, over the named data's bytes (no copy)."""

    name: str     # the ONNX initializer's name
    key: str      # the named-data key
    dtype: str    # blob dtype name ("float32", ...)
    shape: tuple[int, ...]
    view: memoryview  # read-only, exactly nbytes long

    @property
    def nbytes(self) -> int:
        return self.view.nbytes

    @property
    def address(self) -> int:
        """Address of the first byte (0 for an empty weight)."""
        if self.view.nbytes == 0:
            return 0
        return int(np.frombuffer(self.view, dtype=np.uint8).ctypes.data)


class NamedData(abc.ABC):
    """Looks up named-data keys; `weight` checks the size the blob records."""

    @abc.abstractmethod
    def _lookup(self, key: str) -> memoryview:
        """The bytes stored under `key` (read-only); raises NamedDataError."""

    def get(self, key: str, nbytes: int, what: str = "") -> memoryview:
        """The bytes under `key`, read-only, after checking there are exactly
        `nbytes` of them (`what` names their use in errors, e.g. "state 'k'")."""
        try:
            view = self._lookup(key)
        except NamedDataError as e:
            raise NamedDataError(f"{what}: {e}" if what else str(e)) from None
        if view.nbytes != nbytes:
            raise NamedDataError(
                f"{what + ': ' if what else ''}named data key {key!r} holds {view.nbytes} bytes, "
                f"but the blob records {nbytes}; the .ptd does not belong to this .pte (pass "
                "the one exported with it) or is damaged")
        check_content(key, view, what)
        return view

    def weight(self, entry: WeightEntry) -> WeightBuffer:
        name = entry.name
        count = math.prod(entry.shape)
        if entry.dtype not in WEIGHT_DTYPES or entry.nbytes != weight_nbytes(entry.dtype, count):
            # The blob's metadata checks this too; the executors hand nbytes to onnxruntime
            # and TensorRT as the extent they read (int4: ceil(numel / 2), packed).
            raise NamedDataError(
                f"weight {name!r}: {entry.nbytes} bytes recorded for a {entry.dtype} "
                f"tensor of shape {list(entry.shape)}; the blob is corrupt (re-export it)")
        view = self.get(entry.key, entry.nbytes,
                        f"weight {name!r} ({entry.dtype} {list(entry.shape)}) of this "
                        "TensorRT partition")
        return WeightBuffer(name, entry.key, entry.dtype, entry.shape, view)


def check_content(key: str, view: memoryview, what: str) -> None:
    """A content key ("etrt.<sha256>") must be the SHA-256 of its bytes: a
    flipped byte, or a .ptd header that moves the segments, would otherwise
    run with other weights. Keys of another form are not content keys."""
    m = _CONTENT_KEY.fullmatch(key)
    if m is None or os.environ.get(VERIFY_WEIGHTS_ENV, "").strip() == "0":
        return
    digest = hashlib.sha256(view).hexdigest()
    if digest != m.group(1):
        raise NamedDataError(
            f"{what + ': ' if what else ''}named data key {key!r} holds {view.nbytes} bytes whose SHA-256 is "
            f"{digest}: the weight's bytes are damaged (or the .ptd's header moved its "
            "segments); re-export the program, or pass the .ptd exported with this .pte "
            "unchanged")


def _readonly(address: int, nbytes: int) -> memoryview:
    if nbytes == 0:
        return memoryview(b"")
    return memoryview((ctypes.c_char * nbytes).from_address(address)).cast("B").toreadonly()


class AdapterNamedData(NamedData):
    """The adapter's lookup (etrt_init_args.get_named_data), usable during init."""

    def __init__(self, args: abi.EtrtInitArgs):
        self._fn = args.get_named_data
        self._ctx = args.named_data_ctx

    def _lookup(self, key: str) -> memoryview:
        from .adapter.loader import last_error  # the adapter recorded why

        data, nbytes = ctypes.c_void_p(), ctypes.c_uint64()
        code = self._fn(self._ctx, key.encode(), ctypes.byref(data), ctypes.byref(nbytes))
        if code != 0:
            raise NamedDataError(last_error() or f"named data key {key!r}: error 0x{code:x}")
        if nbytes.value and not data.value:
            raise NamedDataError(f"named data key {key!r}: {nbytes.value} bytes at NULL")
        return _readonly(data.value or 0, nbytes.value)


class InMemoryNamedData(NamedData):
    """Named data from Python buffers (bytes, numpy arrays, mmaps): key -> buffer.
    Keeps the buffers alive; views share their memory."""

    def __init__(self, entries: Mapping[str, object]):
        self._entries = dict(entries)

    def _lookup(self, key: str) -> memoryview:
        if key not in self._entries:
            raise NamedDataError(f"the named data has no key {key!r} "
                                 f"({len(self._entries)} keys)")
        return memoryview(self._entries[key]).cast("B").toreadonly()


def blob_weights(blob: Blob, named_data: NamedData | None) -> list[WeightBuffer]:
    """The blob's named-data weights, each checked against its recorded size;
    [] for a blob whose weights are inline."""
    weights = blob.meta.weights or ()
    if not weights:
        return []
    if named_data is None:
        first = weights[0]
        raise NamedDataError(
            f"the program's weights are in named data that was not supplied (weight "
            f"{first.name!r}, key {first.key!r}, and {len(weights) - 1} more): "
            f"{PASS_THE_PTD}")
    return [named_data.weight(entry) for entry in weights]
