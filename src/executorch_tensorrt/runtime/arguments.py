"""Delegate arguments: the bindings a blob declares, the checks every call's
arguments pass before any executor reads or writes their memory, and the
one dtype table (numpy dtypes: the runtime never imports torch, so a C++
process that embeds it starts fast; docs/cpp.md).

`check_args` is the one gate: a program is untrusted input, and ExecuTorch
passes whatever tensors the program's plan says. An output smaller than its
binding, or of another dtype, would otherwise let onnxruntime or TensorRT
write past ExecuTorch's buffer.
"""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Sequence

import ml_dtypes  # bfloat16 for numpy; onnx, which the runtime imports, depends on it
import numpy as np

from ..blob.metadata import Binding as BlobBinding, BlobMetadata, Profile
from ..dtypes import DTYPES
from ..errors import ArgumentError, InvalidProgramError
from .adapter import abi
from .adapter.loader import last_error, resize_tensor
from .input_checks import InputChecks

__all__ = ["ArgumentError", "Binding", "CheckedCall", "SCALAR_TYPE_TO_NUMPY", "check_args", "checked_nbytes",
           "dtype_name", "host_array", "resize_output", "split_bindings"]

# Views of the one dtype table (dtypes.py), as numpy dtypes; bfloat16 and
# float8_e4m3fn are ml_dtypes'.
def _np(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name, None) or name)


SCALAR_TYPE_TO_NUMPY: dict[int, np.dtype] = {d.scalar_type: _np(d.numpy) for d in DTYPES if d.numpy}
NUMPY_TO_SCALAR_TYPE: dict[np.dtype, int] = {t: code for code, t in SCALAR_TYPE_TO_NUMPY.items()}
BLOB_DTYPE_TO_NUMPY: dict[str, np.dtype] = {
    d.blob_name: _np(d.numpy) for d in DTYPES if d.blob_name and d.numpy}


def dtype_name(dtype: np.dtype | None) -> str:
    """A dtype as ExecuTorch's (PyTorch's) users know it, for messages: "torch.float32"."""
    return f"torch.{dtype.name}" if dtype is not None else "None"
_KINDS = {abi.ETRT_ARG_TENSOR: "tensor", abi.ETRT_ARG_INT: "int", abi.ETRT_ARG_DOUBLE: "double",
          abi.ETRT_ARG_BOOL: "bool", abi.ETRT_ARG_NONE: "none"}


@dataclass(frozen=True)
class Binding:
    name: str
    dtype: np.dtype | None  # None: not recorded (Torch-TensorRT blobs); the engine knows
    shape: tuple[int, ...] | None  # -1 for a dynamic dimension; None: not recorded
    is_input: bool
    min_shape: tuple[int, ...] | None = None  # bounds of the optimization profiles' union
    max_shape: tuple[int, ...] | None = None
    # (min, max) in each optimization profile, in engine order, when there are several
    profile_bounds: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = ()

    @classmethod
    def from_metadata(cls, entry: BlobBinding, profiles: list[Profile]) -> "Binding":
        """`profiles`: this input's entry in each optimization profile (none
        for an output or a static input)."""
        recorded = entry.dtype.removeprefix("torch.")
        dtype = BLOB_DTYPE_TO_NUMPY.get(recorded) if recorded else None
        if recorded and dtype is None:
            raise InvalidProgramError(f"binding {entry.name!r} has dtype {entry.dtype!r}, "
                                      "which this runtime cannot map to a tensor type")
        # Torch-TensorRT records dtype "" and shape [] for bindings it leaves to the engine.
        shape = None if not recorded and not entry.shape else entry.shape
        each = tuple((p.min, p.max) for p in profiles)
        # The union's bounds: per dimension, the smallest min and the largest max.
        bounds = ((tuple(map(min, zip(*(lo for lo, _ in each)))),
                   tuple(map(max, zip(*(hi for _, hi in each))))) if each else (None, None))
        return cls(entry.name, dtype, shape, entry.is_input, *bounds,
                   each if len(each) > 1 else ())

    def nbytes(self) -> int | None:
        """Bytes of a tensor of this binding, when dtype and shape are static."""
        if self.dtype is None or self.shape is None or any(d < 0 for d in self.shape):
            return None
        return math.prod(self.shape) * self.dtype.itemsize


def split_bindings(metadata: BlobMetadata | dict) -> tuple[list[Binding], list[Binding]]:
    """The blob's inputs and outputs, each with its optimization profiles' bounds."""
    meta = BlobMetadata.of(metadata)
    per_input: dict[str, list[Profile]] = {}
    for profile in meta.engine_profiles:
        for p in profile:
            per_input.setdefault(p.name, []).append(p)
    bindings = [Binding.from_metadata(e, per_input.get(e.name, [])) for e in meta.io_bindings]
    return [b for b in bindings if b.is_input], [b for b in bindings if not b.is_input]


def dim_order(arg: abi.EtrtArg) -> tuple[int, ...] | None:
    """The argument's dim order (memory order of its dimensions), None if absent."""
    if not arg.ndim:
        return ()
    return tuple(arg.dim_order[i] for i in range(arg.ndim)) if arg.dim_order else None


