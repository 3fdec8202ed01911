"""Runs a partition's embedded ONNX model with onnxruntime on the CPU.

Used only when the caller allows the fallback (EXECUTORCH_TENSORRT_FALLBACK=
onnxruntime or the load-time backend option "fallback"). Reduced-precision
partitions run in fp32 here (upcast.py). Arguments in CUDA memory
(device-resident programs) are staged through host memory with the CUDA
driver API, which it says once on stderr.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ...blob import Blob
from ...errors import ArgumentError, InvalidProgramError
from ..adapter import abi
from .. import profiling
from ..arguments import (
    SCALAR_TYPE_TO_NUMPY,
    check_args,
    checked_nbytes,
    permuted_to_contiguous,
    resize_output,
    split_bindings,
)
from .cuda_staging import CudaStaging
from ..executor import Executor, native_plans_enabled
from ..input_checks import InputChecks
from ..native_plan import signature_key
from .run_plan import OrtRunPlan, binding_args, binding_bounds
from ..onnx_safety import self_contained_onnx
from .upcast import has_bfloat16, upcast_to_fp32
from .where_used import cast_where_used
from .fp4 import fp4_as_float16
from ..named_data import NamedData, blob_weights
from .capi import OrtApi, OrtSession
from .named_weights import OrtNamedWeights, packable
from .output_shapes import output_dim_sources
from .node_timings import OrtNodeTimings
from .threads import OrtThreads
from ..state import ExecutorState, aliased_pairs, fp32_state, state_specs
from .state import OrtStatefulSession, reflect_aliases
from .bound_values import (EMPTY, ORT_ELEMENT_TYPES, BoundValues, element_type,
                           make_values)


# --- begin: GIL-holding onnxruntime session (capi.py; docs/concurrency.md) ---
# ctypes.memmove is a CFUNCTYPE and would release the GIL; this one keeps it.
_memmove = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)(
    ctypes.cast(ctypes.memmove, ctypes.c_void_p).value)


class OnnxRuntimeExecutor(Executor):
    """Runs the embedded ONNX with onnxruntime's C API. Every call keeps the GIL
    (capi.py says why), so a second Python thread cannot enter the same
    ExecuTorch method while this partition runs."""

    kind = "onnxruntime"
    max_bound = 16  # cached address sets; memory planning keeps addresses stable

    def __init__(self, blob: Blob, named_data: NamedData | None = None):
        if blob.onnx is None:
            raise ArgumentError("this blob carries no ONNX model, so onnxruntime cannot run it "
                                "(it was written by a tool that embeds only the engine)")
        model = self_contained_onnx(blob)  # refuses external data before anything reads it
        weights = blob_weights(blob, named_data)  # named-data weights, sizes checked
        self.inputs, self.outputs = split_bindings(blob.meta)
        # What eager would refuse (../input_checks.py): the gate and the plans check it.
        self.input_checks = InputChecks.from_metadata(blob.meta, [b.name for b in self.inputs])
        # Reduced-precision builds, and bf16 models (onnxruntime's CPU provider
        # has no bf16 Mul): compute in fp32 (upcast.py), the weights upcast once
        # (named_weights.py), the state kept in fp32, ExecuTorch's arguments in
        # the dtypes the bindings say (a Cast at each reduced one).
        upcast = blob.meta.build.precision_or_default != "fp32" or has_bfloat16(model)
        # Big fp16/bf16 weights are not copied upcast but cast where used (upcast.py).
        where_used = cast_where_used(weights) if upcast else frozenset()
        if upcast:
            model = upcast_to_fp32(model, [ORT_ELEMENT_TYPES.get(b.dtype) for b in self.inputs],
                                   [ORT_ELEMENT_TYPES.get(b.dtype) for b in self.outputs],
                                   where_used)
        # FP4 weights: onnxruntime has no FLOAT4E2M1 kernels; float16 values (fp4.py).
        # After the upcast, so the block scales' dequantize is float32 and folds.
        model = fp4_as_float16(model)
        # Weights stay in the named data (named_weights.py); released in close().
        names = [w.name for w in weights]
        self.weights = OrtNamedWeights(
            OrtApi.get(), weights, upcast, where_used=where_used,
            packable=packable(model, names)) if weights else None
        # Per-node times only when asked (EXECUTORCH_TENSORRT_PROFILE_NODES=1).
        self.node_timings = (OrtNodeTimings(model, self.weights) if profiling.nodes_requested()
                              else None)
        try:
            self.session = (self.node_timings.new_session() if self.node_timings
                            else OrtSession(model, threads=OrtThreads.from_environment(),
                                            weights=self.weights))
        except BaseException:
            if self.weights is not None:
                self.weights.release()
            raise
        if self.weights is not None and self.node_timings is None:  # no further session
            self.weights.release_decoded_fp4()
        self.api = self.session.api
        # Delegate-owned state (KV caches): extra model inputs/outputs (../state.py, ./state.py).
        specs = state_specs(blob, self.inputs) if blob.meta.state else None
        if specs and upcast:
            specs = [fp32_state(spec) for spec in specs]  # the upcast graph's state is fp32
        self.state = ExecutorState(specs) if specs else None
        if self.state is not None:
            self.session = OrtStatefulSession(self.session, self.state, ORT_ELEMENT_TYPES)
        if len(self.session.inputs) != len(self.inputs) or \
                len(self.session.outputs) != len(self.outputs):
            raise InvalidProgramError(
                f"the embedded ONNX model has {len(self.session.inputs)} inputs and "
                f"{len(self.session.outputs)} outputs; the blob's io_bindings list "
                f"{len(self.inputs)} and {len(self.outputs)}")
        self.input_types = [t for _, t, _ in self.session.inputs]
        self.output_types = [t for _, t, _ in self.session.outputs]
        # Outputs of fixed shape are written by onnxruntime straight into
        # ExecuTorch's memory; others are allocated by onnxruntime and copied.
        self.fixed_outputs = all(b.shape is not None and -1 not in b.shape for b in self.outputs)
        # ... unless their shapes follow the inputs' shapes: then they are bound
        # after the first call of each input shape (a decode step's logits).
        self.output_sources = output_dim_sources(model, len(self.outputs))
        self.bind_dynamic_outputs = not self.fixed_outputs and all(
            sources is not None for sources in self.output_sources)
        self.bound: dict[tuple, BoundValues] = {}
        # Argument bytes this executor copied (outputs onnxruntime allocated, staging),
        # and those the adapter copied running its plans (copied_bytes adds both).
        self._plan_copied = ctypes.c_uint64(0)
        self.copied_bytes = 0
        # The plan for the last call (host arguments only); the adapter runs
        # identical calls with it, without Python (native_plan.py), checking
        # the cache positions itself. Torch-TensorRT's TR02 in-place outputs:
        # (output index, input index) pairs, copied in Python, so no plan.
        self.aliases = aliased_pairs(blob, self.inputs, self.outputs)
        # Weights cast where used are fed on every run by OrtSession.run, which
        # a native plan (user and state values only) would not do.
        self.publish_plans = native_plans_enabled() and not self.aliases and not where_used
        self.plan: OrtRunPlan | None = None
        self.lasting_plan = self._lasting_plan()

    def _lasting_plan(self) -> OrtRunPlan | None:
        """A plan that serves every call the gate would accept, from the first
        (docs/concurrency.md, cold first calls): for any address when every
        shape is static and every output written in place, else with bounds
        (the partition's state included). It outlives
        the calls: the adapter takes it back after each Python call, a refused
        one included. None when there can be none; not with per-node timings
        (a traced call replaces the session)."""
        if not (self.publish_plans and self.node_timings is None):
            return None
        bindings = self.inputs + self.outputs
        types = self.input_types + self.output_types
        bounds = None
        if not (self.fixed_outputs and all(b.dtype is not None and b.shape is not None
                                           and -1 not in b.shape for b in self.inputs)):
            bounds = binding_bounds(self.inputs, self.outputs, self.output_sources)
            if bounds is None or any(ORT_ELEMENT_TYPES.get(b.dtype) != t
                                     for b, t in zip(bindings, types)):
                return None  # the executor's own checks refuse such calls: leave it to them
        args = binding_args(bindings)
        n = len(args)
        unbound = BoundValues(self.api, OrtSession.values([None] * len(self.inputs)),
                               OrtSession.values([None] * len(self.outputs)), [])
        return OrtRunPlan(self.session, unbound, args, n, signature_key(args, n),
                          self._plan_copied, types, bounds,
                          index_checks=self.input_checks.ranges,
                          equal_dims=self.input_checks.equal_dims if bounds else ())

    @property
    def copied_bytes(self) -> int:
        """Argument bytes copied for this partition's calls, by the executor and
        by the adapter's plans (outputs of dynamic shape, staging)."""
        return self._copied_bytes + self._plan_copied.value

    @copied_bytes.setter
    def copied_bytes(self, value: int) -> None:
        self._copied_bytes = value - self._plan_copied.value

    def _bind(self, args, shapes, key) -> BoundValues:
        n_in = len(self.inputs)
        items = [(args[i], shape, self.input_types[i], f"input {i}")
                 for i, shape in enumerate(shapes)]
        if self.fixed_outputs:
            for j, out in enumerate(self.outputs):
                resize_output(args[n_in + j], out.shape, out)
            items += [(args[n_in + j], out.shape, self.output_types[j], f"output {j}")
                      for j, out in enumerate(self.outputs)]
        values, owned = make_values(self.api, items)
        inputs = values[:n_in]
        outputs = values[n_in:] if self.fixed_outputs else [None] * len(self.outputs)
        if len(self.bound) >= self.max_bound:
            self._release_bound()
        bound = self.bound[key] = BoundValues(self.api, OrtSession.values(inputs),
                                               OrtSession.values(outputs), owned)
        return bound

    def _bind_outputs(self, bound: BoundValues, args) -> None:
        """Binds the outputs, just resized to what onnxruntime produced for
        these input shapes, so later calls with them (and the plan made from
        this one) run without allocating or copying an output."""
        n_in = len(self.inputs)
        shapes = tuple(args[n_in + j].shape() for j in range(len(self.outputs)))
        values, owned = make_values(self.api, [(args[n_in + j], shape, self.output_types[j],
                                                f"output {j}") for j, shape in enumerate(shapes)])
        for j, value in enumerate(values):
            bound.outputs[j] = value.value
        bound.owned.extend(owned)
        bound.output_shapes = shapes
        bound.plan = None  # made over the unbound outputs

    def _plan_for(self, bound: "BoundValues", args, n: int) -> OrtRunPlan:
        key = signature_key(args, n)
        if bound.plan is None or bound.plan.key != key:
            bound.plan = OrtRunPlan(self.session, bound, args, n, key, self._plan_copied,
                                    index_checks=self.input_checks.ranges)
        return bound.plan

    def _release_bound(self) -> None:
        for bound in self.bound.values():
            bound.release()
        self.bound.clear()

    def execute(self, args, num_args: int | None = None) -> None:
        self._execute(args, num_args)
        if self.aliases:  # TR02: the aliased input holds the new value too (state.py)
            reflect_aliases(args, self.aliases, len(self.inputs), self.outputs)

    def _execute(self, args, num_args: int | None = None) -> None:
        self.plan = None  # the adapter forgot it before calling; bound values may go below
        if self.session is None:
            raise ArgumentError("this executor was closed (the delegate was destroyed)")
        recorder = profiling.begin_call()  # None unless ETDump is on
        t0 = profiling.now() if recorder else 0
        call = check_args(args, len(args) if num_args is None else num_args,
                          self.inputs, self.outputs, permuted_inputs=True,
                          checks=self.input_checks,
                          read_device=lambda arg, shape: CudaStaging.get().to_host(arg, shape))
        shapes = call.shapes
        if self.state is not None:
            self.state.check_call(args, shapes, self._staged_positions(args))
        n = len(self.inputs) + len(self.outputs)
        if all(args[k].device_type == abi.ETRT_DEVICE_CPU for k in range(n)) and not (
                call.any_permuted):
            key = (tuple(args[k].data for k in range(n)), tuple(shapes))
            bound = self.bound.get(key) or self._bind(args, shapes, key)
            if recorder:
                recorder.event("check+bind", t0, profiling.now())
            if self.fixed_outputs or bound.output_shapes is not None:
                for j, shape in enumerate(bound.output_shapes or ()):  # this input shape's
                    resize_output(args[len(self.inputs) + j], shape, self.outputs[j])
                t1 = profiling.now() if recorder else 0
                self.session.run(bound.inputs, bound.outputs)
                if recorder:
                    recorder.event("run", t1, profiling.now())
                    recorder.event("copy out", profiling.now(), profiling.now())
                    self._node_events(recorder, t1)
                elif self.publish_plans and self.lasting_plan is None:
                    self.plan = self._plan_for(bound, args, n)  # traced calls: Python
                return
            self._run_and_copy_out(args, bound.inputs, recorder)
            if self.bind_dynamic_outputs:
                self._bind_outputs(bound, args)
            if self.publish_plans and not recorder and self.lasting_plan is None:
                self.plan = self._plan_for(bound, args, n)  # outputs resized: shapes known
            return
        staged: list = []  # device-resident or permuted inputs: contiguous host copies
        owned: list = []
        try:
            inputs = []
            for i, shape in enumerate(shapes):
                arg = args[i]
                permuted = call.permuted[i]
                if arg.device_type != abi.ETRT_DEVICE_CPU or permuted:
                    # check_args has bounded both reads by the argument's capacity.
                    host = (CudaStaging.get().to_host(arg, shape)  # bytes as they lie
                            if arg.device_type != abi.ETRT_DEVICE_CPU else None)
                    if permuted:
                        host = permuted_to_contiguous(arg, shape, host)
                    staged.append(host)
                    self.copied_bytes += host.nbytes
                    element = element_type(arg, self.input_types[i], f"input {i}")
                    inputs.append(self.api.tensor(host.ctypes.data if host.nbytes
                                                  else ctypes.addressof(EMPTY),
                                                  host.nbytes, shape, element))
                    owned.append(inputs[-1])
                else:
                    [value], made = make_values(self.api, [(arg, shape, self.input_types[i],
                                                            f"input {i}")])
                    inputs.append(value)
                    owned.extend(made)
            if recorder:
                recorder.event("check+bind", t0, profiling.now())
            self._run_and_copy_out(args, OrtSession.values(inputs), recorder)
        finally:
            for value in owned:
                self.api.ReleaseValue(value)

    def _staged_positions(self, args):
        if all(args[i].device_type == abi.ETRT_DEVICE_CPU for i in range(len(self.inputs))):
            return None
        return lambda k: (CudaStaging.get().to_host(args[k], (args[k].sizes[0],))
                          if args[k].device_type != abi.ETRT_DEVICE_CPU else None)

    def _run_and_copy_out(self, args, inputs: ctypes.Array, recorder=None) -> None:
        outputs = OrtSession.values([None] * len(self.outputs))
        try:
            t0 = profiling.now() if recorder else 0
            self.session.run(inputs, outputs)
            t1 = profiling.now() if recorder else 0
            for j, value in enumerate(outputs):
                self._copy_out(args[len(self.inputs) + j], j, value)
            if recorder:
                recorder.event("run", t0, t1)
                recorder.event("copy out", t1, profiling.now())
                self._node_events(recorder, t0)
        finally:
            for value in outputs:
                if value:
                    self.api.ReleaseValue(value)

    def _node_events(self, recorder: profiling.CallRecorder, run_start_ns: int) -> None:
        """Sends the last run's per-node times, then starts a new timed session."""
        if self.node_timings is None:
            return
        for name, start, end in self.node_timings.last_run_nodes(self.session, run_start_ns):
            recorder.event(name, start, end)
        old, self.session = self.session, self.node_timings.new_session()
        if self.state is not None:
            self.session = OrtStatefulSession(self.session, self.state, ORT_ELEMENT_TYPES)
        for bound in self.bound.values():
            bound.plan = None  # plans name the old session, released below
        old.close()

    def _copy_out(self, arg: abi.EtrtArg, j: int, value) -> None:
        shape, element = self.api.shape_of(value)
        element_type(arg, element, f"output {j}")
        resize_output(arg, shape, self.outputs[j])
        data = self.api.data_of(value)
        if arg.device_type == abi.ETRT_DEVICE_CPU:
            nbytes = checked_nbytes(arg, shape)
            if nbytes:
                _memmove(arg.data, data, nbytes)
            self.copied_bytes += nbytes
            return
        checked_nbytes(arg, shape, "CUDA ")
        host = np.empty(shape, dtype=SCALAR_TYPE_TO_NUMPY[arg.dtype])
        if host.nbytes:
            _memmove(host.ctypes.data, data, host.nbytes)
        CudaStaging.get().to_device(arg, host)
        self.copied_bytes += host.nbytes

    def native_plan(self) -> abi.EtrtNativePlan | None:
        plan = self.lasting_plan or self.plan  # it covers every call the other would
        return plan.struct if plan is not None else None

    def withdraw_native_plan(self) -> None:
        for plan in (self.plan, self.lasting_plan):
            if plan is not None:
                plan.withdraw()
        self.plan = self.lasting_plan = None

    def close(self) -> None:
        # from destroy: the adapter forgot them first (else withdrawn)
        self.plan = self.lasting_plan = None
        if self.session is not None:
            self._release_bound()
            self.session.close()
            self.session = None
        if self.node_timings is not None:
            self.node_timings.close()
        if self.weights is not None:  # after the session that reads them
            self.weights.release()
            self.weights = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - finalizers must not raise (interpreter exit)
            pass


# --- end: GIL-holding onnxruntime session ---
