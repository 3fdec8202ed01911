"""Cache writes at contiguous positions: found in the edge graph, rewritten as
ONNX TensorScatter (opset 24) so the update happens in place.

The pattern: `index_put(buffer, [None] * axis + [positions], update)` (what
`buffer.index_copy_(axis, positions, update)` and `buffer[:, :, positions] =
update` become after to_edge), where `positions` is one of the partition's
inputs and the buffer's old value has no other reader. TensorScatter writes
`update` at `write_indices[b] .. + S` along `axis`, which equals the
index_put only when the positions are contiguous: the executors check that
(and the bounds) before every call, from the "positions" entry recorded here.
TensorRT's parser turns TensorScatter into a KV_CACHE_UPDATE layer whose
output aliases its input; onnxruntime updates the bound buffer in place.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import onnx
import torch
from onnx import helper

if TYPE_CHECKING:
    from .state import LiftedProgram

TENSOR_SCATTER_OPSET = 24
_INDEX_PUT = {"aten.index_put.default", "aten::index_put", "index_put.default"}


@dataclass
class KvUpdate:
    axis: int                 # the sequence axis of the cache
    positions_input: int      # index of the positions among the lifted user inputs
    update_node: str          # the index_put edge node


def _is_index_put(node: torch.fx.Node) -> bool:
    target = getattr(node.target, "_op", node.target)
    name = getattr(target, "name", lambda: str(target))()
    return node.op == "call_function" and ("index_put" in name) and "_index_put_impl" not in name


def find_kv_updates(program: torch.export.ExportedProgram, placeholder: str) -> KvUpdate | None:
    """The contiguous cache write of the state `placeholder`, or None when its
    update has another form (it then stays functional)."""
    nodes = {n.name: n for n in program.graph.nodes}
    buf = nodes.get(placeholder)
    if buf is None or len(buf.users) != 1:
        return None  # the old value has another reader: an in-place write would change it
    put = next(iter(buf.users))
    if not _is_index_put(put) or len(put.args) < 3 or put.args[0] is not buf:
        return None
    if len(put.args) > 3 and put.args[3]:
        return None  # accumulate=True is an add, not a write
    indices = put.args[1]
    tensors = [i for i in indices if i is not None]
    if len(tensors) != 1 or indices[-1] is None:
        return None
    axis = len(indices) - 1
    pos = tensors[0]
    val = buf.meta.get("val")
    if axis == 0 or val is None or axis != val.dim() - 2:
        return None  # TensorScatter writes along axis -2 here, batch on axis 0
    user_inputs = [s.arg.name for s in program.graph_signature.input_specs
                   if s.kind.name == "USER_INPUT"]
    if pos.op != "placeholder" or pos.name not in user_inputs:
        return None
    pos_val = pos.meta.get("val")
    if pos_val is None or pos_val.dtype != torch.int64 or pos_val.dim() != 1:
        return None
    outputs = program.graph.output_node().args[0]
    if put not in list(outputs):
        return None
    return KvUpdate(axis, user_inputs.index(pos.name), put.name)


def rewrite_tensor_scatter(model: onnx.ModelProto, lifted: "LiftedProgram", entries: list[dict],
                           edge_node_of: dict[int, str]) -> dict[int, str]:
    """Records each state's positions input; TensorScatter rewrite: see below."""
    in_order = [i for i in range(len(model.graph.input))]
    del in_order
    for state, entry in zip(lifted.states, entries):
        kv = state.kv_update
        if kv is None:
            continue
        user_names = [v.name for v in model.graph.input][:lifted.user_inputs]
        # lifted user input index -> position among the original user inputs
        lifted_user = [i for i in range(lifted.user_inputs + len(lifted.states))
                       if i not in lifted.state_input_positions]
        if kv.positions_input not in lifted_user:
            continue
        entry["positions"] = {"input": user_names[lifted_user.index(kv.positions_input)],
                              "axis": kv.axis}
    return edge_node_of


def tensor_scatter_node(past: str, update: str, write_indices: str, present: str,
                        axis: int) -> onnx.NodeProto:
    return helper.make_node("TensorScatter", [past, update, write_indices], [present],
                            axis=axis, mode="linear")
