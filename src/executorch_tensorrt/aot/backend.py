"""TensorRTBackend.preprocess: partition -> ONNX -> TensorRT engine -> blob.

By default the weights go to ExecuTorch's named data (each once, keyed by
content) and the blob keeps the ONNX graph without them plus either a
weight-stripped plan (where TensorRT can build one here: a usable GPU) or
no plan at all (the runtime builds and caches one at load: TensorRT-RTX
builds no refittable plan without a GPU). `inline_weights=True` keeps the self-contained blob: a plan
with its weights and an ONNX model with its weights (< 2 GB, stored twice).
"""
from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper
import torch
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec

from .. import blob
from ..blob.metadata import (Binding, BlobMetadata, BuildFacts, NodeSource, Profile,
                             WeightEntry)
from ..blob.metadata_state import parse_aliased_io, parse_state
from ..errors import EngineBuildError
from ..runtime.cuda.probe import cuda_unavailable_reason
from ..tensorrt.engine_builder import build_engine, current_progress
from ..tensorrt.flavor import load_tensorrt
from ..tensorrt.onnx_parser import ParseFailure, parse_network
from .compile_spec import TensorRTCompileSpec
from .debug_handles import debug_handle_map, onnx_node_sources
from .checks.input_checks import equal_dims, index_ranges
from .weights.named_data import store_weights
from .onnx.export import OnnxExport, export_onnx
from .onnx.export_cache import cache_named_in
from .program_copy import copy_program
from .torch_dtypes import BLOB_NAME_OF_ONNX
from .profiles.shapes import input_profile_sets, resolve_profiles
from .state.owned import (
    STATE_INPUT_PREFIX,
    STATE_OUTPUT_PREFIX,
    aliased_io,
    finish_onnx,
    lift_state,
)
from .weights.content import content_id, initializer_pointers


# The blob's top-level key order as this backend has always written it (the
# JSON bytes stay the same across versions; the writer puts io_bindings,
# aliased_io and device_id first).
_KEY_ORDER = ("io_bindings", "aliased_io", "profiles", "optimization_profiles", "trt_flavor",
              "trt_version", "compute_capabilities", "build_seconds", "activation_bytes", "device_id", "precision",
              "onnx_opset",
              "state", "equal_dims", "onnx_node_sources", "engine", "weights_location", "weights")

# record_memory's extra build (no GPU) holds a plan with a copy of the weights:
# past this many weight bytes it would undo the export's weights-once memory.
RECORD_MEMORY_WEIGHT_LIMIT = 1 << 30


def io_bindings(model: onnx.ModelProto) -> list[Binding]:
    """The engine's inputs then outputs, in the order ExecuTorch passes them
    (without the delegate-owned state pairs, which ExecuTorch never passes)."""
    out = []
    for values, is_input in ((model.graph.input, True), (model.graph.output, False)):
        for v in values:
            if v.name.startswith((STATE_INPUT_PREFIX, STATE_OUTPUT_PREFIX)):
                continue
            t = v.type.tensor_type
            dtype = BLOB_NAME_OF_ONNX.get(t.elem_type)
            if dtype is None:
                raise ValueError(f"ONNX value {v.name!r} has element type {t.elem_type}, "
                                 "which has no ExecuTorch dtype")
            shape = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim)
            out.append(Binding(v.name, dtype, shape, is_input))
    return out


def engine_kind(spec: TensorRTCompileSpec) -> str:
    """What the blob's engine region will hold (blob/format.py ENGINE_KINDS):
    a weight-stripped plan where this machine can build one, else none."""
    if spec.inline_weights:
        return "full"
    if cuda_unavailable_reason():
        return "none"
    return "stripped" if _stripped_plans_build(spec.build_options()) else "none"


@functools.lru_cache(maxsize=8)
def _stripped_plans_build(options) -> bool:
    """Whether TensorRT builds a weight-stripped plan here with these options:
    it needs a CUDA device it can use (TensorRT-RTX fails in Myelin without
    one), which a visible GPU does not promise. Asked once, on a tiny model."""
    w = onnx.numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])
    graph = onnx.helper.make_graph([onnx.helper.make_node("MatMul", ["x", "w"], ["y"])],
                                   "probe", [x], [y], [w])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)])
    try:
        build_engine(model.SerializeToString(), options, label="stripped-plan probe",
                     progress=None, stripped=True, keep_engine=False)
    except EngineBuildError:
        return False
    return True


