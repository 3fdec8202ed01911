"""Edge-dialect ExportedProgram -> ONNX, with ONNX nodes mapped back to edge nodes.

Edge nodes are tagged before export (edge_tags.py) and the tags read back
from each ONNX node's `pkg.torch.onnx.stack_trace`. The partitioner's exports
reach preprocess through an explicit cache (export_cache.py), never here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import onnx_ir as ir
import torch
from torch.onnx._internal.exporter import _core

from ...blob.format import NAMED_DATA_LOCATION
from ...quantization.registry import FORMATS
from .edge_tags import edge_name_from_trace, quiet, tag_edge_nodes
from .fusions import fuse
from .precision import with_precision
from .translatable import onnx_registry
from ..weights.content import INLINE_LIMIT, Weight, dtype_name

_TRACE_KEY = "pkg.torch.onnx.stack_trace"


@dataclass
class OnnxExport:
    onnx_bytes: bytes             # stripped of metadata: what is built and embedded
    edge_node_of: dict[int, str]  # ONNX node index -> edge node name
    # Initializers kept out of onnx_bytes (EXTERNAL, location NAMED_DATA_LOCATION),
    # in graph order; empty when exported with weights inline.
    weights: list[Weight] = field(default_factory=list)

    @property
    def weight_bytes(self) -> int:
        return sum(w.nbytes for w in self.weights)


def _strip_metadata(model: ir.Model) -> None:
    """Drops the exporter's metadata (stack traces, names) in place, on the IR:
    no copy of the model, let alone of its weights."""
    model.metadata_props.clear()
    graph = model.graph
    graph.metadata_props.clear()
    for node in graph:
        node.metadata_props.clear()
        node.doc_string = None
    for value in [*graph.inputs, *graph.outputs, *graph.initializers.values()]:
        value.metadata_props.clear()
    for node in graph:
        for value in node.outputs:
            value.metadata_props.clear()


def _weight_value(tensor) -> object:
    """The tensor's own data without a copy: the torch tensor the exporter wraps,
    or (for a constant the optimizer folded) its numpy array."""
    raw = getattr(tensor, "raw", None)
    return raw if isinstance(raw, torch.Tensor) else tensor.numpy()


def _externalize(model: ir.Model) -> list[Weight]:
    """Replaces every initializer of INLINE_LIMIT bytes or more by an EXTERNAL
    reference to the named data, so serializing writes the graph alone."""
    weights = []
    # Quantization scales stay in the graph: TensorRT's parser checks their
    # values (all positive), which the partitioner's zero stand-ins would fail;
    # they are about 1/K of their weights' bytes.
    qdq = [node for node in model.graph
           if node.op_type in ("DequantizeLinear", "QuantizeLinear") and len(node.inputs) > 1
           and node.inputs[1] is not None]
    scales = {node.inputs[1].name for node in qdq}
    # fp4's fp8 block scales: dequantized into another DequantizeLinear's scale.
    scales |= {node.inputs[0].name for node in qdq if node.outputs[0].name in scales}
    for name, value in model.graph.initializers.items():
        tensor = value.const_value
        if tensor is None or tensor.nbytes < INLINE_LIMIT or name in scales:
            continue
        if tensor.dtype == ir.DataType.INT4:  # packed two per byte (quantization/formats/int4.py)
            data, blob_dtype = tensor.raw, "int4"
        elif tensor.dtype == ir.DataType.FLOAT4E2M1:  # packed two per byte (quantization/formats/fp4.py)
            data, blob_dtype = tensor.raw, "float4_e2m1"
        elif tensor.dtype == ir.DataType.FLOAT8E4M3FN:  # FP8 weights (quantization/formats/fp8.py)
            data, blob_dtype = _weight_value(tensor), "float8"
        else:
            data = _weight_value(tensor)
            blob_dtype = dtype_name(data)
        weights.append(Weight(name, data, blob_dtype, tuple(int(d) for d in tensor.shape),
                              int(tensor.nbytes)))
        value.const_value = ir.ExternalTensor(NAMED_DATA_LOCATION, offset=None, length=None,
                                              dtype=tensor.dtype, shape=tensor.shape, name=name)
    return weights


def export_onnx(ep: torch.export.ExportedProgram, precision: str = "fp32", *,
                inline_weights: bool = False) -> OnnxExport:
    """Exports an edge program (or partition) to ONNX with the exporter's optimizer on.

    The optimizer is needed: without it TensorRT rejects Sequence ops and
    reductions whose axes are computed. Chains the edge dialect decomposed
    (GELU, RMS norm, rotary embedding, batched matmul) are folded back into single ops
    (fusions.py). `precision` other than fp32 re-exports
    the program computing in fp16/bf16 (precision.py), and the weights listed
    are the converted ones. Initializers of INLINE_LIMIT bytes or more become
    EXTERNAL references and are returned as `weights` (no protobuf ever holds
    them, so there is no 2 GB limit); `inline_weights=True` keeps them in the
    graph instead (a self-contained ONNX model, < 2 GB only).
    """
    tagged = with_precision(tag_edge_nodes(ep), precision)
    with quiet():
        # torch.onnx.export(dynamo=True) minus rebuilding the registry per call;
        # torch is pinned, so this private entry point is stable for us.
        program = _core.export(tagged, registry=onnx_registry(), optimize=True, verbose=False)
    model = program.model
    fuse(model)
    for fmt in FORMATS.values():  # each format's placeholders -> standard Q/DQ
        lower_onnx = fmt.steps().lower_onnx
        if lower_onnx is not None:
            lower_onnx(model)
    mapping: dict[int, str] = {}
    for i, node in enumerate(model.graph):
        name = edge_name_from_trace(node.metadata_props.get(_TRACE_KEY))
        if name is not None:
            mapping[i] = name
    _strip_metadata(model)
    weights = [] if inline_weights else _externalize(model)
    return OnnxExport(ir.serde.serialize_model(model).SerializeToString(), mapping, weights)


_PROTO_LIMIT = ("the partition's ONNX model is larger than protobuf's 2 GB limit, so it "
                "cannot be serialized for TensorRT's parser")


def export_failure_reason(error: Exception) -> str:
    """Why a partition's ONNX export failed, for the partition report."""
    text = str(error)
    if any(m in text for m in ("Failed to serialize proto", "exceeds maximum protobuf size",
                               "2GB", "2 GB")):
        return f"ONNX export failed: {_PROTO_LIMIT} ({text.splitlines()[0] if text else ''})"
    # torch's exporter wraps the real cause (a translation's own error) in
    # errors whose text is generic advice; the report names the cause.
    cause, node, seen = error, "", {id(error)}
    while cause.__cause__ is not None and id(cause.__cause__) not in seen:
        seen.add(id(cause.__cause__))
        if not node and (line := _translated_node(str(cause))):
            node = line
        cause = cause.__cause__
    text = _ANSI.sub("", str(cause)).strip()
    where = f" (translating {node})" if node and cause is not error else ""
    return f"ONNX export failed: {type(cause).__name__}: {text}{where}"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NODE = re.compile(r"target=([\w.]+)")


def _translated_node(text: str) -> str:
    """The op torch's exporter names in 'Error when translating node ...', or ''."""
    if "Error when translating node" not in text:
        return ""
    match = _NODE.search(text)
    return match.group(1).removeprefix("torch.ops.") if match else ""
