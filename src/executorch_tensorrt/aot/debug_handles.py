"""Where profiling events come from in the exported graph (docs/profiling.md).

The runtime names each ETDump event of a TensorRT partition by a stage of the
call ("run", "bind", ...) or by an ONNX node (per-node profiling; TensorRT
names its layers after them). preprocess returns a debug_handle_map from each
such name to the debug handles of the edge nodes it covers, which ExecuTorch
stores with the delegate call and Inspector uses to attach events to nodes:
a stage covers the whole partition, an ONNX node the edge nodes it was
exported from. The ONNX -> edge node names also go into the blob
("onnx_node_sources"), so the table survives without the ETRecord.
"""
from __future__ import annotations

import onnx
import torch

from ..runtime.profiling import STAGE_NAMES


def onnx_node_sources(model: onnx.ModelProto, edge_node_of: dict[int, str]) -> list[dict]:
    """[{"node": ONNX node name, "edge_nodes": [edge node names]}] for the named
    ONNX nodes whose edge node is known (export_onnx's tags)."""
    sources = []
    for i, node in enumerate(model.graph.node):
        edge = edge_node_of.get(i)
        if node.name and edge is not None and node.name not in STAGE_NAMES:
            sources.append({"node": node.name, "edge_nodes": [edge]})
    return sources


def debug_handle_map(edge_program: torch.export.ExportedProgram,
                     sources: list[dict]) -> dict[str, tuple[int, ...]]:
    """Event name -> debug handles of the partition's edge nodes."""
    handle_of = {}
    for node in edge_program.graph.nodes:
        handle = node.meta.get("debug_handle")
        if node.op == "call_function" and isinstance(handle, int):
            handle_of[node.name] = handle
    everything = tuple(sorted(set(handle_of.values())))
    result: dict[str, tuple[int, ...]] = {}
    if everything:
        result.update({stage: everything for stage in STAGE_NAMES})
    for entry in sources:
        handles = tuple(sorted({handle_of[e] for e in entry["edge_nodes"] if e in handle_of}))
        if handles:
            result[entry["node"]] = handles
    return result
