"""Delegate arguments as tensors: the one code path both executors use.

Host tensors are wrapped without copying (torch tensors over ExecuTorch's
memory); views are cached per (pointer, shape, dtype) because ExecuTorch's
memory planning keeps addresses stable between calls.
"""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

import torch

from ..blob import DTYPE_TO_SCALAR_TYPE
from . import abi
from ._native import last_error, resize_tensor

# ExecuTorch ScalarType code -> torch dtype (the codes are c10's).
SCALAR_TYPE_TO_TORCH: dict[int, torch.dtype] = {
    0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64,
    5: torch.float16, 6: torch.float32, 7: torch.float64, 11: torch.bool, 15: torch.bfloat16,
}
BLOB_DTYPE_TO_TORCH: dict[str, torch.dtype] = {
    name: SCALAR_TYPE_TO_TORCH[code] for name, code in DTYPE_TO_SCALAR_TYPE.items()
    if code in SCALAR_TYPE_TO_TORCH
}


class ArgumentError(ValueError):
    """ExecuTorch passed arguments that do not match the partition."""


@dataclass(frozen=True)
class Binding:
    name: str
    dtype: torch.dtype | None  # None: not recorded (Torch-TensorRT blobs); the engine knows
    shape: tuple[int, ...]  # -1 for a dynamic dimension
    is_input: bool
    min_shape: tuple[int, ...] | None = None  # optimization profile bounds
    max_shape: tuple[int, ...] | None = None

    @classmethod
    def from_metadata(cls, entry: dict, profile: dict | None) -> "Binding":
        recorded = entry["dtype"].removeprefix("torch.")
        dtype = BLOB_DTYPE_TO_TORCH.get(recorded) if recorded else None
        if recorded and dtype is None:
            raise ArgumentError(f"binding {entry['name']!r} has dtype {entry['dtype']!r}, "
                                "which this runtime cannot map to a tensor type")
        bounds = (tuple(profile["min"]), tuple(profile["max"])) if profile else (None, None)
        return cls(entry["name"], dtype, tuple(entry["shape"]), bool(entry["is_input"]), *bounds)


def split_bindings(metadata: dict) -> tuple[list[Binding], list[Binding]]:
    profiles = {p["name"]: p for p in metadata.get("profiles", [])}
    bindings = [Binding.from_metadata(e, profiles.get(e["name"])) for e in metadata["io_bindings"]]
    return [b for b in bindings if b.is_input], [b for b in bindings if not b.is_input]


def _dims_match(shape: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    return len(shape) == len(expected) and all(e < 0 or s == e for s, e in zip(shape, expected))


def check_input(arg: abi.EtrtArg, binding: Binding, index: int) -> tuple[int, ...]:
    """Validates one input against its binding; returns its shape."""
    if arg.kind != abi.ETRT_ARG_TENSOR:
        raise ArgumentError(f"input {index} ({binding.name}) is not a tensor (kind {arg.kind})")
    dtype = SCALAR_TYPE_TO_TORCH.get(arg.dtype)
    if binding.dtype is not None and dtype != binding.dtype:
        raise ArgumentError(f"input {index} ({binding.name}) has dtype {dtype or arg.dtype}, "
                            f"the engine expects {binding.dtype}")
    shape = arg.shape()
    if not _dims_match(shape, binding.shape):
        raise ArgumentError(f"input {index} ({binding.name}) has shape {list(shape)}, "
                            f"the engine accepts {list(binding.shape)} (-1: any size)")
    lo, hi = binding.min_shape, binding.max_shape
    if lo is not None and hi is not None and not all(
            a <= s <= b for s, a, b in zip(shape, lo, hi)):
        raise ArgumentError(f"input {index} ({binding.name}) has shape {list(shape)}, outside "
                            f"the engine's optimization profile: min {list(lo)}, max {list(hi)}")
    return shape


def resize_output(arg: abi.EtrtArg, shape: tuple[int, ...], binding: Binding) -> None:
    """Resizes an output to the shape the partition produced, unless it has it."""
    if arg.shape() == tuple(shape):
        return
    code = resize_tensor(arg, shape)
    if code != 0:
        raise ArgumentError(f"cannot resize output {binding.name!r} from {list(arg.shape())} to "
                            f"{list(shape)} (error {code:#x}: {last_error()}); the program's "
                            "memory plan holds a smaller upper bound")


def checked_nbytes(arg: abi.EtrtArg, shape: tuple[int, ...], where: str = "") -> int:
    """Bytes a tensor of `shape` and the argument's dtype needs; raises if the
    argument's buffer (`where`: e.g. "CUDA ") is smaller."""
    nbytes = math.prod(shape) * SCALAR_TYPE_TO_TORCH[arg.dtype].itemsize
    if nbytes > arg.nbytes:
        raise ArgumentError(f"tensor of shape {list(shape)} needs {nbytes} bytes, "
                            f"its {where}buffer holds {arg.nbytes}")
    return nbytes


class HostViews:
    """Cached zero-copy torch views of host argument memory."""

    def __init__(self) -> None:
        self._cache: dict[tuple, torch.Tensor] = {}

    def view(self, arg: abi.EtrtArg, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        shape = arg.shape() if shape is None else shape
        dtype = SCALAR_TYPE_TO_TORCH[arg.dtype]
        key = (arg.data, shape, dtype)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        nbytes = checked_nbytes(arg, shape)
        if nbytes == 0:
            tensor = torch.empty(shape, dtype=dtype)
        else:
            buffer = (ctypes.c_uint8 * nbytes).from_address(arg.data)
            tensor = torch.frombuffer(buffer, dtype=dtype, count=math.prod(shape)).view(shape)
        if len(self._cache) > 64:
            self._cache.clear()
        self._cache[key] = tensor
        return tensor
