"""Edge-dialect ExportedProgram -> ONNX, with ONNX nodes mapped back to edge nodes.

Edge nodes are tagged through `meta["stack_trace"]` before export: the
exporter copies each FX node's stack trace into the ONNX node's metadata
(`pkg.torch.onnx.stack_trace`), and decompositions keep it, so the tag
survives re-tracing, where FX node names do not.
"""
from __future__ import annotations

import contextlib
import copy
import io
import logging
import warnings
from dataclasses import dataclass

import onnx
import torch
from torch.onnx._internal.exporter import _core

from .precision import with_precision
from .program_copy import copy_program

TAG_PREFIX = "etrt-node:"
_TRACE_KEY = "pkg.torch.onnx.stack_trace"


@dataclass
class OnnxExport:
    onnx_bytes: bytes             # stripped of metadata: what is built and embedded
    edge_node_of: dict[int, str]  # ONNX node index -> edge node name


def tag_edge_nodes(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """A deep copy of `ep` whose call_function nodes carry their name as a tag."""
    tagged = copy_program(ep)
    for node in tagged.graph.nodes:
        if node.op == "call_function":
            node.meta["stack_trace"] = TAG_PREFIX + node.name
    return tagged


def edge_name_from_trace(trace: str | None) -> str | None:
    if trace and trace.startswith(TAG_PREFIX):
        return trace[len(TAG_PREFIX):]
    return None


@contextlib.contextmanager
def quiet():
    """Silences the exporter's progress prints and warnings."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "onnxscript", "torch.export")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def strip_metadata(model: onnx.ModelProto) -> onnx.ModelProto:
    stripped = copy.deepcopy(model)
    stripped.ClearField("metadata_props")
    graph = stripped.graph
    for node in graph.node:
        node.ClearField("metadata_props")
        node.doc_string = ""
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        value.ClearField("metadata_props")
    for init in graph.initializer:
        init.ClearField("metadata_props")
    return stripped


def export_onnx(ep: torch.export.ExportedProgram, precision: str = "fp32") -> OnnxExport:
    """Exports an edge program (or partition) to ONNX with the exporter's optimizer on.

    The optimizer is needed: without it TensorRT rejects Sequence ops and
    reductions whose axes are computed. `precision` other than fp32 re-exports
    the program computing in fp16/bf16 (precision.py).
    """
    tagged = with_precision(tag_edge_nodes(ep), precision)
    from .translatable import onnx_registry

    with quiet():
        # torch.onnx.export(dynamo=True) minus rebuilding the registry per call;
        # torch is pinned, so this private entry point is stable for us.
        program = _core.export(tagged, registry=onnx_registry(), optimize=True, verbose=False)
    model = program.model_proto
    mapping: dict[int, str] = {}
    for i, node in enumerate(model.graph.node):
        props = {p.key: p.value for p in node.metadata_props}
        name = edge_name_from_trace(props.get(_TRACE_KEY))
        if name is not None:
            mapping[i] = name
    stripped = strip_metadata(model)
    return OnnxExport(stripped.SerializeToString(), mapping)
