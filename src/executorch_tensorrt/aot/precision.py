"""Reduced-precision partitions: fp16/bf16 inside the engine, original dtypes at
its boundary, so the ExecuTorch program around the delegate is unchanged.

TensorRT-RTX is strongly typed (the ONNX types decide the engine's precision),
so the partition is re-exported with its floating weights and activations
cast, and casts at the inputs and outputs; standard TensorRT builds the same
model the same way.
"""
from __future__ import annotations

import torch
from torch.utils import _pytree as pytree

from ..errors import ExportError

PRECISION_DTYPES = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}


class _CastBoundary(torch.nn.Module):
    def __init__(self, module: torch.nn.Module, dtype: torch.dtype, out_dtypes: list):
        super().__init__()
        # The program's weights are shared with the caller's model (program_copy.py):
        # convert into new Parameters instead of writing over theirs in place.
        overwrite = torch.__future__.get_overwrite_module_params_on_conversion()
        torch.__future__.set_overwrite_module_params_on_conversion(True)
        try:
            self.module = module.to(dtype)
        finally:
            torch.__future__.set_overwrite_module_params_on_conversion(overwrite)
        self.dtype = dtype
        self.out_dtypes = out_dtypes

    def forward(self, *inputs):
        cast = [x.to(self.dtype) if x.is_floating_point() else x for x in inputs]
        flat, spec = pytree.tree_flatten(self.module(*cast))
        flat = [o.to(d) if isinstance(o, torch.Tensor) and d is not None else o
                for o, d in zip(flat, self.out_dtypes)]
        return pytree.tree_unflatten(flat, spec)


def _example(val) -> torch.Tensor:
    shape = [int(d.node.hint) if isinstance(d, torch.SymInt) else int(d) for d in val.shape]
    return torch.zeros(shape, dtype=val.dtype)


def with_precision(ep: torch.export.ExportedProgram,
                   precision: str) -> torch.export.ExportedProgram:
    """`ep` unchanged for fp32, else re-exported with reduced internal precision."""
    if precision not in PRECISION_DTYPES:
        raise ExportError(f"precision {precision!r} is not one of {sorted(PRECISION_DTYPES)}")
    dtype = PRECISION_DTYPES[precision]
    if dtype is None:
        return ep
    user_inputs = set(ep.graph_signature.user_inputs)
    vals = [n.meta["val"] for n in ep.graph.nodes
            if n.op == "placeholder" and n.name in user_inputs]
    out_node = ep.graph.output_node()
    out_vals = pytree.tree_leaves([a.meta.get("val") if isinstance(a, torch.fx.Node) else a
                                   for a in out_node.args[0]])
    out_dtypes = [v.dtype if isinstance(v, torch.Tensor) else None for v in out_vals]
    dynamic = [{i: torch.export.Dim.AUTO for i, d in enumerate(v.shape)
                if isinstance(d, torch.SymInt)} or None for v in vals]
    wrapper = _CastBoundary(ep.module(), dtype, out_dtypes)
    try:
        return torch.export.export(wrapper, tuple(_example(v) for v in vals),
                                   dynamic_shapes=tuple(dynamic) if any(dynamic) else None)
    except Exception as e:  # noqa: BLE001 - torch.export raises many kinds
        raise ExportError(f"could not re-export the partition in {precision}: {e}") from e
