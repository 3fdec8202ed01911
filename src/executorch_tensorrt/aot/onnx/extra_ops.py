"""ONNX translations for ATen ops that torch's exporter has none for.

Each one is written with ONNX operators TensorRT's parser takes, so a
partition that contains the op stays in TensorRT instead of falling to a
kernel the runtime may not have (the PyPI runtime has no `erfinv`).
"""
from __future__ import annotations

from typing import Optional, Sequence

import onnx
import onnxscript
import torch
from onnxscript import BFLOAT16, BOOL, FLOAT, FLOAT16, INT64
from onnxscript.function_libs.torch_lib.ops.core import aten_index_put as torchlib_index_put
from onnxscript.onnx_opset import opset18 as op
from torch.onnx._internal.exporter import _registration

_OPSET = onnxscript.values.Opset(domain="pkg.executorch_tensorrt", version=1)
_FLOATS = (FLOAT.dtype, FLOAT16.dtype, BFLOAT16.dtype)

# M. Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011),
# single-precision version: polynomials in w = -log(1 - x^2), for w < 5 in
# (w - 2.5) and otherwise in (sqrt(w) - 3), highest degree first. Against a
# float64 erfinv it is within 2.7e-7 relative on [-1, 1] (measured over 2M
# points and the tail up to 1 - 1e-8), about what float32 can hold.
_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
            -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
         -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _polynomial(w, coefficients):
    p = op.Constant(value_float=coefficients[0])
    for c in coefficients[1:]:
        p = op.Add(op.Mul(p, w), op.Constant(value_float=c))
    return p


def _erfinv(self):
    """erfinv(Tensor self) -> Tensor, computed in float32: erfinv(+-1) = +-inf,
    NaN outside [-1, 1] (the logarithm of a negative number), as in PyTorch."""
    x = op.Cast(self, to=FLOAT.dtype)
    one = op.Constant(value_float=1.0)
    w = op.Neg(op.Log(op.Mul(op.Sub(one, x), op.Add(one, x))))
    central = _polynomial(op.Sub(w, op.Constant(value_float=2.5)), _CENTRAL)
    tail = _polynomial(op.Sub(op.Sqrt(w), op.Constant(value_float=3.0)), _TAIL)
    y = op.Mul(op.Where(op.Less(w, op.Constant(value_float=5.0)), central, tail), x)
    # At |x| = 1, w is inf and the tail polynomial's sign is not the limit's.
    infinite = op.Mul(x, op.Constant(value_float=float("inf")))
    y = op.Where(op.Equal(op.Abs(x), one), infinite, y)
    return op.CastLike(y, self)


def _copy(self, src, non_blocking: bool = False):
    """copy(Tensor self, Tensor src, bool non_blocking=False) -> Tensor: `src`
    broadcast to self's shape, in self's dtype. torchlib's translation is
    CastLike(src, self), which keeps src's shape: a scalar copied into a slice
    (`m[:, 0:3] = 2.0`, as Swin fills its attention mask) becomes a 0-d value,
    and the ScatterND after it makes TensorRT refuse the whole partition."""
    return op.CastLike(op.Expand(src, op.Shape(self)), self)


def _shape(values: list[int]):
    """An int64 1-D constant, also when empty (the target shape of a 0-d value)."""
    return op.Constant(value=onnx.helper.make_tensor("shape", onnx.TensorProto.INT64,
                                                     [len(values)], values))


def _arg_reduce(onnx_op, self, dim: Optional[int], keepdim: bool):
    """argmax / argmin. TensorRT's ArgMax/ArgMin (a TopK) needs an input of at
    least 2 dimensions, and torchlib flattens to 1-D for `dim=None`: reduce a
    [1, N] view instead, then shape the one index as PyTorch does."""
    rank = len(self.shape)
    if dim is not None and rank >= 2:
        return onnx_op(self, axis=dim, keepdims=int(keepdim))
    flat = op.Reshape(self, op.Constant(value_ints=[1, -1]))
    index = onnx_op(flat, axis=1, keepdims=0)  # shape [1]
    shape = [1] * rank if keepdim else []  # dim=None keeps every dim as 1
    return op.Reshape(index, _shape(shape))


def _argmax(self, dim: Optional[int] = None, keepdim: bool = False) -> INT64:
    """argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"""
    return _arg_reduce(op.ArgMax, self, dim, keepdim)


def _argmin(self, dim: Optional[int] = None, keepdim: bool = False) -> INT64:
    """argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"""
    return _arg_reduce(op.ArgMin, self, dim, keepdim)


