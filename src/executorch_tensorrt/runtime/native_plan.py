"""Native plans of the onnxruntime fallback (executor_table.h, "Native plans").

After the executor has checked a call's arguments and bound OrtValues over
their memory, it hands the adapter everything needed to run the same call
again in C++: onnxruntime's Run, the session, the name and OrtValue arrays,
and the signature of the arguments they were bound for. The adapter then runs
identical calls without entering Python: no bytecode runs inside
Method.execute, so no other Python thread can be switched in mid-call
(docs/concurrency.md), and a call costs what Run costs.

The plan's memory lives in this object; the executor keeps it until its next
execute or close (the adapter forgets the plan before either), or retires it
for the rest of the process when it must withdraw it at interpreter exit.
"""
from __future__ import annotations

import ctypes
from typing import Sequence

from . import executor_table as abi

__all__ = ["OrtRunPlan", "signature_key"]

# Withdrawn plans that a delegate may still point to (only at interpreter
# exit, when executors close outside the adapter's destroy): kept readable.
_retired: list["OrtRunPlan"] = []


def _address(fn) -> int:
    """The C address of a ctypes function object made from a pointer."""
    return ctypes.cast(fn, ctypes.c_void_p).value or 0


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


class OrtRunPlan:
    """One etrt_native_plan of kind ETRT_PLAN_ORT_RUN, and the memory it points to.
    `key` is signature_key() of the arguments it was built for: a caller whose
    every call misses the adapter's plan (new addresses each call, alternating
    shapes) reuses plans instead of building one per call."""

    def __init__(self, session, bound, args: Sequence[abi.EtrtArg], num_args: int,
                 key: tuple):
        api = session.api
        self.key = key
        self._keep = (session, bound)  # names and OrtValues the struct points into
        self._signature = (abi.EtrtArgSignature * num_args)()
        self._shapes = []
        for k in range(num_args):
            arg, sig = args[k], self._signature[k]
            ndim = max(arg.ndim, 0)
            sizes = (ctypes.c_int32 * ndim)(*(arg.sizes[i] for i in range(ndim)))
            order = (ctypes.c_uint8 * ndim)(*(arg.dim_order[i] for i in range(ndim)))
            self._shapes.append((sizes, order))
            sig.struct_size = ctypes.sizeof(abi.EtrtArgSignature)
            sig.kind, sig.dtype, sig.ndim = arg.kind, arg.dtype, arg.ndim
            sig.device_type, sig.device_index = arg.device_type, arg.device_index
            sig.data, sig.nbytes = arg.data, arg.nbytes
            sig.sizes = ctypes.cast(sizes, ctypes.POINTER(ctypes.c_int32))
            sig.dim_order = ctypes.cast(order, ctypes.POINTER(ctypes.c_uint8))
        p = self.struct = abi.EtrtNativePlan()
        p.struct_size = ctypes.sizeof(abi.EtrtNativePlan)
        p.kind = abi.ETRT_PLAN_ORT_RUN
        p.num_args = num_args
        p.signature = ctypes.cast(self._signature, ctypes.POINTER(abi.EtrtArgSignature))
        p.ort_run = _address(api.Run)
        p.ort_release_status = _address(api.ReleaseStatus)
        p.ort_error_message = _address(api.GetErrorMessage)
        p.session = session.session.value
        p.run_options = None
        p.input_names = ctypes.cast(session._input_names, ctypes.POINTER(ctypes.c_char_p))
        p.inputs = ctypes.cast(bound.inputs, ctypes.POINTER(ctypes.c_void_p))
        p.num_inputs = len(bound.inputs)
        p.output_names = ctypes.cast(session._output_names, ctypes.POINTER(ctypes.c_char_p))
        p.outputs = ctypes.cast(bound.outputs, ctypes.POINTER(ctypes.c_void_p))
        p.num_outputs = len(bound.outputs)

    def withdraw(self) -> None:
        """Tells the adapter not to run this plan again, and keeps its memory
        readable for the rest of the process (the adapter may still hold it)."""
        self.struct.withdrawn = 1
        _retired.append(self)
