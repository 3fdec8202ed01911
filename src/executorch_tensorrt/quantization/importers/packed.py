"""Checkpoint Linears (PackedWeight) -> the affine format's modules, for export.

A module is a checkpoint Linear when its `.packed` attribute is a
PackedWeight (quantization/packed_linear.PackedLinear, or a reader's own
class offering the same attribute). `lower_packed(model)` returns a
structural copy (tensors shared) in which each becomes formats/affine.py's
AffineLinear, and records a QuantizationPlan line per layer, merged with a
plan the model already has (e.g. quantize() run on its other Linears).
"""
from __future__ import annotations

import dataclasses

import torch

from ..packed_weight import PackedWeight
from ..registry import QuantizationPlan, quantization_plan, shared_copy, steps_of, with_plan


def packed_weight_of(module: torch.nn.Module) -> PackedWeight | None:
    packed = getattr(module, "packed", None)
    return packed if isinstance(packed, PackedWeight) else None


def has_packed_linears(model: torch.nn.Module) -> bool:
    return any(packed_weight_of(m) is not None for m in model.modules())


def _form(weight: PackedWeight) -> str:
    if weight.zero_points is not None:
        return "zero points" + (" and offsets" if weight.offsets is not None else "")
    return "offsets" if weight.offsets is not None else "symmetric codes"


def activation_dtype(model: torch.nn.Module) -> torch.dtype:
    """The model's float dtype, read from its tensors outside checkpoint Linears
    (embeddings, norms); float32 when it has none. A checkpoint's scales may be
    float16 in a float32 model: the lowered layers compute in the model's dtype."""
    packed = {id(t) for m in model.modules() if packed_weight_of(m) is not None
              for t in [*m.parameters(), *m.buffers()]}
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.is_floating_point() and id(tensor) not in packed:
            return tensor.dtype
    return torch.float32


def lower_packed(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` with every checkpoint Linear as an AffineLinear."""
    affine = steps_of("affine")
    dtype = activation_dtype(model)
    # The PackedWeights shared too: a deep copy of their codes would be a second
    # copy of every quantized weight.
    lowered = shared_copy(model, also=[packed_weight_of(m) for m in model.modules()
                                       if packed_weight_of(m) is not None])
    layers: dict[str, str] = {}
    bits = set()
    for name, module in list(lowered.named_modules()):
        for child_name, child in list(module.named_children()):
            weight = packed_weight_of(child)
            if weight is None:
                continue
            full = f"{name}.{child_name}" if name else child_name
            replacement = affine.from_packed(weight, dtype)
            setattr(module, child_name, replacement)
            layers[full] = affine.describe(replacement, _form(weight))
            bits.add(weight.bits)
    plan = quantization_plan(model)
    if plan is None:
        plan = QuantizationPlan(f"int{min(bits, default=4)}_affine_weight_only")
    return with_plan(lowered, dataclasses.replace(plan, layers={**plan.layers, **layers}))
