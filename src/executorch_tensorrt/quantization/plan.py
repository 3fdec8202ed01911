"""What a quantization did to a model, recorded on the model it returns
(quantize(), lower_torchao()): export reads it to check the scheme against the
TensorRT flavour and targets and to write the partition report's lines."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

_PLAN_ATTR = "_etrt_quantization_plan"


@dataclass(frozen=True)
class QuantizationPlan:
    """What quantize() did: the scheme and, per Linear (by qualified name),
    how it runs ("int4 weight-only, group 64") or why it was left float."""
    scheme: str
    layers: dict[str, str] = field(default_factory=dict)
    unquantized: dict[str, str] = field(default_factory=dict)  # layer -> why float
    # The quantized layers can run float over their dequantized weights (the
    # same values) where the targets cannot run the scheme, when allowed.
    runs_float: bool = False


def quantization_plan(model: torch.nn.Module) -> QuantizationPlan | None:
    return getattr(model, _PLAN_ATTR, None)


def shared_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A structural copy whose tensors are the model's own (no weight copied)."""
    shared = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    return copy.deepcopy(model, memo=shared)


def with_plan(model: torch.nn.Module, plan: QuantizationPlan) -> torch.nn.Module:
    object.__setattr__(model, _PLAN_ATTR, plan)
    return model
