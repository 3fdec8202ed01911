"""ctypes mirror of ``native/include/executorch_tensorrt/executor_table.h``.

The executor table is the C ABI between the native adapter
(``libexecutorch_backend_tensorrt.so``) and the executors. Every layout here
must match the header exactly; ``tests/runtime/adapter/test_abi.py`` compiles the real header
and compares sizes and offsets field by field.

This module imports nothing but ctypes, so tooling can use it without loading
the adapter.
"""

from __future__ import annotations

import ctypes

__all__ = [
    "ETRT_EXECUTOR_ABI_VERSION",
    "ETRT_ARG_TENSOR",
    "ETRT_ARG_INT",
    "ETRT_ARG_DOUBLE",
    "ETRT_ARG_BOOL",
    "ETRT_ARG_NONE",
    "ETRT_DEVICE_CPU",
    "ETRT_DEVICE_CUDA",
    "EtrtArg",
    "EtrtCompileSpec",
    "EtrtInitArgs",
    "GetNamedDataFn",
    "EtrtExecutorTable",
    "ETRT_PLAN_ORT_RUN",
    "ETRT_PLAN_CUDA_GRAPH",
    "EtrtArgSignature",
    "EtrtStagedCopy",
    "EtrtCudaGraphPlan",
    "EtrtPositionCheck",
    "EtrtIndexCheck",
    "ETRT_OUTPUT_IN_PLACE",
    "ETRT_OUTPUT_ALLOCATED",
    "ETRT_OUTPUT_FOLLOWS",
    "EtrtArgBounds",
    "EtrtEqualDim",
    "EtrtNativePlan",
    "NativePlanFn",
    "IsAvailableFn",
    "InitFn",
    "ExecuteFn",
    "DestroyFn",
    "make_table",
]

ETRT_EXECUTOR_ABI_VERSION = 2  # 2: equal_dims in plans with bounds (executor_table.h)

# enum etrt_arg_kind
ETRT_ARG_TENSOR = 0
ETRT_ARG_INT = 1
ETRT_ARG_DOUBLE = 2
ETRT_ARG_BOOL = 3
ETRT_ARG_NONE = 4

# enum etrt_device_type
ETRT_DEVICE_CPU = 0
ETRT_DEVICE_CUDA = 1

# enum etrt_plan_kind
ETRT_PLAN_ORT_RUN = 1
ETRT_PLAN_CUDA_GRAPH = 2

# enum etrt_output_rule
ETRT_OUTPUT_IN_PLACE = 0
ETRT_OUTPUT_ALLOCATED = 1
ETRT_OUTPUT_FOLLOWS = 2


class EtrtArg(ctypes.Structure):
    """``etrt_arg``: one delegate argument (input or output)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("kind", ctypes.c_int32),
        ("is_input", ctypes.c_int32),
        ("dtype", ctypes.c_int32),  # ExecuTorch ScalarType code
        ("data", ctypes.c_void_p),
        ("nbytes", ctypes.c_uint64),
        ("ndim", ctypes.c_int32),
        ("device_type", ctypes.c_int32),
        ("device_index", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
        ("sizes", ctypes.POINTER(ctypes.c_int32)),  # live view, ndim entries
        ("dim_order", ctypes.POINTER(ctypes.c_uint8)),
        ("int_value", ctypes.c_int64),
        ("double_value", ctypes.c_double),
        ("tensor", ctypes.c_void_p),  # opaque: pass to etrt_resize_tensor
    ]

    def shape(self) -> tuple[int, ...]:
        """The tensor's current sizes as a tuple (reads the live view)."""
        return tuple(self.sizes[i] for i in range(self.ndim))


class EtrtCompileSpec(ctypes.Structure):
    """``etrt_compile_spec``: one compile spec as the program stores it."""

    _fields_ = [
        ("key", ctypes.c_char_p),
        ("value", ctypes.c_void_p),
        ("nbytes", ctypes.c_uint64),
    ]

    def value_bytes(self) -> bytes:
        if not self.value or not self.nbytes:
            return b""
        return ctypes.string_at(self.value, self.nbytes)