def _check_one(arg: abi.EtrtArg, binding: Binding, what: str,
               permuted_inputs: bool) -> tuple[int, ...]:
    """Checks one argument against its binding; returns its shape. `what` names it."""
    if arg.kind != abi.ETRT_ARG_TENSOR:
        raise ArgumentError(f"{what} is a {_KINDS.get(arg.kind, f'kind {arg.kind}')}, "
                            "the partition expects a tensor")
    if bool(arg.is_input) != binding.is_input:
        raise ArgumentError(f"{what} is passed as an {'input' if arg.is_input else 'output'}, "
                            f"the partition declares it an {'input' if binding.is_input else 'output'}")
    dtype = SCALAR_TYPE_TO_NUMPY.get(arg.dtype)
    if dtype is None or (binding.dtype is not None and dtype != binding.dtype):
        got = dtype_name(dtype) if dtype is not None else f"code {arg.dtype}"
        want = dtype_name(binding.dtype) if binding.dtype is not None else "a supported dtype"
        raise ArgumentError(f"{what} has dtype {got}, the partition expects {want}")
    if arg.ndim < 0 or (arg.ndim and not arg.sizes):
        raise ArgumentError(f"{what} has no valid sizes (ndim {arg.ndim})")
    shape = arg.shape()
    expected = binding.shape
    if expected is not None:
        if len(shape) != len(expected):
            raise ArgumentError(f"{what} has rank {len(shape)} (shape {list(shape)}), the "
                                f"partition expects rank {len(expected)}: {list(expected)}")
        if any(s < 0 or (e >= 0 and s != e) for s, e in zip(shape, expected)):
            raise ArgumentError(f"{what} has shape {list(shape)}, the partition expects "
                                f"{list(expected)} (-1: any size)")
    elif any(s < 0 for s in shape):
        raise ArgumentError(f"{what} has a negative size: {list(shape)}")
    order = dim_order(arg)
    if order != tuple(range(arg.ndim)):
        # A permuted input is copied into a contiguous one by executors that
        # can (permuted_inputs); an output is always written contiguous.
        if order is None or sorted(order) != list(range(arg.ndim)) or not (
                binding.is_input and permuted_inputs):
            raise ArgumentError(
                f"{what} has dim order {list(order) if order is not None else None}, the "
                f"partition {'reads' if binding.is_input else 'writes'} contiguous tensors only "
                f"(dim order {list(range(arg.ndim))}); export the program with contiguous "
                "delegate inputs and outputs")
    lo, hi = binding.min_shape, binding.max_shape
    if binding.is_input and lo is not None and hi is not None and not (
            len(lo) == len(shape) == len(hi) and all(a <= s <= b for s, a, b in zip(shape, lo, hi))):
        if binding.profile_bounds:
            each = "; ".join(f"profile {k}: min {list(a)}, max {list(b)}"
                             for k, (a, b) in enumerate(binding.profile_bounds))
            raise ArgumentError(f"{what} has shape {list(shape)}, outside every optimization "
                                f"profile of the engine ({each})")
        raise ArgumentError(f"{what} has shape {list(shape)}, outside the engine's optimization "
                            f"profile: min {list(lo)}, max {list(hi)}")
    needed = math.prod(shape) * dtype.itemsize
    static = binding.nbytes()
    if static is not None:  # an output is written at its binding's size, whatever it says now
        needed = max(needed, static)
    if needed > arg.nbytes:
        raise ArgumentError(f"{what} needs {needed} bytes ({dtype_name(dtype)}, shape "
                            f"{list(expected if static is not None else shape)}), its buffer "
                            f"holds {arg.nbytes}")
    if needed and not arg.data:
        if arg.device_type == abi.ETRT_DEVICE_CPU:
            raise ArgumentError(f"{what} has no memory (a null data pointer)")
        raise ArgumentError(
            f"{what} is a device-resident {'input' if binding.is_input else 'output'} with no "
            "memory: ExecuTorch plans none for a device-resident program's inputs and outputs, "
            "so the caller must pass CUDA buffers (set_input with a CUDA tensor, "
            "set_output_data_ptr for outputs)")
    if arg.device_type not in (abi.ETRT_DEVICE_CPU, abi.ETRT_DEVICE_CUDA):
        raise ArgumentError(f"{what} is on device type {arg.device_type}, neither CPU nor CUDA")
    return shape


@dataclass(frozen=True)
class CheckedCall:
    """What check_args found for one call's inputs, in input order: each one's
    shape, byte size (of that shape, within the buffer) and dim order, and
    whether it is permuted (not contiguous). Executors read these instead of
    re-deriving them from the arguments."""

    shapes: tuple[tuple[int, ...], ...]
    nbytes: tuple[int, ...]
    dim_orders: tuple[tuple[int, ...], ...]
    permuted: tuple[bool, ...]

    @property
    def any_permuted(self) -> bool:
        return any(self.permuted)


