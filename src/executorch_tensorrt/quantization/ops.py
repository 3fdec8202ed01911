"""The one dequantize op a quantized weight reaches the ONNX exporter through.

torchao keeps quantized weights as tensor subclasses that torch.export flattens
into an int8 matmul followed by a scale multiply, with storage the exporter
cannot read ("invalid python storage"). We instead give each quantized linear
an explicit `etrt_quant.dequantize_weight(q, scale, axis)` over plain buffers:
ExecuTorch's named data stores `q` as int8 (once), and the ONNX translation is
DequantizeLinear(q, scale, axis) with no zero point (symmetric, which is all
TensorRT's parser takes), so TensorRT sees a weight-only quantized MatMul.
"""
from __future__ import annotations

import onnxscript
import torch
from onnxscript.onnx_opset import opset18 as op

_LIB = torch.library.Library("etrt_quant", "DEF")
_LIB.define("dequantize_weight(Tensor q, Tensor scale, int axis) -> Tensor")


def _scale_view(q: torch.Tensor, scale: torch.Tensor, axis: int) -> torch.Tensor:
    shape = [1] * q.dim()
    shape[axis] = q.shape[axis]
    return scale.reshape(shape)


@torch.library.impl(_LIB, "dequantize_weight", "CompositeExplicitAutograd")
def _dequantize_weight(q: torch.Tensor, scale: torch.Tensor, axis: int) -> torch.Tensor:
    return q.to(scale.dtype) * _scale_view(q, scale, axis)


@torch.library.register_fake("etrt_quant::dequantize_weight")
def _dequantize_weight_fake(q: torch.Tensor, scale: torch.Tensor, axis: int) -> torch.Tensor:
    return torch.empty(q.shape, dtype=scale.dtype, device=q.device)


DEQUANTIZE_WEIGHT = torch.ops.etrt_quant.dequantize_weight.default

_OPSET = onnxscript.values.Opset(domain="pkg.executorch_tensorrt.quant", version=1)


def _onnx_dequantize_weight(q, scale, axis: int):
    """Per-channel DequantizeLinear, zero point omitted (= 0, symmetric)."""
    return op.DequantizeLinear(q, scale, axis=axis)


TRANSLATIONS = {DEQUANTIZE_WEIGHT: onnxscript.TracedOnnxFunction(_OPSET, _onnx_dequantize_weight)}


def register_quant_ops(registry) -> None:
    for target, function in TRANSLATIONS.items():
        if not registry.is_registered(target):
            registry.register_op(target, function, is_complex=False)
