"""Per-call checks of what eager PyTorch would refuse: integer
inputs that index a dimension ("index_range" on an input binding) and input
dimensions that must agree ("equal_dims"), both recorded at export
(aot/checks/input_checks.py) and checked before anything is read or written.

The Python gate (arguments.check_args) runs them on every call it sees; a
native plan of the onnxruntime fallback runs the value checks in C++
(native/src/plans/input_checks.cpp, the same words). A plan for exact shapes needs
no equal-dims check (it matches only the shapes of a call that passed here);
one with bounds carries them, and a call where they differ goes to this gate
(native/src/plans/plan_signature.cpp).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..blob.metadata import BlobMetadata
from ..errors import ArgumentError

__all__ = ["IndexRange", "InputChecks"]


@dataclass(frozen=True)
class IndexRange:
    """Input `input` (named `name`) must hold values in [lo, hi)."""
    input: int
    name: str
    lo: int
    hi: int

    def what(self) -> str:
        return f"input {self.input} ({self.name!r})"

    def advice(self) -> str:
        """What to do, after "outside its valid range [lo, hi): " (also in C++)."""
        if self.lo == 0:
            return (f"the values index a dimension of size {self.hi} (an embedding or gather: "
                    f"token ids must be < vocabulary size {self.hi}), and eager PyTorch refuses "
                    f"them too; pass values in 0..{self.hi - 1}")
        return (f"the values index a dimension of size {self.hi} (negative values count from "
                f"its end), and eager PyTorch refuses them too; pass values in "
                f"{self.lo}..{self.hi - 1}")


def _position(flat: int, shape: Sequence[int]) -> list[int]:
    return [int(i) for i in np.unravel_index(flat, tuple(shape))] if shape else []


@dataclass(frozen=True)
class InputChecks:
    ranges: tuple[IndexRange, ...] = ()
    equal_dims: tuple[tuple[tuple[int, int], ...], ...] = ()
    names: tuple[str, ...] = ()

    @classmethod
    def from_metadata(cls, meta: BlobMetadata | dict,
                      input_names: Sequence[str]) -> "InputChecks":
        """From the blob's typed metadata (checked when it was read; the JSON
        form is parsed and checked first)."""
        meta = BlobMetadata.of(meta)
        ranges = tuple(IndexRange(k, b.name, *b.index_range)
                       for k, b in enumerate(meta.inputs) if b.index_range is not None)
        return cls(ranges, meta.equal_dims or (), tuple(input_names))

    def __bool__(self) -> bool:
        return bool(self.ranges or self.equal_dims)

    def check_shapes(self, shapes: Sequence[Sequence[int]]) -> None:
        for group in self.equal_dims:
            (k0, d0), size0 = group[0], shapes[group[0][0]][group[0][1]]
            for k, d in group[1:]:
                if shapes[k][d] != size0:
                    raise ArgumentError(
                        f"input {k0} ({self.names[k0]!r}) dimension {d0} has size {size0} but "
                        f"input {k} ({self.names[k]!r}) dimension {d} has size {shapes[k][d]}; "
                        "the program was exported with one size for both (e.g. one position "
                        "per token), so eager PyTorch refuses this too: pass equal sizes")

    def check_values(self, shapes: Sequence[Sequence[int]],
                     read: Callable[[int, tuple[int, ...]], np.ndarray]) -> None:
        """`read(k, shape)`: input k's values as a contiguous host array."""
        for r in self.ranges:
            shape = tuple(shapes[r.input])
            if math.prod(shape) == 0:
                continue
            values = read(r.input, shape).reshape(-1)
            bad = np.flatnonzero((values < r.lo) | (values >= r.hi))
            if bad.size:
                first = int(bad[0])
                raise ArgumentError(
                    f"{r.what()} holds {int(values[first])} at "
                    f"position {_position(first, shape)}, outside its valid range "
                    f"[{r.lo}, {r.hi}): {r.advice()}")