def _signature(arg: abi.EtrtArg) -> tuple:
    """Every field the checks read, as one comparable value."""
    ndim = arg.ndim
    return (arg.kind, arg.is_input, arg.dtype, ndim, arg.nbytes, arg.device_type, not arg.data,
            tuple(arg.sizes[:ndim]) if ndim > 0 and arg.sizes else None,
            tuple(arg.dim_order[:ndim]) if ndim > 0 and arg.dim_order else None)


# (id(binding), signature) -> (binding, shape, nbytes, dim order) of arguments
# that passed: the same fields pass again, so a steady call pays for reading
# them only.
_passed: dict[tuple, tuple[Binding, tuple[int, ...], int, tuple[int, ...]]] = {}


def check_args(args: Sequence[abi.EtrtArg], num_args: int, inputs: list[Binding],
               outputs: list[Binding], *, permuted_inputs: bool = False,
               checks: InputChecks | None = None, read_device=None) -> CheckedCall:
    """Checks every argument of one call (count, kind, direction, dtype, rank,
    shape, dim order, byte capacity, memory) against the partition's bindings
    before anything touches their memory. Returns the inputs' shapes.
    `permuted_inputs`: the executor copies inputs of another dim order into
    contiguous memory (see permuted_to_contiguous), so they pass. The one
    gate: executors take the inputs' shapes, sizes and dim orders from its
    CheckedCall. `checks`: what eager would refuse (input_checks.py), on every
    call; `read_device(arg, shape)` copies a device-resident input's bytes to the
    host (an input it cannot read makes the call fail, never pass unchecked)."""
    n_in = len(inputs)
    if num_args != n_in + len(outputs):
        raise ArgumentError(f"the delegate call passes {num_args} arguments, the partition has "
                            f"{n_in} inputs and {len(outputs)} outputs")
    found = []
    for k, binding in enumerate(inputs + outputs):
        arg = args[k]
        key = (id(binding), permuted_inputs, _signature(arg))
        hit = _passed.get(key)
        if hit is None or hit[0] is not binding:
            what = f"input {k}" if k < n_in else f"output {k - n_in}"
            shape = _check_one(arg, binding, f"{what} ({binding.name!r})", permuted_inputs)
            hit = (binding, shape, math.prod(shape) * SCALAR_TYPE_TO_NUMPY[arg.dtype].itemsize,
                   dim_order(arg))
            if len(_passed) > 256:
                _passed.clear()
            _passed[key] = hit
        if k < n_in:
            found.append(hit)
    shapes = [h[1] for h in found]
    if checks:
        checks.check_shapes(shapes)
        checks.check_values(shapes, lambda i, shape: _input_values(args[i], shape, read_device))
    return CheckedCall(tuple(shapes), tuple(h[2] for h in found),
                       tuple(h[3] for h in found),
                       tuple(h[3] != tuple(range(len(h[1]))) for h in found))


def _input_values(arg: abi.EtrtArg, shape: tuple[int, ...], read_device) -> np.ndarray:
    """A checked input's values, contiguous on the host (a copy only where needed)."""
    memory = None
    if arg.device_type != abi.ETRT_DEVICE_CPU:
        if read_device is None:
            raise ArgumentError("a device-resident input with recorded value checks reached an "
                                "executor that cannot read device memory")
        memory = read_device(arg, shape)
    if dim_order(arg) != tuple(range(len(shape))):  # checked: a permutation
        return permuted_to_contiguous(arg, shape, memory)
    return memory if memory is not None else host_array(arg.data, shape,
                                                         SCALAR_TYPE_TO_NUMPY[arg.dtype])


def host_array(address: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A zero-copy array over host memory at `address` (checked by the caller)."""
    count = math.prod(shape)
    if count == 0:
        return np.empty(shape, dtype=dtype)
    buffer = (ctypes.c_uint8 * (count * dtype.itemsize)).from_address(address)
    return np.frombuffer(buffer, dtype=dtype, count=count).reshape(shape)


def permuted_to_contiguous(arg: abi.EtrtArg, shape: tuple[int, ...],
                           memory: np.ndarray | None = None) -> np.ndarray:
    """A contiguous copy of an input whose memory is in another dim order
    (e.g. [1, 0] or channels-last [0, 2, 3, 1]), read from the argument's host
    memory or from `memory` (its bytes copied from the device); checked by
    check_args first."""
    order = dim_order(arg)
    physical = tuple(shape[d] for d in order)
    dtype = SCALAR_TYPE_TO_NUMPY[arg.dtype]
    if math.prod(shape) == 0:
        return np.empty(shape, dtype=dtype)
    if memory is None:
        memory = host_array(arg.data, physical, dtype)
    inverse = sorted(range(len(order)), key=order.__getitem__)
    return np.ascontiguousarray(memory.reshape(physical).transpose(inverse))


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
    nbytes = math.prod(shape) * SCALAR_TYPE_TO_NUMPY[arg.dtype].itemsize
    if nbytes > arg.nbytes:
        raise ArgumentError(f"tensor of shape {list(shape)} needs {nbytes} bytes, "
                            f"its {where}buffer holds {arg.nbytes}")
    return nbytes
