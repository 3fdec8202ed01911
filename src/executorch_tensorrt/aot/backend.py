"""TensorRTBackend.preprocess: partition -> ONNX -> TensorRT engine -> blob."""
from __future__ import annotations

import onnx
import torch
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec

from .. import blob
from .compile_spec import TensorRTCompileSpec
from ..errors import EngineBuildError
from ..tensorrt.engine_builder import build_engine, current_progress
from ..tensorrt.onnx_parser import ParseFailure
from .debug_handles import debug_handle_map, onnx_node_sources
from .onnx_export import export_onnx
from .shapes import input_profiles
from .state import (STATE_INPUT_PREFIX, STATE_OUTPUT_PREFIX, aliased_io, finish_onnx,
                    lift_state)

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


class TensorRTBackend(BackendDetails):
    """Backend id "TensorRTBackend" (the class name is the id)."""

    @staticmethod
    def preprocess(edge_program: torch.export.ExportedProgram,
                   compile_specs: list[CompileSpec]) -> PreprocessResult:
        spec = TensorRTCompileSpec.from_compile_specs(compile_specs)
        # In-place cache writes (TensorScatter), else functional ones. Not in fp16/bf16:
        # the cache would be cast at the boundary, so the update could not alias it.
        for tensor_scatter in (True, False) if spec.precision == "fp32" else (False,):
            lifted = lift_state(edge_program, tensor_scatter)  # state as graph I/O (state.py)
            exported = export_onnx(lifted.program, spec.precision)
            profiles = input_profiles(lifted.program)
            state, aliases = None, []
            try:
                if lifted.aliases:  # caller-owned caches: Torch-TensorRT's TR02 form
                    exported.onnx_bytes, exported.edge_node_of, aliases = aliased_io(
                        lifted, exported.onnx_bytes, exported.edge_node_of)
                if lifted.states:
                    state = finish_onnx(lifted, exported.onnx_bytes, exported.edge_node_of)
                    exported.onnx_bytes = state.onnx_bytes
                    exported.edge_node_of = state.edge_node_of
                    profiles = [profiles[i] for i in state.profile_order]
                built = build_engine(exported.onnx_bytes, spec.build_options(), label="delegate",
                                     profiles=profiles, progress=current_progress())
                break
            except (ParseFailure, EngineBuildError):
                if not tensor_scatter or not (lifted.aliases or any(
                        s.kv_update is not None and s.kv_update.scatter for s in lifted.states)):
                    raise  # nothing to fall back from
        model = onnx.load_model_from_string(exported.onnx_bytes)
        bindings = io_bindings(model)
        if state is not None:  # the state pairs are the last inputs/outputs
            bindings = [b for b in bindings
                        if not b["name"].startswith((STATE_INPUT_PREFIX, STATE_OUTPUT_PREFIX))]
        inputs = [b["name"] for b in bindings if b["is_input"]]
        metadata = {
            "io_bindings": bindings,
            **({"aliased_io": aliases} if aliases else {}),
            "profiles": [p.as_dict(n) for n, p in zip(inputs, profiles)],
            "trt_flavor": built.flavor,
            "trt_version": built.version,
            "compute_capabilities": list(built.compute_capabilities or []) or "all",
            "device_id": spec.device_id,
            "precision": spec.precision,
            "onnx_opset": max((o.version for o in model.opset_import
                               if o.domain in ("", "ai.onnx")),
                              default=None),
        }
        if state is not None:
            metadata["state"] = state.entries
        sources = onnx_node_sources(model, exported.edge_node_of)
        if sources:
            metadata["onnx_node_sources"] = sources
        initial_values = state.sections if state is not None else {}  # non-zero states
        return PreprocessResult(processed_bytes=blob.write_blob(built.engine, metadata,
                                                                onnx=exported.onnx_bytes,
                                                                sections=initial_values or None),
                                debug_handle_map=debug_handle_map(edge_program, sources))
