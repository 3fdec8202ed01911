"""FP4 (NVFP4) weight-only quantization of Linear layers, SM120+.

NVFP4's two-level scaling: each weight [out, in] is stored as E2M1 values
(0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives) packed two per byte (ONNX's
FLOAT4E2M1 order: element 2j in the low nibble, like int4's packing), one
FP8 E4M3 scale per block of BLOCK input features, and one float32 scale per
tensor that the block scales are multiplied by. torch 2.13 has
`float4_e2m1fn_x2` but no CPU conversion to it, so rounding to E2M1 (nearest,
ties to even, saturating at 6) is ours.

The model computes `etrt_quant.dequantize_fp4(packed, block_scale,
global_scale)`, whose ONNX translation is a placeholder that `lower_onnx`
turns after export into two chained DequantizeLinear (opset 23, IR 11): the
fp8 block scales dequantized by the float32 scale, then the FLOAT4E2M1 weight
(the packed uint8 initializer reinterpreted, no copy) by those (axis 1,
block_size BLOCK). The eager op computes exactly what they do: one float32
product per block scale, one per weight element.
"""
from __future__ import annotations

import onnx
import onnx_ir as ir
import onnxscript
import torch
import torch.nn.functional as F

from ...dtypes import E2M1_VALUES
from ...errors import QuantizationError
from ..placeholders import (PARAMETER, PLACEHOLDER_DOMAIN, PLACEHOLDER_OPSET, declare_packed,
                            finish_placeholders, fp8_zero, pack_int4, placeholder_nodes,
                            placeholder_op, replace_placeholder, unpack_int4)

BLOCK = 16  # input features per fp8 block scale (NVFP4)
E2M1_MAX = 6.0
FP8_MAX = 448.0
FP8_MIN_SCALE = 2.0 ** -9  # smallest e4m3 subnormal: block scales stay positive
# Midpoints between magnitude codes i and i + 1; a tie goes to the even code.
_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def round_to_e2m1(x: torch.Tensor) -> torch.Tensor:
    """float -> E2M1 codes (uint8 0..15): nearest value, ties to the even
    code, magnitudes above 6 saturated to 6, zero as +0."""
    if not bool(torch.isfinite(x).all()):
        raise QuantizationError("cannot round NaN or infinite values to E2M1")
    m = x.abs().to(torch.float32)
    code = torch.zeros(x.shape, dtype=torch.uint8)
    for i, mid in enumerate(_MIDPOINTS):
        # Even lower code: a tie stays (>); odd lower code: a tie goes up (>=).
        code += (m > mid if i % 2 == 0 else m >= mid).to(torch.uint8)
    return torch.where((x < 0) & (code > 0), code | 8, code)


