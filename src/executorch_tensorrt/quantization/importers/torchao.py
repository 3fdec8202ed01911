"""torchao-quantized linears -> explicit dequantize ops over plain buffers.

`quantize_(model, config)` leaves tensor subclasses as weights; torch.export
of those gives graphs whose constants the ONNX exporter cannot read ("invalid
python storage"). `lower_torchao(model)` returns a structural copy of the model
(its tensors shared, not copied) in which each such linear holds its quantized
data and scales as buffers and dequantizes them with our ops, the same modules
quantize() builds, and records a QuantizationPlan that export checks against
the TensorRT flavour and targets. Taken:

| torchao weight (config)                                  | becomes                         |
| Int8Tensor (Int8WeightOnlyConfig)                         | int8 per channel (DequantizedLinear) |
| IntxUnpackedToInt8Tensor int8 per axis (IntxWeightOnly)   | int8 per channel                |
| IntxUnpackedToInt8Tensor int4 per group (IntxWeightOnly)  | int4 per group (Int4Linear)     |
| Int8Tensor / IntxUnpackedToInt8Tensor with zero points    | affine int8 per channel or group, |
|   (mapping_type=MappingType.ASYMMETRIC)                   |   int4 per group (AffineLinear) |
| Float8Tensor e4m3 per tensor / per row (Float8WeightOnly) | fp8 weight-only (Fp8WeightLinear) |

Anything else (dynamic activation quantization, other dtypes, block shapes,
other subclasses) raises QuantizationError naming the layer, why, and what to
use instead.
"""
from __future__ import annotations

import torch

from ...errors import QuantizationError
from ..registry import QuantizationPlan, shared_copy, steps_of, with_plan

# The formats' modules through the registry, never a format module by name.
_fp8, _int4, _int8 = steps_of("fp8"), steps_of("int4"), steps_of("int8")
_affine = steps_of("affine")
FP8, Fp8WeightLinear = _fp8.element_dtype, _fp8.linear_module
GROUP_SIZES, Int4Linear = _int4.group_sizes, _int4.linear_module
DequantizedLinear = _int8.linear_module

_SUPPORTED = ("Int8Tensor (Int8WeightOnlyConfig), IntxUnpackedToInt8Tensor int8/int4 "
              "(IntxWeightOnlyConfig), Float8Tensor (Float8WeightOnlyConfig)")
_DYNAMIC = ("torchao dynamic activation quantization computes activation scales at run time; "
            "TensorRT's Q/DQ need constant scales. Use the weight-only config "
            "(Int8WeightOnlyConfig / Float8WeightOnlyConfig), or calibrate static activation "
            "scales with TensorRTQuantizer (PT2E)")


def _torchao_kind(weight) -> str | None:
    name = type(weight).__name__
    module = type(weight).__module__
    return name if module.startswith("torchao") else None


def _asymmetric(zero) -> bool:
    return zero is not None and bool(torch.any(zero != 0))


