"""Runs a partition's TensorRT engine on an NVIDIA GPU.

No machine this project is tested on can execute a TensorRT engine, so this
stays thin: the CUDA driver is asked first, an engine from another TensorRT
or for another GPU is rebuilt from the embedded ONNX (portability.py)
or refused with the real cause, and argument handling is shared with the
onnxruntime executor (arguments.py).
"""
from __future__ import annotations

import ctypes
import dataclasses
from typing import Callable, Sequence

from ...blob import Blob
from ...errors import (
    ArgumentError,
    EngineUnavailable,
    InvalidProgramError,
    RebuildImpossible,
    TensorRTNotInstalledError,
)
from ...tensorrt.flavor import collecting_logger, load_tensorrt
from ..adapter import abi
from .. import profiling
from ...dtypes import DTYPES, tensorrt_dtype
from ..arguments import SCALAR_TYPE_TO_NUMPY, Binding, dtype_name, split_bindings
from ..cuda.device import chosen_device
from .cuda_graph_plan import CudaGraphPlan
from ..cuda.objects import device_capability as _capability, device_name, make_current
from ..cuda.objects import primary_context
from .rtx_runtime_cache import KernelCache
from .portability import engine_at_load
from .refit import refit_engine
from ..executor import Executor, native_plans_enabled
from ..input_checks import InputChecks
from ..native_plan import signature_key
from ..named_data import NamedData, WeightBuffer, blob_weights
from ..onnx_safety import self_contained_onnx
from .optimization_profiles import check_engine_profiles, engine_profile_choice, profile_choice
from ..state import aliased_pairs, state_specs
from .device_state import DeviceState
from .context import BoundContext, create_context
from .layer_timings import attach_layer_timings

__all__ = ["BoundContext", "EngineUnavailable", "TensorRTExecutor"]  # BoundContext: context.py


def device_capability(device: int) -> str:
    major, minor = _capability(device)
    return f"SM{major}{minor}"


def engine_for_this_gpu(blob: Blob, trt, device: int,
                        weights: Callable[[], Sequence[WeightBuffer]] = tuple) -> bytes:
    """The blob's engine, or one (re)built from its ONNX (and the named-data
    weights `weights()` returns) for this TensorRT and GPU: always for
    "engine": "none"."""
    here = device_capability(device)
    try:
        return engine_at_load(blob, trt, here, weights).engine  # blob, prepared/cached, or built
    except RebuildImpossible as e:
        raise EngineUnavailable(f"{_why_rebuilt(blob, trt, device, here)}; rebuilding it from "
                                f"the embedded ONNX failed: {e}") from None


def _why_rebuilt(blob: Blob, trt, device: int, here: str) -> str:
    if blob.engine_kind == "none":
        return (f"the program ships no engine for this partition (it is built at load from the "
                f"embedded ONNX and the named-data weights) with {trt.flavor} {trt.version} "
                f"for this GPU ({here})")
    facts = blob.meta.build
    built = facts.compute_capabilities
    if built == "all":
        built = tuple(k for k in trt.module.ComputeCapability.__members__ if k.startswith("SM"))
    was = (f"{facts.trt_flavor} {facts.trt_version} for "
           f"{', '.join(built) if isinstance(built, tuple) and built else 'its GPU'}")
    return (f"the engine was built with {was}, and this GPU ({device_name(device)})"
            f" is {here}, compute capability {here[2:-1]}.{here[-1]}, with {trt.flavor} "
            f"{trt.version} here")


def engine_binding(trt, engine, binding: Binding) -> Binding:
    """The blob's binding, checked against the engine's own tensor of that name
    (the blob's metadata and engine are both untrusted): direction, dtype and
    rank must agree; a dtype the blob left open is taken from the engine."""
    m = trt.module
    names = {engine.get_tensor_name(i) for i in range(engine.num_io_tensors)}
    if binding.name not in names:
        raise InvalidProgramError(f"the blob names binding {binding.name!r}, which the engine "
                                  f"does not have (it has {sorted(names)})")
    is_input = engine.get_tensor_mode(binding.name) == m.TensorIOMode.INPUT
    # dtypes.py's rows that this TensorRT has (BF16/INT64 are missing from older ones)
    to_numpy = {tensorrt_dtype(m, d): SCALAR_TYPE_TO_NUMPY[d.scalar_type] for d in DTYPES
                if d.scalar_type in SCALAR_TYPE_TO_NUMPY and tensorrt_dtype(m, d) is not None}
    dtype = to_numpy.get(engine.get_tensor_dtype(binding.name))
    shape = tuple(engine.get_tensor_shape(binding.name))
    if (is_input != binding.is_input or dtype is None
            or (binding.dtype is not None and dtype != binding.dtype)
            or (binding.shape is not None and len(shape) != len(binding.shape))):
        raise InvalidProgramError(
            f"the blob's binding {binding.name!r} ({'input' if binding.is_input else 'output'}, "
            f"{dtype_name(binding.dtype)}, shape {binding.shape}) does not match the engine's tensor "
            f"({'input' if is_input else 'output'}, {engine.get_tensor_dtype(binding.name)}, "
            f"shape {list(shape)})")
    return dataclasses.replace(binding, dtype=dtype, shape=binding.shape or shape)


