"""The onnxruntime fallback's native plan (executor_table.h, "Native plans").

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
from dataclasses import dataclass
from typing import Sequence

from ..adapter import abi
from ..arguments import NUMPY_TO_SCALAR_TYPE
from ..native_plan import make_signature, position_check_array, retire

__all__ = ["ArgBounds", "OrtRunPlan", "binding_args", "binding_bounds"]

_INT32_MAX = 2**31 - 1


def _address(fn) -> int:
    """The C address of a ctypes function object made from a pointer."""
    return ctypes.cast(fn, ctypes.c_void_p).value or 0


@dataclass(frozen=True)
class ArgBounds:
    """The shapes one argument of a plan with bounds accepts: what check_args
    accepts for its binding (static sizes fixed, dynamic ones within the
    optimization profiles' union, or any size without one)."""

    min: tuple[int, ...]
    max: tuple[int, ...]
    element_size: int
    allocated: bool = False  # an output of dynamic shape: onnxruntime allocates it
    # An output of dynamic shape whose sizes the inputs' give (output_shapes.py):
    # per dimension (input, dimension) or a static size; the adapter binds it.
    follows: tuple | None = None


def binding_bounds(inputs, outputs, output_sources: Sequence = ()) -> list[ArgBounds] | None:
    """Bounds for a plan that serves every call check_args would accept for
    these bindings (dynamic shapes), or None when a binding leaves something
    only the executor can decide (no dtype or rank recorded, a profile of
    another rank). `output_sources`: output_shapes.output_dim_sources() per
    output; an output of dynamic shape with sources from the inputs follows
    them, any other is allocated by onnxruntime and copied."""
    bounds = []
    sources = list(output_sources) + [None] * (len(outputs) - len(output_sources))
    for k, b in enumerate(list(inputs) + list(outputs)):
        if b.dtype is None or b.shape is None:
            return None
        lo = [e if e >= 0 else 0 for e in b.shape]
        hi = [e if e >= 0 else _INT32_MAX for e in b.shape]
        if b.is_input and b.min_shape is not None and b.max_shape is not None:
            if not len(b.min_shape) == len(b.shape) == len(b.max_shape):
                return None  # check_args refuses every call: leave it the error
            lo = [max(a, p) for a, p in zip(lo, b.min_shape)]
            hi = [min(a, p) for a, p in zip(hi, b.max_shape)]
        if any(a > z or z < 0 for a, z in zip(lo, hi)):
            return None  # no shape passes: every call goes to the executor's error
        follows = None
        if not b.is_input and -1 in b.shape:
            follows = sources[k - len(inputs)]
            if follows is not None and not (len(follows) == len(b.shape) and all(
                    isinstance(f, int) or f[0] < len(inputs) for f in follows)):
                follows = None  # a size from no delegate input: onnxruntime allocates it
        bounds.append(ArgBounds(tuple(lo), tuple(min(z, _INT32_MAX) for z in hi),
                                b.dtype.itemsize, not b.is_input and -1 in b.shape
                                and follows is None, follows))
    return bounds


class OrtRunPlan:
    """One etrt_native_plan of kind ETRT_PLAN_ORT_RUN, and the memory it points to.
    `key` is signature_key() of the arguments it was built for: a caller whose
    every call misses the adapter's plan (new addresses each call, alternating
    shapes) reuses plans instead of building one per call.

    `session` may be a stateful one (onnxruntime/state.py OrtStatefulSession): the plan
    then runs the full model, the state OrtValues the session binds after the
    user's, and carries the position checks the adapter makes before each run.
    NULL entries of `bound.outputs` are outputs of dynamic shape, which the
    adapter copies out, adding the bytes to `copied_bytes`."""

    def __init__(self, session, bound, args: Sequence[abi.EtrtArg], num_args: int,
                 key: tuple, copied_bytes: ctypes.c_uint64 | None = None,
                 element_types: Sequence[int] | None = None,
                 bounds: Sequence[ArgBounds] | None = None, index_checks: Sequence = (),
                 equal_dims: Sequence[tuple[tuple[int, int], ...]] = ()):
        """`element_types` (ONNX element type per argument): the adapter binds
        any address itself (any_address), so the plan serves every call with
        these shapes, the first one included; every output must then be fixed.
        `bounds` (with element_types, one per argument): the plan serves every
        shape within them; outputs marked `allocated` are onnxruntime's (NULL
        entries in `bound.outputs`), the adapter checks and copies them.
        `index_checks` (input_checks.IndexRange): inputs whose values the
        adapter checks before each run, in the executor's words.
        `equal_dims` (with bounds; input_checks.InputChecks.equal_dims): groups
        of (input, dimension) that a call must give one size, else it goes to
        the executor's gate."""
        api = session.api
        self.key = key
        self._signature, self._shapes = make_signature(args, num_args)
        inner = getattr(session, "inner", session)  # the OrtSession: every model input's name
        inputs, outputs, num_state = bound.inputs, bound.outputs, 0
        alt_inputs = alt_outputs = swaps = None
        checks: list = []
        if inner is not session:
            inputs, outputs, alt_inputs, alt_outputs = session.plan_values(bound.inputs,
                                                                           bound.outputs)
            num_state = len(inputs) - len(bound.inputs)
            checks = session.state.position_checks()
            swaps = session.state.swaps
        self._checks, self._whats = position_check_array(checks)
        self._index_checks = (abi.EtrtIndexCheck * len(index_checks))()
        self._index_words = [(r.what().encode(), r.advice().encode()) for r in index_checks]
        for c, r, (what, advice) in zip(self._index_checks, index_checks, self._index_words):
            c.struct_size = ctypes.sizeof(abi.EtrtIndexCheck)
            c.arg_index, c.lo, c.hi, c.what, c.advice = r.input, r.lo, r.hi, what, advice
        # names, OrtValues and arrays the struct points into
        self._keep = (session, bound, inputs, outputs, alt_inputs, alt_outputs, copied_bytes,
                      swaps)
        p = self.struct = abi.EtrtNativePlan()
        p.struct_size = ctypes.sizeof(abi.EtrtNativePlan)
        p.kind = abi.ETRT_PLAN_ORT_RUN
        p.num_args = num_args
        p.signature = ctypes.cast(self._signature, ctypes.POINTER(abi.EtrtArgSignature))
        p.ort_run = _address(api.Run)
        p.ort_release_status = _address(api.ReleaseStatus)
        p.ort_error_message = _address(api.GetErrorMessage)
        p.session = inner.session.value
        p.run_options = None
        p.input_names = ctypes.cast(inner._input_names, ctypes.POINTER(ctypes.c_char_p))
        p.inputs = ctypes.cast(inputs, ctypes.POINTER(ctypes.c_void_p))
        p.num_inputs = len(inputs)
        p.output_names = ctypes.cast(inner._output_names, ctypes.POINTER(ctypes.c_char_p))
        p.outputs = ctypes.cast(outputs, ctypes.POINTER(ctypes.c_void_p))
        p.num_outputs = len(outputs)
        p.num_state_values = num_state
        p.position_checks = ctypes.cast(self._checks, ctypes.POINTER(abi.EtrtPositionCheck))
        p.num_position_checks = len(checks)
        p.ort_get_tensor_type_and_shape = _address(api.GetTensorTypeAndShape)
        p.ort_get_dimensions_count = _address(api.GetDimensionsCount)
        p.ort_get_dimensions = _address(api.GetDimensions)
        p.ort_release_tensor_type_and_shape_info = _address(api.ReleaseTensorTypeAndShapeInfo)
        p.ort_get_tensor_mutable_data = _address(api.GetTensorMutableData)
        p.ort_release_value = _address(api.ReleaseValue)
        p.index_checks = ctypes.cast(self._index_checks, ctypes.POINTER(abi.EtrtIndexCheck))
        p.num_index_checks = len(index_checks)
        if copied_bytes is not None:
            p.copied_bytes = ctypes.pointer(copied_bytes)
        if element_types is not None:
            self._element_types = (ctypes.c_int32 * num_args)(*element_types)
            p.any_address = 1
            p.ort_create_tensor = _address(api.CreateTensorWithDataAsOrtValue)
            p.ort_memory_info = api.cpu_memory.value
            p.element_types = ctypes.cast(self._element_types, ctypes.POINTER(ctypes.c_int32))
        if bounds is not None:
            self._bounds = (abi.EtrtArgBounds * num_args)()
            self._bound_arrays = []
            for entry, b in zip(self._bounds, bounds):
                lo = (ctypes.c_int32 * max(len(b.min), 1))(*b.min)
                hi = (ctypes.c_int32 * max(len(b.max), 1))(*b.max)
                self._bound_arrays.append((lo, hi))
                entry.struct_size = ctypes.sizeof(abi.EtrtArgBounds)
                entry.ndim, entry.element_size = len(b.min), b.element_size
                entry.min = ctypes.cast(lo, ctypes.POINTER(ctypes.c_int32))
                entry.max = ctypes.cast(hi, ctypes.POINTER(ctypes.c_int32))
                entry.output_rule = (abi.ETRT_OUTPUT_ALLOCATED if b.allocated
                                     else abi.ETRT_OUTPUT_FOLLOWS if b.follows is not None
                                     else abi.ETRT_OUTPUT_IN_PLACE)
                if b.follows is not None:
                    rule = (ctypes.c_int32 * max(2 * len(b.follows), 1))(*[
                        v for f in b.follows for v in ((-1, f) if isinstance(f, int) else f)])
                    self._bound_arrays.append(rule)
                    entry.follows = ctypes.cast(rule, ctypes.POINTER(ctypes.c_int32))
            p.bounds = ctypes.cast(self._bounds, ctypes.POINTER(abi.EtrtArgBounds))
            p.ort_get_tensor_element_type = _address(api.GetTensorElementType)
            pairs = [(group[0], other) for group in equal_dims for other in group[1:]]
            self._equal_dims = (abi.EtrtEqualDim * len(pairs))()
            for entry, ((arg_a, dim_a), (arg_b, dim_b)) in zip(self._equal_dims, pairs):
                entry.struct_size = ctypes.sizeof(abi.EtrtEqualDim)
                entry.arg_a, entry.dim_a, entry.arg_b, entry.dim_b = arg_a, dim_a, arg_b, dim_b
            p.equal_dims = ctypes.cast(self._equal_dims, ctypes.POINTER(abi.EtrtEqualDim))
            p.num_equal_dims = len(pairs)
        if alt_inputs is not None:  # functional states: the adapter alternates the pairs
            p.alt_inputs = ctypes.cast(alt_inputs, ctypes.POINTER(ctypes.c_void_p))
            p.alt_outputs = ctypes.cast(alt_outputs, ctypes.POINTER(ctypes.c_void_p))
            p.swaps = ctypes.pointer(swaps)

    def withdraw(self) -> None:
        """Tells the adapter not to run this plan again, and keeps its memory
        readable for the rest of the process (the adapter may still hold it)."""
        self.struct.withdrawn = 1
        retire(self)


def binding_args(bindings) -> list[abi.EtrtArg]:
    """Arguments as the bindings declare them (contiguous, host, no memory
    yet): the signature of a plan handed out at init. A dynamic size is -1
    and nbytes 0 (a plan with bounds reads neither)."""
    args = []
    for b in bindings:
        arg = abi.EtrtArg()
        ndim = len(b.shape)
        sizes = (ctypes.c_int32 * max(ndim, 1))(*b.shape)
        order = (ctypes.c_uint8 * max(ndim, 1))(*range(ndim))
        arg._keep = (sizes, order)
        arg.struct_size = ctypes.sizeof(abi.EtrtArg)
        arg.kind, arg.is_input = abi.ETRT_ARG_TENSOR, int(b.is_input)
        arg.dtype, arg.ndim, arg.nbytes = NUMPY_TO_SCALAR_TYPE[b.dtype], ndim, b.nbytes() or 0
        arg.device_type, arg.data = abi.ETRT_DEVICE_CPU, None
        arg.sizes = ctypes.cast(sizes, ctypes.POINTER(ctypes.c_int32))
        arg.dim_order = ctypes.cast(order, ctypes.POINTER(ctypes.c_uint8))
        args.append(arg)
    return args
