"""What both executors' native plans share (executor_table.h, "Native plans"):
the signature of the arguments a plan was built for, its position checks, and
the retirement of withdrawn plans. The plans themselves live beside their
executors: onnxruntime/run_plan.py (`OrtRunPlan`) and
tensorrt/cuda_graph_plan.py (`CudaGraphPlan`).
"""
from __future__ import annotations

import ctypes
from typing import Sequence

from .adapter import abi

__all__ = ["make_signature", "position_check_array", "retire", "signature_key"]

# Withdrawn plans that a delegate may still point to (only at interpreter
# exit, when executors close outside the adapter's destroy): kept readable.
_retired: list = []


def signature_key(args: Sequence[abi.EtrtArg], num_args: int) -> tuple:
    """Every field of the arguments that a plan's signature holds, as one value."""
    key = []
    for k in range(num_args):
        a = args[k]
        ndim = a.ndim
        key.append((a.kind, a.dtype, ndim, a.device_type, a.device_index, a.data, a.nbytes,
                    tuple(a.sizes[:ndim]) if ndim > 0 else (),
                    tuple(a.dim_order[:ndim]) if ndim > 0 else ()))
    return tuple(key)


def make_signature(args: Sequence[abi.EtrtArg], num_args: int) -> tuple:
    """The etrt_arg_signature array of the arguments, and the shape arrays it
    points into (keep both alive as long as the plan)."""
    signature = (abi.EtrtArgSignature * num_args)()
    shapes = []
    for k in range(num_args):
        arg, sig = args[k], signature[k]
        ndim = max(arg.ndim, 0)
        sizes = (ctypes.c_int32 * ndim)(*(arg.sizes[i] for i in range(ndim)))
        order = (ctypes.c_uint8 * ndim)(*(arg.dim_order[i] for i in range(ndim)))
        shapes.append((sizes, order))
        sig.struct_size = ctypes.sizeof(abi.EtrtArgSignature)
        sig.kind, sig.dtype, sig.ndim = arg.kind, arg.dtype, arg.ndim
        sig.device_type, sig.device_index = arg.device_type, arg.device_index
        sig.data, sig.nbytes = arg.data, arg.nbytes
        sig.sizes = ctypes.cast(sizes, ctypes.POINTER(ctypes.c_int32))
        sig.dim_order = ctypes.cast(order, ctypes.POINTER(ctypes.c_uint8))
    return signature, shapes


def position_check_array(checks: Sequence[tuple[int, int, bool, str]]) -> tuple:
    """The etrt_position_check array of ExecutorState.position_checks(), and
    the encoded descriptions it points to (keep both alive as long as the plan)."""
    array = (abi.EtrtPositionCheck * len(checks))()
    whats = [what.encode() for _, _, _, what in checks]
    for c, (arg_index, capacity, in_place, _), what in zip(array, checks, whats):
        c.struct_size = ctypes.sizeof(abi.EtrtPositionCheck)
        c.arg_index, c.capacity, c.in_place, c.what = arg_index, capacity, int(in_place), what
    return array, whats


def retire(plan) -> None:
    """Keeps a withdrawn plan's memory readable for the rest of the process."""
    _retired.append(plan)
