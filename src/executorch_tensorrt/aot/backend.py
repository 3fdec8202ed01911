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

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper
import torch
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec

from .. import blob
from ..errors import EngineBuildError
from ..runtime.cuda.probe import cuda_unavailable_reason
from ..tensorrt.engine_builder import build_engine, current_progress
from ..tensorrt.flavor import load_tensorrt
from ..tensorrt.onnx_parser import ParseFailure, parse_network
from .compile_spec import TensorRTCompileSpec
from .debug_handles import debug_handle_map, onnx_node_sources
from .input_checks import equal_dims, index_ranges
from .weights.named_data import store_weights
from .onnx.export import OnnxExport, export_onnx, reused_export
from .program_copy import copy_program
from .shapes import input_profile_sets, profile_metadata, resolve_profiles
from .state.owned import (
    STATE_INPUT_PREFIX,
    STATE_OUTPUT_PREFIX,
    aliased_io,
    finish_onnx,
    lift_state,
)
from .weights.content import content_id, initializer_pointers

# ONNX TensorProto element type -> the blob's dtype string.
_ONNX_DTYPE_NAMES = {
    onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.BFLOAT16: "bfloat16", onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.UINT8: "uint8", onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int64", onnx.TensorProto.BOOL: "bool",
}


def io_bindings(model: onnx.ModelProto) -> list[dict]:
    """The engine's inputs then outputs, in the order ExecuTorch passes them."""
    out = []
    for values, is_input in ((model.graph.input, True), (model.graph.output, False)):
        for v in values:
            t = v.type.tensor_type
            dtype = _ONNX_DTYPE_NAMES.get(t.elem_type)
            if dtype is None:
                raise ValueError(f"ONNX value {v.name!r} has element type {t.elem_type}, "
                                 "which has no ExecuTorch dtype")
            shape = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
            out.append({"name": v.name, "dtype": dtype, "shape": shape,
                        "is_input": is_input})
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
        progress = current_progress()
        nodes = sum(1 for n in edge_program.graph.nodes if n.op == "call_function")
        if progress:
            progress(f"exporting a TensorRT partition ({nodes} nodes) to ONNX...")
        # In-place cache writes (TensorScatter), else functional ones. Not in fp16/bf16:
        # the cache would be cast at the boundary, so the update could not alias it.
        for tensor_scatter in (True, False) if spec.precision == "fp32" else (False,):
            lifted = lift_state(edge_program, tensor_scatter)  # state as graph I/O (state.py)
            scatters = bool(lifted.aliases or any(
                s.kv_update is not None and s.kv_update.scatter for s in lifted.states))
            stateful = bool(lifted.aliases or lifted.states)
            exported = ((None if stateful else reused_export(edge_program, spec.precision))
                        or export_onnx(lifted.program, spec.precision))
            profiles = input_profile_sets(lifted.program,
                                          resolve_profiles(lifted.program, spec.profiles))
            state, aliases = None, []
            try:
                if lifted.aliases:  # caller-owned caches: Torch-TensorRT's TR02 form
                    exported.onnx_bytes, exported.edge_node_of, aliases = aliased_io(
                        lifted, exported.onnx_bytes, exported.edge_node_of)
                if lifted.states:
                    state = finish_onnx(lifted, exported.onnx_bytes, exported.edge_node_of)
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
        bindings = io_bindings(model)
        if state is not None:  # the state pairs are the last inputs/outputs
            bindings = [b for b in bindings
                        if not b["name"].startswith((STATE_INPUT_PREFIX, STATE_OUTPUT_PREFIX))]
        inputs = [b["name"] for b in bindings if b["is_input"]]
        # What eager would refuse (input_checks.py): checked per call at run time.
        input_bindings = [b for b in bindings if b["is_input"]]
        for k, index_range in index_ranges(edge_program, input_bindings).items():
            input_bindings[k]["index_range"] = list(index_range)
        groups = equal_dims(edge_program, input_bindings)
        metadata = {
            "io_bindings": bindings,
            **({"aliased_io": aliases} if aliases else {}),
            **profile_metadata(inputs, profiles),
            **_builder_fields(built, spec),
            "device_id": spec.device_id,
            "precision": spec.precision,
            "onnx_opset": max((o.version for o in model.opset_import
                               if o.domain in ("", "ai.onnx")),
                              default=None),
        }
        if state is not None:
            metadata["state"] = state.entries
        if groups:
            metadata["equal_dims"] = groups
        sources = onnx_node_sources(model, exported.edge_node_of)
        if sources:
            metadata["onnx_node_sources"] = sources
        metadata["engine"] = kind
        if stored is not None:
            metadata["weights_location"] = "named_data"
            metadata["weights"] = stored.entries
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


def _builder_fields(built, spec: TensorRTCompileSpec) -> dict:
    """The builder that made the plan, or (no plan) the one the runtime should use."""
    if built is not None:
        return {"trt_flavor": built.flavor, "trt_version": built.version,
                "compute_capabilities": list(built.compute_capabilities or []) or "all"}
    trt = load_tensorrt()
    return {"trt_flavor": trt.flavor, "trt_version": trt.version,
            "compute_capabilities": list(spec.compute_capabilities or []) or "all"}