# etrt_get_named_data_fn(ctx, key, &data, &nbytes) -> Error code. CFUNCTYPE:
# calling it from Python releases the GIL for the lookup, which is harmless
# (init runs it on ExecuTorch's thread, which the cause is recorded for).
GetNamedDataFn = ctypes.CFUNCTYPE(
    ctypes.c_int32, ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
    ctypes.POINTER(ctypes.c_uint64))


class EtrtInitArgs(ctypes.Structure):
    """``etrt_init_args``: everything an executor's init receives."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("blob", ctypes.c_void_p),  # valid during init only: copy what you keep
        ("blob_size", ctypes.c_uint64),
        ("compile_specs", ctypes.POINTER(EtrtCompileSpec)),
        ("num_compile_specs", ctypes.c_uint64),
        ("method_name", ctypes.c_char_p),  # may be None
        ("fallback", ctypes.c_char_p),  # load-time option "fallback", or None
        # Appended: present only when struct_size covers them (has_named_data).
        ("named_data_ctx", ctypes.c_void_p),  # valid during init only
        ("get_named_data", GetNamedDataFn),
        # Appended for the GPU runtime: read only when struct_size covers it.
        ("device", ctypes.c_char_p),  # load-time option "device", or None
    ]

    def has_named_data(self) -> bool:
        """Whether the adapter that filled this struct passes named data."""
        end = EtrtInitArgs.get_named_data.offset + ctypes.sizeof(GetNamedDataFn)
        return self.struct_size >= end and bool(self.get_named_data)

    def device_option(self) -> str | None:
        """The load-time backend option "device", None when absent (or when an
        older adapter passed a shorter struct)."""
        if self.struct_size < EtrtInitArgs.device.offset + ctypes.sizeof(ctypes.c_char_p):
            return None
        return self.device.decode() if self.device else None

    def blob_bytes(self) -> bytes:
        return ctypes.string_at(self.blob, self.blob_size) if self.blob_size else b""

    def compile_spec_dict(self) -> dict[str, bytes]:
        return {
            self.compile_specs[i].key.decode(): self.compile_specs[i].value_bytes()
            for i in range(self.num_compile_specs)
        }


class EtrtArgSignature(ctypes.Structure):
    """``etrt_arg_signature``: one argument as a native plan was bound for it."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("kind", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("device_type", ctypes.c_int32),
        ("device_index", ctypes.c_int32),
        ("data", ctypes.c_void_p),
        ("nbytes", ctypes.c_uint64),
        ("sizes", ctypes.POINTER(ctypes.c_int32)),
        ("dim_order", ctypes.POINTER(ctypes.c_uint8)),
    ]


class EtrtPositionCheck(ctypes.Structure):
    """``etrt_position_check``: one cache whose write positions a delegate
    input holds; the adapter checks them before running a plan."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("in_place", ctypes.c_int32),
        ("arg_index", ctypes.c_uint64),
        ("capacity", ctypes.c_int64),
        ("what", ctypes.c_char_p),
    ]


class EtrtIndexCheck(ctypes.Structure):
    """``etrt_index_check``: one integer input whose values the adapter checks
    against [lo, hi) before running a plan (runtime/input_checks.py)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("reserved0", ctypes.c_int32),
        ("arg_index", ctypes.c_uint64),
        ("lo", ctypes.c_int64),
        ("hi", ctypes.c_int64),
        ("what", ctypes.c_char_p),
        ("advice", ctypes.c_char_p),
    ]


class EtrtStagedCopy(ctypes.Structure):
    """``etrt_staged_copy``: one host argument's copy through its staging buffer."""

    _fields_ = [
        ("arg_index", ctypes.c_uint64),
        ("device", ctypes.c_uint64),
        ("nbytes", ctypes.c_uint64),
    ]