def _affine_linear(name: str, q, scale, zero, bits: int, group: int,
                   bias) -> tuple[torch.nn.Module, str]:
    """W = (q - zero) * scale with non-zero zero points: TensorRT's symmetric
    GEMM plus a group-sum correction (formats/affine.py), exact."""
    out_features, in_features = q.shape
    if in_features % group:
        raise QuantizationError(f"layer {name!r}: int{bits} groups of {group} do not divide "
                                f"its {in_features} input features")
    shape = (out_features, in_features // group)
    if scale.numel() != shape[0] * shape[1] or zero.numel() != scale.numel():
        raise QuantizationError(f"layer {name!r}: {scale.numel()} scales and {zero.numel()} "
                                f"zero points for {shape[0]} x {shape[1]} groups")
    module = _affine.from_signed(name, q.detach(), scale.detach().reshape(shape),
                                 zero.detach().reshape(shape), bits, group, bias)
    return module, _affine.describe(module, "zero points")


def _per_channel_int8(name: str, q, scale, zero, block, bias) -> tuple[torch.nn.Module, str]:
    if q.dtype != torch.int8 or q.dim() != 2:
        raise QuantizationError(f"layer {name!r}: expected a 2-D int8 weight, got {q.dtype} "
                                f"{tuple(q.shape)}")
    if list(block) != [1, q.shape[1]]:
        raise QuantizationError(
            f"layer {name!r}: int8 block size {list(block)} is not per-channel "
            f"([1, {q.shape[1]}]); TensorRT-RTX takes symmetric int8 weights per output channel "
            "only (per group with zero points: MappingType.ASYMMETRIC)")
    if scale.numel() != q.shape[0]:
        raise QuantizationError(f"layer {name!r}: {scale.numel()} scales for {q.shape[0]} "
                                "output channels")
    if _asymmetric(zero):
        return _affine_linear(name, q, scale, zero, 8, q.shape[1], bias)
    return (DequantizedLinear(q.detach(), scale.detach().reshape(-1).to(torch.float32), bias),
            "int8 weight-only (per channel)")


def _int8_linear(name: str, linear: torch.nn.Linear) -> tuple[torch.nn.Module, str]:
    w = linear.weight
    if getattr(w, "act_quant_kwargs", None) is not None:
        raise QuantizationError(f"layer {name!r}: {_DYNAMIC}")
    if _asymmetric(getattr(w, "zero_point", None)):
        # Int8WeightOnlyConfig is symmetric, and torchao's own int8 linear ignores them.
        raise QuantizationError(
            f"layer {name!r}: an Int8Tensor with non-zero zero points, which torchao's own "
            "linear does not apply; for asymmetric int8 use IntxWeightOnlyConfig("
            "weight_dtype=torch.int8, mapping_type=MappingType.ASYMMETRIC)")
    return _per_channel_int8(name, w.qdata, w.scale, None,
                             getattr(w, "block_size", [1, w.qdata.shape[1]]), linear.bias)


def _intx_linear(name: str, linear: torch.nn.Linear) -> tuple[torch.nn.Module, str]:
    w = linear.weight
    if getattr(w, "activation_quantization", None) is not None:
        raise QuantizationError(f"layer {name!r}: {_DYNAMIC}")
    q, scale, zero, block = w.qdata, w.scale, w.zero_point, list(w.block_size)
    if w.target_dtype not in (torch.int8, torch.int4):
        raise QuantizationError(
            f"layer {name!r}: torchao {w.target_dtype} weights; TensorRT's integer weights are "
            "int8 and int4 only (use weight_dtype=torch.int4 or torch.int8)")
    if w.target_dtype == torch.int8 and _asymmetric(zero) and block[0] == 1:
        return _affine_linear(name, q, scale, zero, 8, block[1], linear.bias)
    if w.target_dtype == torch.int8:
        return _per_channel_int8(name, q, scale, zero, block, linear.bias)
    out_features, in_features = q.shape
    group = block[1]
    if block[0] != 1 or group not in GROUP_SIZES or in_features % group:
        raise QuantizationError(
            f"layer {name!r}: int4 block size {block} is not per group of "
            f"{'/'.join(map(str, GROUP_SIZES))} input features dividing {in_features}; use "
            "granularity=PerGroup(32 | 64 | 128)")
    if int(q.min()) < -8 or int(q.max()) > 7:
        raise QuantizationError(f"layer {name!r}: int4 values outside [-8, 7]")
    if _asymmetric(zero):
        return _affine_linear(name, q, scale, zero, 4, group, linear.bias)
    scale = scale.detach().to(torch.float32).reshape(out_features, in_features // group)
    module = Int4Linear.from_values(q.detach(), scale, group, linear.bias)
    return module, f"int4 weight-only (group {group})"


def _fp8_linear(name: str, linear: torch.nn.Linear) -> tuple[torch.nn.Module, str]:
    w = linear.weight
    if getattr(w, "act_quant_kwargs", None) is not None:
        raise QuantizationError(f"layer {name!r}: {_DYNAMIC}")
    q, scale = w.qdata, w.scale
    if q.dtype != FP8:
        raise QuantizationError(f"layer {name!r}: fp8 weights of {q.dtype}; TensorRT's FP8 is "
                                "e4m3 (weight_dtype=torch.float8_e4m3fn)")
    out_features = q.shape[0]
    if scale.numel() == 1:
        return (Fp8WeightLinear(q.detach(), scale.detach().reshape(()).to(torch.float32),
                                linear.bias), "fp8 weight-only (per tensor)")
    if tuple(scale.shape) != (out_features, 1):
        raise QuantizationError(
            f"layer {name!r}: fp8 scales of shape {tuple(scale.shape)} (per group); TensorRT "
            "takes fp8 weights per tensor or per output channel: use granularity=PerRow() or "
            "PerTensor()")
    return (Fp8WeightLinear(q.detach(), scale.detach().reshape(-1).to(torch.float32),
                            linear.bias), "fp8 weight-only (per channel)")


_LOWERINGS = {"Int8Tensor": _int8_linear, "IntxUnpackedToInt8Tensor": _intx_linear,
              "Float8Tensor": _fp8_linear}


def has_torchao_weights(model: torch.nn.Module) -> bool:
    return any(_torchao_kind(p) for p in model.parameters())


def lower_torchao(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` sharing its tensors, with torchao linears replaced and
    a QuantizationPlan recorded (registry.quantization_plan)."""
    lowered = shared_copy(model)
    layers: dict[str, str] = {}
    for name, module in list(lowered.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            kind = _torchao_kind(getattr(child, "weight", None))
            if kind is None:
                continue
            if not isinstance(child, torch.nn.Linear):
                raise QuantizationError(f"layer {full!r}: torchao weights on a "
                                        f"{type(child).__name__}; only Linear is supported")
            if kind not in _LOWERINGS:
                raise QuantizationError(
                    f"layer {full!r}: torchao {kind} weights are not supported (supported: "
                    f"{_SUPPORTED}; for int4 use IntxWeightOnlyConfig(weight_dtype=torch.int4, "
                    "granularity=PerGroup(64)) or quantize(model, scheme='int4_weight_only')); "
                    "nothing was exported")
            replacement, how = _LOWERINGS[kind](full, child)
            setattr(module, child_name, replacement)
            layers[full] = how
    # The plan's scheme is what export checks the flavour and targets against:
    # fp8 needs SM89+, the integer weight-only schemes run everywhere.
    kinds = {how.split(" ")[0] for how in layers.values()}
    scheme = ("fp8_weight_only" if "fp8" in kinds else
              "int4_weight_only" if kinds == {"int4"} else "int8_weight_only")
    return with_plan(lowered, QuantizationPlan(scheme, layers))
