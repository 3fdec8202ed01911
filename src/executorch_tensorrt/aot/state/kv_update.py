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

import copy

import onnx
import torch
from onnx import helper

from ...dtypes import EXPORT_DTYPES
from ..onnx.state_markers import MARKER_DOMAIN, MARKER_OP
from .lifted import KvUpdate, LiftedProgram

TENSOR_SCATTER_OPSET = 24


def _is_index_put(node: torch.fx.Node) -> bool:
    target = getattr(node.target, "_op", node.target)
    name = getattr(target, "name", lambda: str(target))()
    return node.op == "call_function" and ("index_put" in name) and "_index_put_impl" not in name


def _op_name(node) -> str:
    target = getattr(node.target, "_op", node.target)
    return getattr(target, "__name__", str(target))


def _positions_source(index: torch.fx.Node) -> torch.fx.Node | None:
    """The input whose values are the write positions: the index itself, or P for
    an index computed as `P[0] + arange(0, n)` (transformers' static cache writes
    at `cumulative_length + arange(S)` with cumulative_length = cache_position[0])."""
    if index.op == "placeholder":
        return index
    if index.op != "call_function" or not _op_name(index).startswith("add.Tensor"):
        return None
    a, b = index.args[:2]
    for ramp, start in ((a, b), (b, a)):
        if not (isinstance(ramp, torch.fx.Node) and isinstance(start, torch.fx.Node)):
            continue
        if not _op_name(ramp).startswith("arange") or ramp.args[0] != 0 or \
                (len(ramp.args) > 2 and ramp.args[2] != 1):
            continue
        while start.op == "call_function" and _op_name(start).startswith("copy."):
            start = start.args[1]  # copy(buffer, src) has src's value
        if start.op == "call_function" and _op_name(start).startswith("select_copy") and \
                tuple(start.args[1:3]) == (0, 0) and isinstance(start.args[0], torch.fx.Node):
            return start.args[0]
    return None


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
    if val is None or axis == 0:
        return None
    user_inputs = [s.arg.name for s in program.graph_signature.input_specs
                   if s.kind.name == "USER_INPUT"]
    pos = _positions_source(pos)
    if pos is None or pos.op != "placeholder" or pos.name not in user_inputs:
        return None
    pos_val = pos.meta.get("val")
    if pos_val is None or pos_val.dtype != torch.int64 or pos_val.dim() != 1:
        return None
    outputs = program.graph.output_node().args[0]
    if put not in list(outputs):
        return None
    # TensorRT's KV_CACHE_UPDATE takes [B, heads, length, head_dim] caches only.
    return KvUpdate(axis, user_inputs.index(pos.name), put.name, val.dim() == 4 and axis == 2)




@torch.library.custom_op("executorch_tensorrt::kv_cache_update", mutates_args=())
def kv_cache_update(cache: torch.Tensor, update: torch.Tensor, positions: torch.Tensor,
                    axis: int) -> torch.Tensor:
    """`cache` with `update` written at `positions` along `axis` (a new tensor): the
    index_put it replaces, as one op the ONNX export keeps whole."""
    out = cache.clone()
    out.index_copy_(axis, positions, update)
    return out


@kv_cache_update.register_fake
def _(cache, update, positions, axis):
    return torch.empty_like(cache)


def marker_translation(op: str, second: str, third: str, third_types: list[str]):
    """The ONNX translation of a state marker: one node `op`(cache, `second`,
    `third`; axis) in MARKER_DOMAIN, its output of the cache's type. onnxscript
    builds nodes only for ops with a schema, so the marker is given one."""
    import onnxscript
    from onnx import defs

    if not defs.has(op, MARKER_DOMAIN):
        P = defs.OpSchema.FormalParameter
        defs.register_schema(defs.OpSchema(
            op, MARKER_DOMAIN, 1, inputs=[P("cache", "T"), P(second, "T"), P(third, "X")],
            outputs=[P("updated", "T")],
            type_constraints=[("T", _TENSOR_TYPES, "cache type"),
                              ("X", third_types, third)],
            attributes=[defs.OpSchema.Attribute("axis", defs.OpSchema.AttrType.INT, "axis")]))
    marker = onnxscript.values.Opset(MARKER_DOMAIN, 1)

    def marker_onnx(cache, value, where, axis: int):
        return getattr(marker, op)(cache, value, where, axis=axis)

    marker_onnx.__name__ = f"{op}_onnx"
    return onnxscript.TracedOnnxFunction(onnxscript.values.Opset("pkg.executorch_tensorrt", 1),
                                         marker_onnx)


# ONNX type strings of dtypes.py's exported rows ("tensor(float)", ...).
_TENSOR_TYPES = [f"tensor({onnx.TensorProto.DataType.Name(d.onnx).lower()})"
                 for d in EXPORT_DTYPES]


