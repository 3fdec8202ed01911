"""OrtValues over ExecuTorch's memory for the onnxruntime executor: the
element type each argument must have, the values made over a call's
arguments (none left allocated when one fails), and the set of them the
executor keeps per address set and input shapes (executor.py)."""
from __future__ import annotations

import ctypes

from ...dtypes import DTYPES
from ...errors import ArgumentError
from ..adapter import abi
from ..arguments import SCALAR_TYPE_TO_NUMPY, checked_nbytes, dtype_name
from .capi import ELEMENT_TYPE_NAMES

__all__ = ["ORT_ELEMENT_TYPES", "BoundValues", "EMPTY", "element_type", "make_values"]

# numpy dtype -> ONNXTensorElementDataType (dtypes.py's rows that numpy has)
ORT_ELEMENT_TYPES = {SCALAR_TYPE_TO_NUMPY[d.scalar_type]: d.onnxruntime for d in DTYPES
                     if d.numpy and d.onnxruntime is not None}

EMPTY = ctypes.c_uint64(0)  # a valid address for empty tensors (onnxruntime refuses NULL)


def element_type(arg: abi.EtrtArg, expected: int, what: str) -> int:
    """`expected` (an ONNX element type) if the argument's dtype is it, else
    the error naming both."""
    dtype = SCALAR_TYPE_TO_NUMPY.get(arg.dtype)
    if ORT_ELEMENT_TYPES.get(dtype) != expected:
        got = dtype_name(dtype) if dtype is not None else arg.dtype
        raise ArgumentError(
            f"{what} has dtype {got}; the embedded ONNX model takes "
            f"{ELEMENT_TYPE_NAMES.get(expected, expected)} there")
    return expected


def make_values(api, items) -> tuple[list, list]:
    """One OrtValue per (arg, shape, element type, name) over the argument's
    memory (its dtype and bytes checked), and the ones made for them, which
    the caller releases; none is left allocated when one fails."""
    owned: list = []
    try:
        for arg, shape, expected, what in items:
            element = element_type(arg, expected, what)
            nbytes = checked_nbytes(arg, shape)
            owned.append(api.tensor(arg.data or ctypes.addressof(EMPTY), nbytes, shape, element))
        return list(owned), owned
    except BaseException:
        for value in owned:
            api.ReleaseValue(value)
        raise


class BoundValues:
    """OrtValues over one set of ExecuTorch addresses and input shapes."""

    def __init__(self, api, inputs: ctypes.Array, outputs: ctypes.Array, owned: list):
        self.api, self.inputs, self.outputs, self.owned = api, inputs, outputs, owned
        self.plan = None  # the last native plan (OrtRunPlan) over these values
        # Outputs of dynamic shape bound to ExecuTorch's memory (output_shapes.py):
        # their shapes for these inputs, None while onnxruntime allocates them.
        self.output_shapes: tuple[tuple[int, ...], ...] | None = None

    def release(self) -> None:
        self.plan = None
        for value in self.owned:
            self.api.ReleaseValue(value)
        self.owned = []
