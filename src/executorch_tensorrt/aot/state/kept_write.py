"""States written on a first step only (kept cross-attention keys/values):
found in the edge graph, exported so the update happens in place.

llm/cross_attention.py writes each kept buffer as

    kept = where(first, fresh, buffer[:, :, :S])
    buffer = slice_scatter(buffer, kept, dim=2, start=0, end=S)

a functional form: every step makes a new buffer (its executor alternates
two and copies the whole state). Here that becomes `keep_first(buffer,
fresh, first)`, which exports as one marker node; the attention reads the
marker's output. The ONNX rule `branch_kept_writes` (aot/onnx/
decoder_fusions.py) turns the markers into an If on `first` whose
then-branch projects `fresh` and whose else-branch is an empty update,
written by TensorScatter at position 0 (kv_update.py's marker): the state
is then "in_place", and a later step writes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..onnx.state_markers import KEEP_OP
from .kv_update import marker_translation


@dataclass
class KeptWrite:
    axis: int           # the sequence axis written from position 0
    reader: str         # the edge node reading the buffer's first S positions
    select: str         # the where(first, fresh, read)
    update_node: str    # the slice_scatter writing the buffer (the state's new value)


def _op(node: torch.fx.Node) -> str:
    target = getattr(node.target, "_op", node.target)
    return getattr(target, "__name__", str(target)) if node.op == "call_function" else ""


def _one_bool(node) -> bool:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val is not None and val.dtype == torch.bool and val.numel() == 1


def find_kept_write(program: torch.export.ExportedProgram, placeholder: str) -> KeptWrite | None:
    """The first-step write of the state `placeholder`, or None when its update
    has another form (it then stays functional)."""
    nodes = {n.name: n for n in program.graph.nodes}
    buf = nodes.get(placeholder)
    if buf is None or len(buf.users) != 2:
        return None
    scatter = next((u for u in buf.users if _op(u).startswith("slice_scatter")), None)
    reader = next((u for u in buf.users if u is not scatter), None)
    if scatter is None or reader is None or scatter.args[0] is not buf:
        return None
    dim, start = (list(scatter.args[2:4]) + [0, 0])[:2]
    if dim != 2 or start not in (0, None) or (len(scatter.args) > 5 and scatter.args[5] != 1):
        return None
    if _op(reader).startswith("slice_copy"):
        if list(reader.args[1:3]) != [2, 0] or (len(reader.args) > 4 and reader.args[4] != 1):
            return None
    elif not _op(reader).startswith("alias_copy"):
        return None
    select = scatter.args[1]
    if (not isinstance(select, torch.fx.Node) or not _op(select).startswith("where")
            or select.args[2] is not reader or len(reader.users) != 1
            or not _one_bool(select.args[0])):
        return None
    output = program.graph.output_node()
    if set(scatter.users) != {output} or scatter not in list(output.args[0]):
        return None  # the new value is the state's, read by nothing else
    return KeptWrite(2, reader.name, select.name, scatter.name)


@torch.library.custom_op("executorch_tensorrt::keep_first", mutates_args=())
def keep_first(cache: torch.Tensor, fresh: torch.Tensor, first: torch.Tensor,
               axis: int) -> torch.Tensor:
    """`cache` with `fresh` written from position 0 along `axis` when `first`
    holds, else `cache` (a new tensor): the where + slice_scatter it replaces."""
    out = cache.clone()
    if bool(first.reshape(-1)[0]):
        out.narrow(axis, 0, fresh.shape[axis]).copy_(fresh)
    return out


@keep_first.register_fake
def _(cache, fresh, first, axis):
    return torch.empty_like(cache)


def mark_kept_writes(gm: torch.fx.GraphModule, writes: list[KeptWrite]) -> None:
    """Replaces each matched write in `gm` (a copy) by keep_first; the
    attention then reads the marker's output."""
    from ..onnx.translatable import onnx_registry

    registry = onnx_registry()
    op = torch.ops.executorch_tensorrt.keep_first.default
    if not registry.is_registered(op):
        registry.register_op(op, marker_translation(KEEP_OP, "fresh", "first", ["tensor(bool)"]),
                             is_complex=False)
    nodes = {n.name: n for n in gm.graph.nodes}
    for write in writes:
        scatter, select, reader = (nodes[write.update_node], nodes[write.select],
                                   nodes[write.reader])
        first, fresh = select.args[:2]
        with gm.graph.inserting_after(select):  # before the attention reading `select`
            new = gm.graph.call_function(op, (scatter.args[0], fresh, first, write.axis))
        new.meta = dict(scatter.meta)
        scatter.replace_all_uses_with(new)
        gm.graph.erase_node(scatter)
        # the attention reads the kept positions of the new value, not the where
        reader.replace_input_with(reader.args[0], new)
        new.append(reader)  # reader after its new input: the graph stays in order
        select.replace_all_uses_with(reader)
        gm.graph.erase_node(select)
        write.update_node = new.name
    gm.recompile()