def _reduce(onnx_op, self, dim: Sequence[int] | None, keepdim: bool, cast_to: int | None = None):
    """A reduction over `dim`; none or empty reduces every dimension (ONNX's
    reductions without an axes input). torchlib reshapes a missing `dim`, which
    makes an invalid Reshape (mean) or fails to export (amax/amin). `cast_to`:
    the input is converted to that ONNX dtype first."""
    rank = len(self.shape)
    if cast_to is not None:
        self = op.Cast(self, to=cast_to)
    if rank == 0:
        return self
    if not dim:
        return onnx_op(self, keepdims=int(keepdim))
    return onnx_op(self, op.Constant(value_ints=list(dim)), keepdims=int(keepdim))


def _amax(self, dim: Sequence[int] = (), keepdim: bool = False):
    """amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    return _reduce(op.ReduceMax, self, dim, keepdim)


def _amin(self, dim: Sequence[int] = (), keepdim: bool = False):
    """amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    return _reduce(op.ReduceMin, self, dim, keepdim)


_DOUBLE = 11  # onnx.TensorProto.DOUBLE, as the exporter passes `dtype`


def _mean_dim(self, dim: Optional[Sequence[int]] = None, keepdim: bool = False, dtype: int = -1):
    """mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)"""
    if dtype in (-1, None):
        return _reduce(op.ReduceMean, self, dim, keepdim)
    if dtype == _DOUBLE:  # TensorRT has no float64 arithmetic: reduce, then widen
        return op.Cast(_reduce(op.ReduceMean, self, dim, keepdim), to=dtype)
    # PyTorch converts before it averages: an integer input's mean is not truncated.
    return _reduce(op.ReduceMean, self, dim, keepdim, cast_to=dtype)


def _adaptive_avg_pool3d(self, output_size: Sequence[int]):
    """_adaptive_avg_pool3d(Tensor self, SymInt[3] output_size) -> Tensor.
    The mean over a box is the mean over each of its axes in turn, so each
    spatial axis is pooled alone: PyTorch's bins (floor(i*n/out) to
    ceil((i+1)*n/out)) as slices reduced with ReduceMean and concatenated.
    Any size, divisible or not; static spatial sizes only."""
    rank = len(self.shape)
    x = self
    for k, out in enumerate(output_size):
        axis = rank - len(output_size) + k
        size = self.shape[axis]
        if size == out:
            continue
        bins = []
        for start, end in _bins(size, out):
            piece = op.Slice(x, op.Constant(value_ints=[start]), op.Constant(value_ints=[end]),
                             op.Constant(value_ints=[axis]))
            bins.append(op.ReduceMean(piece, op.Constant(value_ints=[axis]), keepdims=1))
        x = op.Concat(*bins, axis=axis) if len(bins) > 1 else bins[0]
    return x if x is not self else op.Identity(self)


