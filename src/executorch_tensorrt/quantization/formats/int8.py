"""INT8 weight-only: symmetric int8 weights per output channel (the scheme
int8_weight_only, and the weights of int8_w8a8).

torchao keeps quantized weights as tensor subclasses that torch.export
flattens into an int8 matmul followed by a scale multiply, with storage the
exporter cannot read ("invalid python storage"). We instead give each quantized
layer an explicit `etrt_quant.dequantize_weight(q, scale, axis)` over plain
buffers: ExecuTorch's named data stores `q` as int8 (once), and the ONNX
translation is DequantizeLinear(q, scale, axis) with no zero point (symmetric,
which is all TensorRT's parser takes), so TensorRT sees a weight-only quantized
MatMul. That op is opset 18, so this format needs no rewrite after export.
"""
from __future__ import annotations

import onnxscript
import torch
import torch.nn.functional as F
from onnxscript.onnx_opset import opset18 as op

from ..placeholders import QuantizedEmbedding
from ..registry import mark_read_only

_LIB = torch.library.Library("etrt_quant", "FRAGMENT")
_LIB.define("dequantize_weight(Tensor q, Tensor scale, int axis) -> Tensor")


QUANTIZE_BLOCK_ELEMENTS = 1 << 22  # float32 elements quantized at a time (16 MB)
EAGER_BLOCK_BYTES = 16 * 1024 * 1024  # float32 weight rows dequantized at a time in eager


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
lower_onnx = None  # DequantizeLinear is already standard ONNX


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A float weight [out, in] -> (int8 [out, in], scale float32 [out]), symmetric."""
    w = weight.detach()
    q = torch.empty(w.shape, dtype=torch.int8, device=w.device)
    scale = torch.empty((w.shape[0], 1), dtype=torch.float32, device=w.device)
    # Row blocks: a float32 copy of a whole vocabulary-sized head would be 4x its
    # int8 result held at once; each row's numbers are the same either way.
    rows = max(1, QUANTIZE_BLOCK_ELEMENTS // max(1, w.shape[1]))
    for start in range(0, w.shape[0], rows):
        block = w[start:start + rows].to(torch.float32)
        amax = block.abs().amax(dim=1, keepdim=True)
        s = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
        q[start:start + rows] = torch.clamp(torch.round(block / s), -127, 127).to(torch.int8)
        scale[start:start + rows] = s
    return q, scale.reshape(-1)


class DequantizedLinear(torch.nn.Module):
    """y = x @ dequantize(q, scale).T + bias, with q int8 [out, in], scale [out]."""

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        # never written by a forward: a strict torch.export keeps them by reference
        self.register_buffer("qweight", mark_read_only(q))
        self.register_buffer("weight_scale", mark_read_only(scale))
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if type(x) is torch.Tensor and not torch.compiler.is_compiling():
            # Eager (a reference run): a block of rows dequantized at a time, never
            # the whole float weight (a vocabulary-sized head's is gigabytes).
            rows = max(1, EAGER_BLOCK_BYTES // (4 * self.qweight.shape[1]))
            y = torch.cat([F.linear(x, DEQUANTIZE_WEIGHT(self.qweight[i:i + rows],
                                                         self.weight_scale[i:i + rows], 0))
                           for i in range(0, self.qweight.shape[0], rows)], dim=-1)
            return y if self.bias is None else y + self.bias
        return F.linear(x, DEQUANTIZE_WEIGHT(self.qweight, self.weight_scale, 0), self.bias)


class Int8Embedding(QuantizedEmbedding):
    """Rows dequantized per row."""

    def dequantize_rows(self, qweight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return DEQUANTIZE_WEIGHT(qweight, scale, 0)


def quantize_linear(linear: torch.nn.Linear, layer: str,
                    group_size: int) -> tuple[torch.nn.Module, str]:
    q, scale = quantize_int8(linear.weight)
    return DequantizedLinear(q, scale, linear.bias), "int8 weight-only (per channel)"


def quantize_embedding(embedding: torch.nn.Embedding, layer: str,
                       group_size: int) -> tuple[torch.nn.Module, str]:
    weight = embedding.weight.detach()
    q, scale = quantize_int8(weight)
    return (Int8Embedding(q, scale.to(weight.dtype), embedding.padding_idx),
            "int8 weight-only embedding (per row)")


check_options = None

# What the importers build int8 layers from (registry.FormatSteps).
linear_module = DequantizedLinear
dequantize_weight = DEQUANTIZE_WEIGHT
quantize_activation = None  # int8 activations use standard QuantizeLinear / DequantizeLinear
dequantize_activation = None
element_dtype = torch.int8
max_value = 127.0
group_sizes = ()
check_group_size = None
quantize_weight = None  # per channel, not grouped