def e2m1_values(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (any integer dtype, low 4 bits used) -> float32 values."""
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32)
    return table[(codes.to(torch.int64) & 0xF)]


def check_fp4_layer(layer: str, in_features: int) -> None:
    if in_features % BLOCK:
        raise QuantizationError(
            f"layer {layer!r}: fp4 block size {BLOCK} does not divide its {in_features} input "
            "features (NVFP4 has one scale per 16 input features); leave this layer "
            "unquantized or use int8_weight_only")


def quantize_fp4(weight: torch.Tensor, layer: str = "") -> tuple[torch.Tensor, torch.Tensor,
                                                                  torch.Tensor]:
    """A float weight [out, in] -> (packed uint8 [out, in / 2], block scales
    float8_e4m3fn [out, in / 16], global scale float32 0-d)."""
    out_features, in_features = weight.shape
    check_fp4_layer(layer, in_features)
    w = weight.detach().to(torch.float32)
    if not bool(torch.isfinite(w).all()):
        raise QuantizationError(f"layer {layer!r}: its weight holds NaN or infinite values, "
                                "which fp4 cannot represent")
    amax = float(w.abs().max()) if w.numel() else 0.0
    # The largest block scale then reaches FP8_MAX, and its largest weight 6.
    global_scale = torch.tensor(amax / (E2M1_MAX * FP8_MAX) if amax > 0 else 1.0,
                                dtype=torch.float32)
    blocks = w.reshape(out_features, -1, BLOCK)
    wanted = blocks.abs().amax(dim=-1) / E2M1_MAX / global_scale
    block_scale = wanted.clamp(FP8_MIN_SCALE, FP8_MAX).to(torch.float8_e4m3fn)
    effective = _block_scales(block_scale, global_scale)  # what dequantizing multiplies by
    codes = round_to_e2m1(blocks / effective.unsqueeze(-1)).reshape(out_features, in_features)
    return pack_int4(codes).contiguous(), block_scale.contiguous(), global_scale


def _block_scales(block_scale: torch.Tensor, global_scale: torch.Tensor) -> torch.Tensor:
    return block_scale.to(torch.float32) * global_scale.to(torch.float32)


_LIB = torch.library.Library("etrt_quant", "FRAGMENT")
# The block scales cross the op as their uint8 bits: a float8 buffer would be
# converted by module.to(fp16) when an fp16/bf16 export re-traces the model.
_LIB.define("dequantize_fp4(Tensor packed, Tensor block_scale_bits, Tensor global_scale) "
            "-> Tensor")


@torch.library.impl(_LIB, "dequantize_fp4", "CompositeExplicitAutograd")
def _dequantize_fp4(packed: torch.Tensor, block_scale_bits: torch.Tensor,
                    global_scale: torch.Tensor) -> torch.Tensor:
    values = e2m1_values(unpack_int4(packed))
    block_scale = block_scale_bits.view(torch.float8_e4m3fn)
    block = values.shape[1] // block_scale.shape[1]
    weight = values * _block_scales(block_scale, global_scale).repeat_interleave(block, dim=1)
    # In the global scale's dtype, as DequantizeLinear's output (fp16/bf16 exports): each
    # float32 product above is exact, so one rounding, like ONNX's.
    return weight.to(global_scale.dtype)


@torch.library.register_fake("etrt_quant::dequantize_fp4")
def _dequantize_fp4_fake(packed: torch.Tensor, block_scale_bits: torch.Tensor,
                         global_scale: torch.Tensor) -> torch.Tensor:
    return torch.empty((packed.shape[0], packed.shape[1] * 2), dtype=global_scale.dtype,
                       device=packed.device)


DEQUANTIZE_FP4 = torch.ops.etrt_quant.dequantize_fp4.default

FP4_PLACEHOLDER_OP = "DequantizeFp4Packed"
_P = PARAMETER
# A schema of our own, given to onnxscript only (never registered with onnx).
_SCHEMA = onnx.defs.OpSchema(
    FP4_PLACEHOLDER_OP, PLACEHOLDER_DOMAIN, 1,
    inputs=[_P("packed", "tensor(uint8)"), _P("block_scale_bits", "tensor(uint8)"),
            _P("global_scale", "T")],
    outputs=[_P("y", "T")],
    type_constraints=[("T", ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"], "")])
_OP = placeholder_op(FP4_PLACEHOLDER_OP, _SCHEMA)


def _onnx_dequantize_fp4(packed, block_scale_bits, global_scale):
    return _OP(packed, block_scale_bits, global_scale)


TRANSLATIONS = {DEQUANTIZE_FP4: onnxscript.TracedOnnxFunction(PLACEHOLDER_OPSET,
                                                              _onnx_dequantize_fp4)}


class Fp4Linear(torch.nn.Module):
    """y = x @ dequantize_fp4(packed, block scales, global_scale).T + bias."""

    def __init__(self, packed: torch.Tensor, block_scale: torch.Tensor,
                 global_scale: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.register_buffer("qweight_fp4", packed)
        self.register_buffer("block_scale_bits", block_scale.view(torch.uint8))
        self.register_buffer("global_scale", global_scale)
        self.bias = bias

    def dequantized_weight(self) -> torch.Tensor:
        return DEQUANTIZE_FP4(self.qweight_fp4, self.block_scale_bits, self.global_scale)

    def as_float_linear(self) -> torch.nn.Linear:
        """A float Linear over the dequantized weight: what this computes, unquantized."""
        weight = self.dequantized_weight()
        linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=self.bias is not None)
        with torch.no_grad():
            linear.weight.copy_(weight)
            if self.bias is not None:
                linear.bias = self.bias
        return linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.dequantized_weight().to(x.dtype), self.bias)


def _constant(model: ir.Model, value, what: str, node) -> ir.Value:
    if value is None or value.const_value is None or \
            value.name not in model.graph.initializers:
        raise QuantizationError(
            f"an fp4 {what} reached the ONNX model as a computed value ({node.name}), not a "
            "constant; TensorRT needs fp4 weights and their scales as initializers")
    return value


def lower_onnx(model: ir.Model) -> None:
    """Rewrites each fp4 placeholder of an exported model, in place, into
    DequantizeLinear(FLOAT4E2M1 [out, in], DequantizeLinear(block_scale fp8,
    global_scale, zero fp8 0), axis=1, block_size=BLOCK)."""
    nodes = placeholder_nodes(model, FP4_PLACEHOLDER_OP)
    if not nodes:
        return
    for node in nodes:
        packed_value = _constant(model, node.inputs[0], "weight", node)
        block_value = _constant(model, node.inputs[1], "block scale", node)
        global_value = _constant(model, node.inputs[2], "global scale", node)
        declare_packed(packed_value, ir.DataType.FLOAT4E2M1)
        bits = block_value.const_value.numpy()  # the fp8 bits, [out, in / BLOCK]: small
        block_value.const_value = ir.tensor(bits, dtype=ir.DataType.FLOAT8E4M3FN,
                                            name=block_value.name)
        block_value.dtype = ir.DataType.FLOAT8E4M3FN
        zero = fp8_zero(model, f"{node.name}_zero")  # as every fp8 Q/DQ
        scales = ir.node("DequantizeLinear", [block_value, global_value, zero],
                         name=f"{node.name}_block_scales")
        scales.outputs[0].name = f"{node.name}_block_scales"
        scales.outputs[0].dtype = global_value.dtype
        scales.outputs[0].shape = block_value.shape
        weight = ir.node("DequantizeLinear", [packed_value, scales.outputs[0]],
                         attributes={"axis": 1, "block_size": BLOCK}, name=node.name)
        weight.outputs[0].dtype = node.outputs[0].dtype
        weight.outputs[0].shape = packed_value.shape
        replace_placeholder(model, node, weight, before=[scales])
    # FLOAT4E2M1 tensors need opset 23 and IR version 11.
    finish_placeholders(model, opset=23, ir_version=11)


def quantize_linear(linear: torch.nn.Linear, layer: str,
                    group_size: int) -> tuple[torch.nn.Module, str]:
    packed, block_scale, global_scale = quantize_fp4(linear.weight, layer)
    return (Fp4Linear(packed, block_scale, global_scale, linear.bias),
            "fp4 weight-only (NVFP4, block 16)")


quantize_embedding = None
check_options = None

# What the importers would build fp4 layers from (registry.FormatSteps); none
# imports fp4 yet.
linear_module = Fp4Linear
dequantize_weight = DEQUANTIZE_FP4
quantize_activation = None
dequantize_activation = None
element_dtype = None  # packed two per byte
max_value = E2M1_MAX
group_sizes = ()  # fixed blocks of BLOCK features, not a choice of groups
check_group_size = None
quantize_weight = None