def _bins(size, out: int) -> list[tuple[int, int]]:
    """PyTorch's adaptive pooling bins: floor(i*n/out) to ceil((i+1)*n/out)."""
    if not isinstance(size, int):
        raise NotImplementedError("adaptive pooling over a dynamic dimension")
    return [((i * size) // out, -((-(i + 1) * size) // out)) for i in range(out)]


def _ints(values: list[int]):
    return op.Constant(value_ints=values)


def _adaptive_max_pool(self, output_size: Sequence[int]):
    """adaptive_max_pool{2,3}d(Tensor self, int[n] output_size) -> (Tensor, Tensor)
    (1-D pooling reaches the graph as the 2-D op).
    Pooled axis by axis, innermost first: per bin ReduceMax for the value and
    ArgMax (first maximum) for where it is, carrying the flat index within the
    spatial dims through GatherElements. That picks the first maximum in
    (d, h, w) order, as PyTorch's kernel does. torchlib has no translation;
    shapes PyTorch decomposes to max pooling never reach this."""
    rank, n = len(self.shape), len(output_size)
    spatial = list(self.shape[rank - n:])
    values, flat, stride = self, None, 1
    for k in reversed(range(n)):
        axis, axes = rank - n + k, _ints([rank - n + k])
        pooled, where = [], []
        for start, end in _bins(spatial[k], output_size[k]):
            piece = op.Slice(values, _ints([start]), _ints([end]), axes)
            local = op.ArgMax(piece, axis=axis, keepdims=1)
            pooled.append(op.ReduceMax(piece, axes, keepdims=1))
            index = op.Mul(op.Add(local, op.Constant(value_int=start)),
                           op.Constant(value_int=stride))
            if flat is not None:
                inner = op.Slice(flat, _ints([start]), _ints([end]), axes)
                index = op.Add(index, op.GatherElements(inner, local, axis=axis))
            where.append(index)
        values = op.Concat(*pooled, axis=axis) if len(pooled) > 1 else pooled[0]
        flat = op.Concat(*where, axis=axis) if len(where) > 1 else where[0]
        stride *= spatial[k]
    return values, flat


def _index_put(self, indices, values, accumulate: bool = False):
    """index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False).
    Without accumulate: torchlib's translation (ScatterND). With it, torchlib
    emits ScatterND(reduction="add"), which TensorRT's parser refuses; here the
    sum is a matrix product instead: one-hot rows of the flat positions the
    index tensors name ([K, P]), transposed, times the values ([..., K, R]),
    added to self. Repeated indices add up, as in PyTorch. The index tensors
    (integer, static shapes that broadcast together) must index adjacent dims;
    dims before them may be left whole (None), as `fold` (col2im) leaves the
    batch and channel dims."""
    if not accumulate:
        return torchlib_index_put(self, indices, values, accumulate)
    shape = list(self.shape)
    given = [i for i, index in enumerate(indices) if index is not None]
    if (not given or given != list(range(given[0], given[0] + len(given)))
            or any(indices[i].dtype == BOOL.dtype for i in given)
            or not all(isinstance(d, int) for i in given for d in indices[i].shape)
            or not all(isinstance(d, int) for d in shape) or values.dtype not in _FLOATS):
        raise NotImplementedError("accumulating index_put beyond adjacent integer indices "
                                  "of static shapes")
    first, last = given[0], given[-1] + 1
    broadcast = list(torch.broadcast_shapes(*(tuple(indices[i].shape) for i in given)))
    k, before, positions, rest = 1, 1, 1, 1
    for d in broadcast:
        k *= d
    for d in shape[:first]:
        before *= d
    for d in shape[first:last]:
        positions *= d
    for d in shape[last:]:
        rest *= d
    flat, stride = None, 1
    for i in reversed(given):
        size = shape[i]
        index = op.Reshape(op.Expand(op.Cast(indices[i], to=INT64.dtype), _ints(broadcast)),
                           _ints([k]))
        wrapped = op.Where(op.Less(index, op.Constant(value_int=0)),
                           op.Add(index, op.Constant(value_int=size)), index)
        term = op.Mul(wrapped, op.Constant(value_int=stride))
        flat = term if flat is None else op.Add(flat, term)
        stride *= size
    grid = op.Range(op.Constant(value_int=0), op.Constant(value_int=positions),
                    op.Constant(value_int=1))
    one_hot = op.CastLike(op.Equal(op.Unsqueeze(flat, _ints([1])), op.Unsqueeze(grid, _ints([0]))),
                          self)
    rows = op.Reshape(op.Expand(op.CastLike(values, self),
                                _ints([*shape[:first], *broadcast, *shape[last:]])),
                      _ints([before, k, rest]))
    update = op.MatMul(op.Transpose(one_hot, perm=[1, 0]), rows)  # [before, positions, rest]
    return op.Add(self, op.Reshape(update, _ints(shape)))


def _view_of(self):
    """prims.view_of(Tensor a) -> Tensor: a view with the same shape (what a
    squeeze of a dimension that is not 1 decomposes to)."""
    return op.Identity(self)


# Ops torchlib has no translation for.
TRANSLATIONS = {
    torch.ops.aten.erfinv.default: onnxscript.TracedOnnxFunction(_OPSET, _erfinv),
    torch.ops.aten._adaptive_avg_pool3d.default: onnxscript.TracedOnnxFunction(
        _OPSET, _adaptive_avg_pool3d),
    torch.ops.aten.adaptive_max_pool2d.default: onnxscript.TracedOnnxFunction(
        _OPSET, _adaptive_max_pool),
    torch.ops.aten.adaptive_max_pool3d.default: onnxscript.TracedOnnxFunction(
        _OPSET, _adaptive_max_pool),
    torch.ops.prims.view_of.default: onnxscript.TracedOnnxFunction(_OPSET, _view_of),
}
# Ops whose torchlib translation is wrong: ours are registered ahead of it.
OVERRIDES = {
    torch.ops.aten.copy.default: onnxscript.TracedOnnxFunction(_OPSET, _copy),
    torch.ops.aten.argmax.default: onnxscript.TracedOnnxFunction(_OPSET, _argmax),
    torch.ops.aten.argmin.default: onnxscript.TracedOnnxFunction(_OPSET, _argmin),
    torch.ops.aten.amax.default: onnxscript.TracedOnnxFunction(_OPSET, _amax),
    torch.ops.aten.amin.default: onnxscript.TracedOnnxFunction(_OPSET, _amin),
    torch.ops.aten.mean.dim: onnxscript.TracedOnnxFunction(_OPSET, _mean_dim),
    torch.ops.aten.index_put.default: onnxscript.TracedOnnxFunction(_OPSET, _index_put),
}


def register_extra_ops(registry: _registration.ONNXRegistry) -> None:
    for target, function in TRANSLATIONS.items():
        if not registry.is_registered(target):
            registry.register_op(target, function, is_complex=False)
    for target, function in OVERRIDES.items():
        # register_op puts a custom function ahead of torchlib's for dispatch.
        registry.register_op(target, function, is_complex=False)
