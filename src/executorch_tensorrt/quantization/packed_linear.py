"""A Linear whose weight is a published checkpoint's PackedWeight, never a float copy.

`PackedLinear(weight)` keeps the PackedWeight as `.packed` (what the int4/int8
lowering reads); its eager forward dequantizes `ROWS` output features at a
time, so a reference run never holds the whole float weight either.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from .packed_weight import PackedWeight

ROWS = 1024  # output features dequantized at once in the eager forward


class PackedLinear(torch.nn.Module):
    def __init__(self, weight: PackedWeight):
        super().__init__()
        weight.check()
        self.packed = weight
        self.in_features, self.out_features = weight.in_features, weight.out_features

    def rows(self, start: int, stop: int) -> PackedWeight:
        """The PackedWeight of output features start..stop (views, no copy)."""
        p = self.packed
        pick = lambda t: None if t is None else t[start:stop]
        return replace(p, out_features=stop - start, codes=pick(p.codes), scales=pick(p.scales),
                       zero_points=pick(p.zero_points), offsets=pick(p.offsets),
                       bias=pick(p.bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = []
        for start in range(0, self.out_features, ROWS):
            chunk = self.rows(start, min(start + ROWS, self.out_features))
            parts.append(x @ chunk.dequantize().to(x.dtype).T)
        y = torch.cat(parts, dim=-1)
        return y if self.packed.bias is None else y + self.packed.bias.to(x.dtype)

    def extra_repr(self) -> str:
        p = self.packed
        form = "zero points" if p.zero_points is not None else (
            "offsets" if p.offsets is not None else "symmetric")
        order = ", act-order" if p.input_order is not None else ""
        return (f"in_features={p.in_features}, out_features={p.out_features}, bits={p.bits}, "
                f"group_size={p.group_size}, {form}{order}")
