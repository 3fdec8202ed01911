"""Mixture-of-experts layers of transformers in a form TensorRT takes.

transformers runs its experts (`@use_experts_implementation` classes) through
`grouped_mm` by default: tokens sorted by expert, `histc` offsets, and on the
CPU an opaque custom op (`transformers::grouped_mm_fallback`) that neither
TensorRT's parser nor ExecuTorch's kernels know. transformers' own
`batched_mm` form computes the same sums (each token's experts gathered by
index, one batched matmul, the same reduction over the top-k) with ops
TensorRT takes (Gather, MatMul), so the trace runs with it. Routing (the
router's top-k) is untouched. The model is switched back when the trace ends,
so the eager reference still runs transformers' default code.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from torch import nn

TRACEABLE = "batched_mm"  # transformers' ExpertsInterface name of the gather + bmm form


def _switchable(model: nn.Module) -> list[nn.Module]:
    """The outermost transformers models in `model` whose experts dispatch
    through transformers' experts interface."""
    found: list[nn.Module] = []
    for module in model.modules():
        can_set = getattr(type(module), "_can_set_experts_implementation", None)
        if can_set is None or not hasattr(module, "set_experts_implementation"):
            continue
        if any(module in outer.modules() for outer in found):
            continue  # the outer model switches its submodels itself
        if can_set():
            found.append(module)
    return found


@contextmanager
def traceable_experts(model: nn.Module) -> Iterator[list[str]]:
    """Inside the block, the MoE experts of every transformers model in
    `model` run in the batched_mm form; yields the implementations replaced
    (empty when there was nothing to switch)."""
    switched: list[tuple[nn.Module, dict]] = []
    try:
        for hf in _switchable(model):
            before = hf.get_experts_implementation()
            if all(v in (None, TRACEABLE) for v in before.values()) and before[""] == TRACEABLE:
                continue
            hf.set_experts_implementation(TRACEABLE)
            switched.append((hf, before))
        yield [before[""] or "grouped_mm (default)" for _, before in switched]
    finally:
        for hf, before in reversed(switched):
            hf.set_experts_implementation(before)
