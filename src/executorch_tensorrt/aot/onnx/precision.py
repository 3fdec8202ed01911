"""Reduced-precision partitions: fp16/bf16 inside the engine, original dtypes at
its boundary, so the ExecuTorch program around the delegate is unchanged.

TensorRT-RTX is strongly typed (the ONNX types decide the engine's precision),
so the partition is re-exported with its floating weights and activations
cast, and casts at the inputs and outputs; standard TensorRT builds the same
model the same way.
"""
from __future__ import annotations

import functools

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from ...errors import ExportError

PRECISION_DTYPES = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}


class _CastBoundary(torch.nn.Module):
    def __init__(self, module: torch.nn.Module, dtype: torch.dtype, out_dtypes: list):
        super().__init__()
        # Weights and buffers become `dtype`, as with module.to(dtype) in eager.
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
        cast = [x.to(self.dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                for x in inputs]
        flat, spec = pytree.tree_flatten(self.module(*cast))
        flat = [o.to(d) if isinstance(o, torch.Tensor) and d is not None else o
                for o, d in zip(flat, self.out_dtypes)]
        return pytree.tree_unflatten(flat, spec)


# Ops that write into their first argument (or return it updated): a value of
# another dtype is cast to the destination's, never the destination itself.
_DESTINATION_FIRST = {"index_put", "index_put_", "index_copy", "index_copy_", "copy", "copy_",
                      "slice_scatter", "select_scatter", "scatter", "scatter_"}


# Ops TensorRT types strictly: every floating operand of one type (an
# INormalizationLayer refuses a float input with half scales, a matrix multiply
# or an elementwise layer mixed operands, IGridSampleLayer an input and a grid
# of two types). PyTorch accepts some of them mixed (it promotes, or follows
# the input's type), or its fake tensors do not check, so the trace does not raise.
_STRICT = {"native_layer_norm", "layer_norm", "native_group_norm", "group_norm",
           "native_batch_norm", "_native_batch_norm_legit_no_training", "_native_batch_norm_legit",
           "batch_norm", "instance_norm", "rms_norm", "_fused_rms_norm",
           "mm", "bmm", "addmm", "baddbmm", "matmul", "linear", "convolution", "conv1d",
           "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
           "add", "sub", "rsub", "mul", "div", "pow", "maximum", "minimum", "fmod",
           "remainder", "atan2", "where", "lerp", "addcmul", "addcdiv", "cat", "stack",
           "eq", "ne", "lt", "le", "gt", "ge", "clamp", "copysign", "hypot",
           "grid_sampler", "grid_sampler_2d", "grid_sampler_3d"}


class _MatchDtypes(TorchFunctionMode):
    """Re-traces a graph whose casts were recorded at fp32: `cos.to(x.dtype)`
    became `to(float32)`, so with fp16 weights an op such as bmm meets an fp32
    and an fp16 operand. A write (index_put, copy) gets its value cast to the
    destination's dtype, always (fake tensors do not check it). Where an op
    TensorRT types strictly meets mixed operands, they are cast to the dtype
    PyTorch computes it in (a LayerNorm follows its input, an add promotes),
    so what a model computes in fp32 on purpose stays fp32 and the ONNX node
    sees one type; an op PyTorch refuses mixed is computed in `dtype`."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        floats = {a.dtype for a in pytree.tree_leaves((args, kwargs))
                  if isinstance(a, torch.Tensor) and a.is_floating_point()}
        if len(floats) < 2:
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "").split(".")[0]
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if name in _DESTINATION_FIRST and first is not None:
            return func(first, *_cast(args[1:], first.dtype), **_cast(kwargs, first.dtype))
        try:
            out = func(*args, **kwargs)
        except RuntimeError as e:
            if "type" not in str(e):
                raise
            return func(*_cast(args, self.dtype), **_cast(kwargs, self.dtype))
        if name not in _STRICT:
            return out
        computed = next((o.dtype for o in pytree.tree_leaves(out)
                         if isinstance(o, torch.Tensor) and o.is_floating_point()), None)
        if computed is None:  # a comparison: operands in their promoted type
            computed = functools.reduce(torch.promote_types, floats)
        # The first attempt is left unused and removed with the dead code.
        return func(*_cast(args, computed), **_cast(kwargs, computed))


def _cast(tree, dtype: torch.dtype):
    return pytree.tree_map(lambda a: a.to(dtype) if isinstance(a, torch.Tensor)
                           and a.is_floating_point() and a.dtype != dtype else a, tree)


def _hint(d) -> int:
    return int(d.node.hint) if isinstance(d, torch.SymInt) else int(d)


def _example(val) -> torch.Tensor | int:
    """An input like the partition's: zeros of its (hinted) shape, or a size
    the partition takes as a number (a SymInt input: `x.shape[1]` upstream)."""
    if not isinstance(val, torch.Tensor):
        return _hint(val)
    return torch.zeros([_hint(d) for d in val.shape], dtype=val.dtype)


def _dynamic(val):
    if not isinstance(val, torch.Tensor):
        return torch.export.Dim.AUTO if isinstance(val, torch.SymInt) else None
    return {i: torch.export.Dim.AUTO for i, d in enumerate(val.shape)
            if isinstance(d, torch.SymInt)} or None


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
    dynamic = [_dynamic(v) for v in vals]
    wrapper = _CastBoundary(ep.module(), dtype, out_dtypes)
    try:
        # forward(*inputs): the varargs are one argument, so their shapes are one entry.
        with _MatchDtypes(dtype):
            reduced = torch.export.export(wrapper, tuple(_example(v) for v in vals),
                                          dynamic_shapes=(tuple(dynamic),) if any(dynamic)
                                          else None)
    except Exception as e:  # noqa: BLE001 - torch.export raises many kinds
        raise ExportError(f"could not re-export the partition in {precision}: {e}") from e
    # An op _MatchDtypes retried left its refused first attempt in the graph, unused.
    reduced.graph.eliminate_dead_code()
    reduced.graph_module.recompile()
    return reduced