class EtrtCudaGraphPlan(ctypes.Structure):
    """``etrt_cuda_graph_plan``: the TensorRT executor's captured enqueue, its
    streams, events and staging copies (executor_table.h says the run order)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("device_index", ctypes.c_int32),
        ("context", ctypes.c_uint64),
        ("graph_exec", ctypes.c_uint64),
        ("stream", ctypes.c_uint64),
        ("caller_stream", ctypes.c_uint64),
        ("ready_event", ctypes.c_uint64),
        ("done_event", ctypes.c_uint64),
        ("staged_inputs", ctypes.POINTER(EtrtStagedCopy)),
        ("num_staged_inputs", ctypes.c_uint64),
        ("staged_outputs", ctypes.POINTER(EtrtStagedCopy)),
        ("num_staged_outputs", ctypes.c_uint64),
        ("epoch", ctypes.POINTER(ctypes.c_uint64)),
        ("epoch_at_plan", ctypes.c_uint64),
        ("launches", ctypes.POINTER(ctypes.c_uint64)),
        # appended: stateful partitions
        ("states", ctypes.POINTER(EtrtStagedCopy)),
        ("num_states", ctypes.c_uint64),
        ("state_epoch", ctypes.POINTER(ctypes.c_uint64)),
        ("state_epoch_at_plan", ctypes.c_uint64),
    ]


class EtrtArgBounds(ctypes.Structure):
    """``etrt_arg_bounds``: the shapes one argument of a plan with bounds
    accepts (per-dimension min and max), its element size, and for an output
    whether it is bound in place or allocated by onnxruntime."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("ndim", ctypes.c_int32),
        ("min", ctypes.POINTER(ctypes.c_int32)),
        ("max", ctypes.POINTER(ctypes.c_int32)),
        ("element_size", ctypes.c_uint64),
        ("output_rule", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
        ("follows", ctypes.POINTER(ctypes.c_int32)),  # ETRT_OUTPUT_FOLLOWS: 2 per dimension
    ]


class EtrtEqualDim(ctypes.Structure):
    """``etrt_equal_dim``: two delegate arguments' dimensions that a call must
    give one size (a plan with bounds; runtime/input_checks.py equal_dims)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("dim_a", ctypes.c_int32),
        ("arg_a", ctypes.c_uint64),
        ("arg_b", ctypes.c_uint64),
        ("dim_b", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
    ]


class EtrtNativePlan(ctypes.Structure):
    """``etrt_native_plan``: how the adapter runs an identical call without
    the executor. Its memory (and every array it points to) is the
    executor's; the header's "Lifetime" rule says until when it must stay."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("kind", ctypes.c_int32),  # etrt_plan_kind
        ("withdrawn", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
        ("num_args", ctypes.c_uint64),
        ("signature", ctypes.POINTER(EtrtArgSignature)),
        ("ort_run", ctypes.c_void_p),
        ("ort_release_status", ctypes.c_void_p),
        ("ort_error_message", ctypes.c_void_p),
        ("session", ctypes.c_void_p),
        ("run_options", ctypes.c_void_p),
        ("input_names", ctypes.POINTER(ctypes.c_char_p)),
        ("inputs", ctypes.POINTER(ctypes.c_void_p)),
        ("num_inputs", ctypes.c_uint64),
        ("output_names", ctypes.POINTER(ctypes.c_char_p)),
        ("outputs", ctypes.POINTER(ctypes.c_void_p)),
        ("num_outputs", ctypes.c_uint64),
        # Appended (read by the adapter when struct_size covers them):
        # state values after the delegate's inputs/outputs, position checks,
        # and what copying out an output of dynamic shape (a NULL entry) needs.
        ("num_state_values", ctypes.c_uint64),
        ("position_checks", ctypes.POINTER(EtrtPositionCheck)),
        ("num_position_checks", ctypes.c_uint64),
        ("ort_get_tensor_type_and_shape", ctypes.c_void_p),
        ("ort_get_dimensions_count", ctypes.c_void_p),
        ("ort_get_dimensions", ctypes.c_void_p),
        ("ort_release_tensor_type_and_shape_info", ctypes.c_void_p),
        ("ort_get_tensor_mutable_data", ctypes.c_void_p),
        ("ort_release_value", ctypes.c_void_p),
        ("copied_bytes", ctypes.POINTER(ctypes.c_uint64)),
        ("alt_inputs", ctypes.POINTER(ctypes.c_void_p)),
        ("alt_outputs", ctypes.POINTER(ctypes.c_void_p)),
        ("swaps", ctypes.POINTER(ctypes.c_uint64)),
        # Appended: ETRT_PLAN_CUDA_GRAPH's own fields.
        ("cuda_graph", ctypes.POINTER(EtrtCudaGraphPlan)),
        # Appended: the adapter binds any address itself.
        ("any_address", ctypes.c_int32),
        ("reserved1", ctypes.c_int32),
        ("ort_create_tensor", ctypes.c_void_p),
        ("ort_memory_info", ctypes.c_void_p),
        ("element_types", ctypes.POINTER(ctypes.c_int32)),
        # Appended: value checks of integer index inputs.
        ("index_checks", ctypes.POINTER(EtrtIndexCheck)),
        ("num_index_checks", ctypes.c_uint64),
        # Appended: dynamic shapes within bounds.
        ("bounds", ctypes.POINTER(EtrtArgBounds)),
        ("ort_get_tensor_element_type", ctypes.c_void_p),
        # Appended (abi_version 2): equal dimensions under bounds.
        ("equal_dims", ctypes.POINTER(EtrtEqualDim)),
        ("num_equal_dims", ctypes.c_uint64),
    ]


