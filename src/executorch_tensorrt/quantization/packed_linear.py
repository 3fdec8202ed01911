"""PackedLinear: a Linear whose weight is a checkpoint's PackedWeight, as stored.

The module holds the PackedWeight's tensors as buffers (so `.to()`, state
dicts and dtype conversions see them) and computes the definition,
`x @ packed.dequantize().T + bias`: it is the eager reference. Export never
traces it: `importers/packed.py` finds every module whose `.packed` is a
PackedWeight (this class or any other that offers one) and puts the affine
format's module (formats/affine.py) in its place.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .packed_weight import PackedWeight

_PARTS = ("codes", "scales", "zero_points", "offsets", "input_order", "bias")


class PackedLinear(torch.nn.Module):
    """y = x @ weight.dequantize().T + bias, the weight kept packed."""

    def __init__(self, weight: PackedWeight) -> None:
        super().__init__()
        weight.check()
        self.name = weight.name
        self.bits = weight.bits
        self.in_features = weight.in_features
        self.out_features = weight.out_features
        self.group_size = weight.group_size
        for part in _PARTS:
            self.register_buffer(part, getattr(weight, part))

    @property
    def packed(self) -> PackedWeight:
        """The PackedWeight over this module's current buffers."""
        return PackedWeight(self.name, self.bits, self.out_features, self.in_features,
                            self.group_size, **{p: getattr(self, p) for p in _PARTS})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return F.linear(x, self.packed.dequantize().to(x.dtype), bias)

    def extra_repr(self) -> str:
        form = ("zero points" if self.zero_points is not None else
                "offsets" if self.offsets is not None else "symmetric")
        order = ", input order" if self.input_order is not None else ""
        return (f"{self.in_features} -> {self.out_features}, {self.bits} bits, group "
                f"{self.group_size}, {form}{order}")
