"""Which edge nodes the ONNX exporter can translate, decided without exporting.

One decomposition pass with the exporter's own table, then every op that
remains must have a registered ONNX translation. Looking only at the edge op
is wrong: e.g. `digamma` decomposes to `prims.digamma`, which has none.
"""
from __future__ import annotations

import operator

import torch
from torch.onnx._internal.exporter import _decomp, _registration

from .edge_tags import edge_name_from_trace, quiet, tag_edge_nodes
from ...quantization.registry import FORMATS
from .extra_ops import register_extra_ops

_registry: _registration.ONNXRegistry | None = None


# Edge programs use *_copy variants of view ops; torchlib translates few of
# them (select_copy, slice_copy, ... have none). ONNX has no aliasing, so the
# view op's translation computes exactly the copy's values.
_VIEW_OPS = ("select", "slice", "view", "permute", "expand", "unsqueeze", "squeeze",
             "transpose", "t", "diagonal", "unfold", "alias", "detach", "narrow",
             "split", "split_with_sizes", "unbind", "as_strided")


def _register_copy_ops(registry: _registration.ONNXRegistry) -> None:
    for view in _VIEW_OPS:
        copy_packet = getattr(torch.ops.aten, f"{view}_copy", None)
        view_packet = getattr(torch.ops.aten, view, None)
        if copy_packet is None or view_packet is None:
            continue
        for overload in copy_packet.overloads():
            if overload not in view_packet.overloads():
                continue
            copy_op = getattr(copy_packet, overload)
            view_op = getattr(view_packet, overload)
            if not registry.is_registered(copy_op) and registry.is_registered(view_op):
                registry.register_op(copy_op, registry.get_decomps(view_op)[0].onnx_function,
                                     is_complex=False)


def _register_quantization_ops(registry: _registration.ONNXRegistry) -> None:
    """Every quantization format's ops, with their translations (registry.py)."""
    for fmt in FORMATS.values():
        for target, function in fmt.steps().TRANSLATIONS.items():
            if not registry.is_registered(target):
                registry.register_op(target, function, is_complex=False)


def onnx_registry() -> _registration.ONNXRegistry:
    """torchlib's registry plus the *_copy ops and onnx_extra_ops, built once per
    process (building it takes about a second, which torch.onnx.export would pay
    per call)."""
    global _registry
    if _registry is None:
        with quiet():
            registry = _registration.ONNXRegistry.from_torchlib()
            _register_copy_ops(registry)
            register_extra_ops(registry)
            _register_quantization_ops(registry)
        _registry = registry
    return _registry


def _decompose(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    registry = onnx_registry()
    table = _decomp.create_onnx_friendly_decomposition_table(
        set(_decomp.get_onnx_implemented_overloads(registry)))
    last: Exception | None = None
    # run_decompositions fails every other call on some data-dependent graphs
    # (PendingUnbackedSymbolNotFound, torch 2.13); a retry succeeds.
    for _ in range(2):
        try:
            with quiet():
                return ep.run_decompositions(table)
        except Exception as e:  # noqa: BLE001 - retried, then re-raised
            last = e
    raise last  # type: ignore[misc]


# Runtime checks the exporter drops before translating (they need no ONNX).
_ASSERTIONS = {
    torch.ops.aten._assert_scalar.default, torch.ops.aten._assert_async.default,
    torch.ops.aten._assert_async.msg, torch.ops.aten._assert_tensor_metadata.default,
    torch.ops.aten.sym_constrain_range_for_size.default,
}


def untranslatable_nodes(ep: torch.export.ExportedProgram) -> dict[str, str]:
    """Edge node name -> the op that has no ONNX translation."""
    registry = onnx_registry()
    tagged = tag_edge_nodes(ep)
    try:
        decomposed = _decompose(tagged)
    except Exception:  # noqa: BLE001 - fall back to a per-op answer
        return {n.name: str(n.target) for n in ep.graph.nodes
                if n.op == "call_function" and not _registered(registry, n.target)}
    missing: dict[str, str] = {}
    for node in decomposed.graph.nodes:
        if (node.op != "call_function" or node.target is operator.getitem
                or node.target in _ASSERTIONS):
            continue
        name = edge_name_from_trace(node.meta.get("stack_trace"))
        if name is not None and not _registered(registry, node.target):
            missing.setdefault(name, str(node.target))
    return missing


def aten_op(target):
    """The aten OpOverload behind an edge op (EdgeOpOverload wraps it as `_op`)."""
    if isinstance(target, torch._ops.OpOverload):
        return target
    inner = getattr(target, "_op", None)
    return inner if isinstance(inner, torch._ops.OpOverload) else target


def _registered(registry, target) -> bool:
    if target is operator.getitem:
        return True
    target = aten_op(target)
    try:
        return registry.is_registered(target)
    except Exception:  # noqa: BLE001 - unknown target kinds are not translatable
        return False