def inline_onnx(exported: OnnxExport) -> bytes:
    """The weightless graph with its weights put back: a self-contained ONNX
    model, for inline_weights=True only (protobuf caps it at 2 GB)."""
    model = onnx.load_model_from_string(exported.onnx_bytes)
    by_name = {w.name: w for w in exported.weights}
    for init in model.graph.initializer:
        w = by_name.get(init.name)
        if w is not None:
            init.ClearField("external_data")
            init.data_location = onnx.TensorProto.DEFAULT
            init.raw_data = w.byte_view().tobytes()
    if model.ByteSize() >= 2**31:
        raise ValueError(
            f"inline_weights=True: the partition's ONNX model with its weights is "
            f"{model.ByteSize()} bytes, over protobuf's 2 GB limit; export without "
            "inline_weights (weights in named data have no such limit)")
    return model.SerializeToString()


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 100_000 else f"{nbytes} bytes"


class TensorRTBackend(BackendDetails):
    """Backend id "TensorRTBackend" (the class name is the id)."""

    @classmethod
    def copy_exported_program_for_preprocess(cls, edge_program, compile_specs):
        # ExecuTorch's default deep-copies the weights too (one more copy of the
        # model); preprocess never writes to them, so the copy shares them.
        return copy_program(edge_program)

    @staticmethod
    def preprocess(edge_program: torch.export.ExportedProgram,
                   compile_specs: list[CompileSpec]) -> PreprocessResult:
        spec = TensorRTCompileSpec.from_compile_specs(compile_specs)
        export_cache = cache_named_in(compile_specs)  # the partitioner's, if it named one
        progress = current_progress()
        nodes = sum(1 for n in edge_program.graph.nodes if n.op == "call_function")
        if progress:
            progress(f"exporting a TensorRT partition ({nodes} nodes) to ONNX...")
        # In-place cache writes (TensorScatter), else functional ones. Not in fp16/bf16:
        # the cache would be cast at the boundary, so the update could not alias it.
        # An fp8 cache has one form, from the cache write the marker finds (fp8_cache.py).
        for tensor_scatter in ((True,) if spec.kv_cache_dtype else (True, False)
                               if spec.precision == "fp32" else (False,)):
            lifted = lift_state(edge_program, tensor_scatter)  # state as graph I/O (state.py)
            scatters = bool(lifted.aliases or any(
                (s.kv_update is not None and s.kv_update.scatter) or s.kept_write
                for s in lifted.states))
            stateful = bool(lifted.aliases or lifted.states)
            reused = (export_cache.take(edge_program, spec.precision)
                      if export_cache is not None and not stateful else None)
            exported = reused or export_onnx(lifted.program, spec.precision)
            profiles = input_profile_sets(lifted.program,
                                          resolve_profiles(lifted.program, spec.profiles))
            state, aliases = None, []
            try:
                if lifted.aliases:  # caller-owned caches: Torch-TensorRT's TR02 form
                    exported.onnx_bytes, exported.edge_node_of, aliases = aliased_io(
                        lifted, exported.onnx_bytes, exported.edge_node_of)
                if lifted.states:
                    state = finish_onnx(lifted, exported.onnx_bytes, exported.edge_node_of,
                                        spec.kv_cache_dtype)
                    exported.onnx_bytes = state.onnx_bytes
                    exported.edge_node_of = state.edge_node_of
                    profiles = [[p[i] for i in state.profile_order] for p in profiles]
                if scatters and tensor_scatter:  # does TensorRT's parser take the in-place writes?
                    pointers, _alive = initializer_pointers(exported.weights, stand_ins=True)
                    parse_network(load_tensorrt(), exported.onnx_bytes, pointers)
                break
            except (ParseFailure, EngineBuildError):
                if not (tensor_scatter and scatters):
                    raise  # nothing to fall back from
        if progress:
            progress(f"exported: graph {_mb(len(exported.onnx_bytes))}, "
                     f"{len(exported.weights)} weights ({_mb(exported.weight_bytes)})")
        model = onnx.load_model_from_string(exported.onnx_bytes)  # the graph alone: small
        kind = engine_kind(spec)
        stored = None if spec.inline_weights else store_weights(
            exported.weights, spec.weights_file, owned=spec.precision == "fp32")
        engine, built = b"", None
        if kind != "none":
            # The partitioner's check built this same graph with these weights
            # when it had them: then this is a cache hit, not a second build.
            pointers, _alive = initializer_pointers(exported.weights, stand_ins=False)
            built = build_engine(exported.onnx_bytes, spec.build_options(), label="delegate",
                                 profiles=profiles, progress=progress,
                                 initializers=pointers, stripped=kind == "stripped",
                                 weights_id=weights_id(exported, stored))
            engine = built.engine
        activation = built.activation_bytes if built is not None else ()
        if built is None and spec.record_memory and (
                exported.weight_bytes > RECORD_MEMORY_WEIGHT_LIMIT):
            if progress:
                progress(f"activation memory not recorded: without a GPU, TensorRT's plan would "
                         f"hold a copy of the partition's {_mb(exported.weight_bytes)} of "
                         "weights while it builds (more than "
                         f"{_mb(RECORD_MEMORY_WEIGHT_LIMIT)}); export on a machine with a GPU "
                         "to record it")
        elif built is None and spec.record_memory:
            # No plan ships, but the builder still says what a context needs
            # (weights as zero stand-ins: the figure does not depend on them).
            pointers, _alive = initializer_pointers(exported.weights, stand_ins=True)
            activation = build_engine(exported.onnx_bytes, spec.build_options(),
                                      label="delegate (activation memory only)",
                                      profiles=profiles, progress=progress,
                                      initializers=pointers, keep_engine=False
                                      ).activation_bytes
        bindings = io_bindings(model)
        # What eager would refuse (input_checks.py): checked per call at run time.
        input_bindings = [b for b in bindings if b.is_input]
        ranges = index_ranges(edge_program, input_bindings)
        groups = equal_dims(edge_program, input_bindings)
        for k, index_range in ranges.items():
            at = bindings.index(input_bindings[k])
            bindings[at] = replace(bindings[at], index_range=index_range)
        by_name = {b.name: b for b in bindings}
        inputs = [b.name for b in bindings if b.is_input]
        sets = tuple(tuple(Profile(n, p.min, p.opt, p.max) for n, p in zip(inputs, s))
                     for s in profiles)
        sources = onnx_node_sources(model, exported.edge_node_of)
        opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                    default=None)
        metadata = BlobMetadata(
            tuple(bindings),
            aliased_io=parse_aliased_io(aliases, by_name, None) if aliases else None,
            device_id=spec.device_id,
            # "profiles" is profile 0 (what single-profile readers know),
            # "optimization_profiles" every profile when there are several
            profiles=sets[0] if sets else (),
            optimization_profiles=sets if len(sets) > 1 else None,
            onnx_node_sources=tuple(NodeSource(s["node"], tuple(s["edge_nodes"]))
                                    for s in sources) or None,
            build=replace(_build_facts(built, spec), activation_bytes=activation or None),
            engine=kind,
            weights_location="named_data" if stored is not None else None,
            weights=tuple(WeightEntry(w["name"], w["key"], w["dtype"], tuple(w["shape"]),
                                      w["nbytes"]) for w in stored.entries)
            if stored is not None else None,
            state=parse_state(state.entries, by_name, None) if state is not None else None,
            equal_dims=tuple(tuple((k, d) for k, d in g) for g in groups) or None,
            extra=(("onnx_opset", opset),),
            key_order=_KEY_ORDER)
        if stored is not None:
            if progress:
                where = f"{spec.weights_file}.ptd" if spec.weights_file else "the .pte"
                progress(f"{len(stored.entries)} weights ({_mb(exported.weight_bytes)}) go to "
                         f"named data in {where}")
        onnx_section = inline_onnx(exported) if spec.inline_weights else exported.onnx_bytes
        return PreprocessResult(
            processed_bytes=blob.write_blob(
                engine, metadata, onnx=onnx_section,
                sections=(state.sections or None) if state is not None else None),
            debug_handle_map=debug_handle_map(edge_program, sources),
            data_store_output=stored.store.get_named_data_store_output() if stored else None)


def weights_id(exported: OnnxExport, stored=None) -> str:
    """The engine cache's name for these weights' contents (the partitioner's
    check computes the same one for the same weights)."""
    if stored is not None:
        return stored.weights_id
    return content_id(exported.weights)


def _build_facts(built, spec: TensorRTCompileSpec) -> BuildFacts:
    """The builder that made the plan, or (no plan) the one the runtime should use."""
    if built is not None:
        return BuildFacts(spec.precision, built.flavor, built.version,
                          tuple(built.compute_capabilities or ()) or "all",
                          round(built.build_seconds, 3))  # inspect shows it
    trt = load_tensorrt()
    return BuildFacts(spec.precision, trt.flavor, trt.version,
                      tuple(spec.compute_capabilities or ()) or "all")