def mark_kv_updates(gm: torch.fx.GraphModule, updates: list[KvUpdate]) -> None:
    """Replaces each matched index_put in `gm` (a copy) by kv_cache_update, which
    exports as one marker node that rewrite_tensor_scatter turns into TensorScatter."""
    from ..onnx.translatable import onnx_registry

    registry = onnx_registry()
    op = torch.ops.executorch_tensorrt.kv_cache_update.default
    if not registry.is_registered(op):
        registry.register_op(op, marker_translation(MARKER_OP, "update", "positions",
                                                    ["tensor(int64)"]), is_complex=False)
    nodes = {n.name: n for n in gm.graph.nodes}
    for kv in updates:
        put = nodes[kv.update_node]
        cache, indices, update = put.args[:3]
        positions = [i for i in indices if i is not None][0]
        with gm.graph.inserting_before(put):
            new = gm.graph.call_function(op, (cache, update, positions, kv.axis))
        new.meta = dict(put.meta)
        put.replace_all_uses_with(new)
        gm.graph.erase_node(put)
        kv.update_node = new.name
    gm.recompile()


def rewrite_tensor_scatter(model: onnx.ModelProto, lifted: LiftedProgram, entries: list[dict],
                           edge_node_of: dict[int, str]) -> dict[int, str]:
    """Records each cache's positions input and turns its marker node into
    TensorScatter (the model moves to opset 24); returns the node map with the
    indices of the rewritten model."""
    user_names = [v.name for v in model.graph.input][:lifted.user_inputs]
    lifted_user = [i for i in range(lifted.user_inputs + len(lifted.states))
                   if i not in lifted.state_input_positions]
    for state, entry in zip(lifted.states, entries):
        kv = state.kv_update
        if kv is None or kv.positions_input not in lifted_user:
            continue
        entry["positions"] = {"input": user_names[lifted_user.index(kv.positions_input)],
                              "axis": kv.axis}
    is_marker = lambda n: n.domain == MARKER_DOMAIN and n.op_type == MARKER_OP  # noqa: E731
    if not any(is_marker(n) for n in model.graph.node):
        return edge_node_of
    count = len(model.graph.node)
    raise_opset(model, TENSOR_SCATTER_OPSET)
    g = model.graph  # CopyFrom above replaced the graph message
    if len(g.node) != count:  # the converter rewrote nodes: the index map no longer holds
        edge_node_of = {}
    markers = {i for i, n in enumerate(g.node) if is_marker(n)}
    by_output = {e["onnx_output"]: e for e in entries}
    new_nodes, new_map = [], {}
    for i, node in enumerate(g.node):
        if i not in markers:
            if i in edge_node_of:
                new_map[len(new_nodes)] = edge_node_of[i]
            new_nodes.append(copy.deepcopy(node))
            continue
        past, update, positions = node.input
        axis = next(a.i for a in node.attribute if a.name == "axis")
        widx = node.output[0] + ".write_index"
        start = node.output[0] + ".start"
        g.initializer.extend([helper.make_tensor(start + "s", onnx.TensorProto.INT64, [1], [0]),
                              helper.make_tensor(start + "e", onnx.TensorProto.INT64, [1], [1])])
        # TensorScatter takes one write index per batch row ([B]); every row
        # writes at the first position (the positions are shared by the batch).
        batch = _rank_of(g, past)[0]
        one_row = batch.HasField("dim_value") and batch.dim_value == 1
        first = widx if one_row else widx + ".first"
        new_nodes.append(helper.make_node("Slice", [positions, start + "s", start + "e"], [first]))
        if not one_row:
            rows = start + ".rows"
            if batch.HasField("dim_value"):
                g.initializer.append(helper.make_tensor(rows, onnx.TensorProto.INT64, [1],
                                                        [batch.dim_value]))
            else:
                new_nodes.append(helper.make_node("Shape", [past], [rows], start=0, end=1))
            new_nodes.append(helper.make_node("Expand", [first, rows], [widx]))
        if i in edge_node_of:
            new_map[len(new_nodes)] = edge_node_of[i]
        new_nodes.append(helper.make_node("TensorScatter", [past, update, widx], list(node.output),
                                          axis=axis - len(_rank_of(g, past)), mode="linear"))
        entry = by_output.get(node.output[0])
        if entry is not None:
            entry["update"] = "in_place"
    replace_nodes(model, new_nodes)
    return new_map


def replace_nodes(model: onnx.ModelProto, nodes: list) -> None:
    """The graph's nodes become `nodes`; the marker's domain and function go
    once no node uses them."""
    g = model.graph
    del g.node[:]
    g.node.extend(nodes)
    for imp in list(model.opset_import):
        if imp.domain in (MARKER_DOMAIN, "pkg.executorch_tensorrt") and not any(
                n.domain == imp.domain for n in g.node):
            model.opset_import.remove(imp)
    for f in list(model.functions):
        if f.domain == MARKER_DOMAIN:
            model.functions.remove(f)


def _rank_of(g: onnx.GraphProto, name: str) -> list:
    for v in list(g.input) + list(g.value_info) + list(g.output):
        if v.name == name:
            return list(v.type.tensor_type.shape.dim)
    raise ValueError(f"no shape recorded for the cache value {name!r}")


def raise_opset(model: onnx.ModelProto, version: int) -> None:
    """Moves the model to `version` of the default domain; a model the converter
    cannot move raises EngineBuildError, so preprocess keeps the functional form."""
    from ...errors import EngineBuildError

    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx") and imp.version < version:
            try:
                converted = onnx.version_converter.convert_version(model, version)
            except Exception as e:  # noqa: BLE001 - the converter raises several kinds
                raise EngineBuildError(f"the partition's ONNX model could not move to opset "
                                       f"{version} (TensorScatter, fp8 caches): {e}") from None
            model.CopyFrom(converted)
            return