class TensorRTExecutor(Executor):
    kind = "tensorrt"

    def __init__(self, blob: Blob, named_data: NamedData | None = None,
                 device: str | None = None):
        meta = blob.meta
        # A partition that needs its named data (no engine, or a stripped one)
        # fails on a missing .ptd first, whatever would run it; a full engine
        # needs it only if it has to be rebuilt here.
        weights = (blob_weights(blob, named_data) if blob.engine_kind != "full" else None)

        def named_weights() -> list[WeightBuffer]:
            return weights if weights is not None else blob_weights(blob, named_data)

        self.inputs, self.outputs = split_bindings(meta)
        # The GPU first: without one, TensorRT (~110 MB resident) is never
        # loaded, and a process on the CPU fallback stays small.
        device = chosen_device(meta, device)  # device_id unless overridden at load
        flavor = meta.build.trt_flavor
        try:  # the flavour that built it, else any: engine_for_this_gpu rebuilds
            try:
                self.trt = load_tensorrt(flavor)
            except TensorRTNotInstalledError:
                self.trt = load_tensorrt()
        except TensorRTNotInstalledError as e:
            raise EngineUnavailable(f"the engine was built with {flavor or 'TensorRT'} "
                                    f"{meta.build.trt_version or ''}, and no TensorRT is "
                                    f"installed here to run or rebuild it: {e}")
        make_current(device)  # TensorRT (the CUDA runtime) works in the current context
        engine = engine_for_this_gpu(blob, self.trt, device, named_weights)
        m = self.trt.module
        self.logger = collecting_logger(self.trt)
        self.runtime = m.Runtime(self.logger)
        self.engine = self.runtime.deserialize_cuda_engine(engine)
        if self.engine is None:
            raise EngineUnavailable("TensorRT could not deserialize the engine: "
                                    + ("; ".join(self.logger.messages[-3:]) or "no message"))
        if blob.engine_kind == "stripped" and engine is blob.engine:  # not rebuilt with weights
            refit_engine(self.trt, self.engine, self_contained_onnx(blob), named_weights(),
                         self.logger)
        n_state = 2 * len(meta.state or ())  # delegate-owned state: engine inputs/outputs (state.py)
        if self.engine.num_io_tensors != len(self.inputs) + len(self.outputs) + n_state:
            raise InvalidProgramError(
                f"the engine has {self.engine.num_io_tensors} input and output tensors, the "
                f"blob's io_bindings list {len(self.inputs) + len(self.outputs)} and its "
                f"states {n_state}")
        check_engine_profiles(self.engine, meta)
        self.inputs = [engine_binding(self.trt, self.engine, b) for b in self.inputs]
        self.outputs = [engine_binding(self.trt, self.engine, b) for b in self.outputs]
        self.kernel_cache = KernelCache(self.trt, engine, device_name(device))
        self.bound = create_context(self.trt, self.engine, device,
                                    kernel_cache=self.kernel_cache)  # context.py
        self.bound.bind(self.inputs, self.outputs)
        self.state = self.bound.state = (DeviceState(state_specs(blob, self.inputs), self.engine,
                                                     device) if meta.state else None)
        self.bound.aliases = dict(aliased_pairs(blob, self.inputs, self.outputs))
        # Several optimization profiles: one chosen per call (optimization_profiles.py).
        self.bound.profiles = (profile_choice(meta, self.inputs) if meta.profiles is not None
                               else engine_profile_choice(self.engine, self.inputs))
        if profiling.nodes_requested():  # GPU-only, unverified (layer_timings.py)
            self.bound.layer_timings = attach_layer_timings(self.trt, self.bound.context)
        self.bound.input_checks = InputChecks.from_metadata(meta, [b.name for b in self.inputs])
        # Not with index ranges: the graph plan does not read input values
        # (docs/security.md).
        self._start_plans(native_plans_enabled() and not self.bound.input_checks.ranges)

    def _start_plans(self, publish: bool) -> None:
        # Native plans (cuda_graph_plan.py): the adapter adds 1 to plan_launches
        # per call it runs without this executor.
        self.publish_plans = publish
        self.plan_launches = ctypes.c_uint64(0)
        self._plan: CudaGraphPlan | None = None
        self._last_call: tuple | None = None  # (args, num_args) of the last execute

    def execute(self, args, num_args: int | None = None) -> None:
        if self.bound is None:
            raise ArgumentError("this executor was closed (the delegate was destroyed)")
        n = len(args) if num_args is None else num_args
        self._last_call = None
        self.bound.execute(args, n)
        self._last_call = (args, n)

    def native_plan(self) -> abi.EtrtNativePlan | None:
        """The CUDA-graph plan for the call just made, when it ran as a graph
        replay for the legacy default stream (cuda_graph_plan.py says when,
        stateful partitions included); reused while the same bindings, graph
        and state stay."""
        call = self.bound.last_graph_call if self.bound is not None else None
        if (call is None or self._last_call is None or not self.publish_plans
                or call.caller_stream != 0):
            return None
        args, n = self._last_call
        if any(args[k].kind != abi.ETRT_ARG_TENSOR for k in range(n)):
            return None
        state = self.bound.state
        if state is not None and any(args[k].device_type != abi.ETRT_DEVICE_CPU
                                     for k, _, _, _ in state.position_checks()):
            return None  # the adapter reads positions in host memory only
        key = signature_key(args, n)
        plan = self._plan
        if plan is None or plan.key != key or plan.call != call or not plan.live(self.bound):
            plan = self._plan = CudaGraphPlan(self.bound, call, args, n, key,
                                              primary_context(self.bound.device),
                                              self.plan_launches)
        return plan.struct

    def withdraw_native_plan(self) -> None:
        if self._plan is not None:
            self._plan.withdraw()
            self._plan = None

    def close(self) -> None:
        """Drops the context before the engine and the engine before the runtime
        (TensorRT's required order), while CUDA is still up; TensorRT-RTX's
        JIT-compiled kernels are saved for the next process first."""
        if getattr(self, "bound", None) is not None:
            self.bound.close()  # device-resident calls may still be running
        if getattr(self, "kernel_cache", None) is not None:
            self.kernel_cache.save()
        self.bound = None
        self.kernel_cache = None  # after the context that uses it
        self.engine = None
        self.runtime = None