# Function pointer types of the table. CFUNCTYPE (not PYFUNCTYPE): the
# callbacks are entered from C, and ctypes takes the GIL itself on entry,
# whichever thread ExecuTorch calls from.
IsAvailableFn = ctypes.CFUNCTYPE(ctypes.c_int32)
InitFn = ctypes.CFUNCTYPE(
    ctypes.c_int32,
    ctypes.POINTER(EtrtInitArgs),
    ctypes.POINTER(ctypes.c_uint64),
    ctypes.POINTER(ctypes.c_uint32),
    ctypes.POINTER(ctypes.c_uint32),
)
ExecuteFn = ctypes.CFUNCTYPE(
    ctypes.c_int32, ctypes.c_uint64, ctypes.POINTER(EtrtArg), ctypes.c_uint64
)
DestroyFn = ctypes.CFUNCTYPE(None, ctypes.c_uint64)
NativePlanFn = ctypes.CFUNCTYPE(
    ctypes.c_int32, ctypes.c_uint64, ctypes.POINTER(ctypes.POINTER(EtrtNativePlan))
)


class EtrtExecutorTable(ctypes.Structure):
    """``etrt_executor_table``. Keep this object and its callbacks alive for
    as long as it is installed: ctypes frees a CFUNCTYPE trampoline together
    with its Python object."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("abi_version", ctypes.c_uint32),
        ("is_available", IsAvailableFn),
        ("init", InitFn),
        ("execute", ExecuteFn),
        ("destroy", DestroyFn),
        ("native_plan", NativePlanFn),  # optional (appended): NULL means no plans
    ]


def make_table(is_available, init, execute, destroy, native_plan=None) -> EtrtExecutorTable:
    """Builds a table from four or five Python callables (wrapped in the
    CFUNCTYPEs above; native_plan None leaves the slot NULL). The returned struct keeps references to the wrappers in
    ``_callbacks`` so they live exactly as long as the struct does.

    The callables must never raise: an exception in a ctypes callback is
    printed and swallowed, and the adapter then sees an unspecified return
    value. Catch everything, record it with ``set_last_error`` and return an
    ExecuTorch Error code."""
    callbacks = (
        IsAvailableFn(is_available),
        InitFn(init),
        ExecuteFn(execute),
        DestroyFn(destroy),
        NativePlanFn(native_plan) if native_plan is not None else NativePlanFn(),
    )
    table = EtrtExecutorTable(
        ctypes.sizeof(EtrtExecutorTable), ETRT_EXECUTOR_ABI_VERSION, *callbacks
    )
    table._callbacks = callbacks  # type: ignore[attr-defined]
    return table
