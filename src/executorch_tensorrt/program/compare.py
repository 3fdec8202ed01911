"""Whole-tensor comparison: every element, absolute and relative tolerance.

An element matches when |actual - expected| <= atol + rtol * |expected|
(NaN matches NaN, an infinity matches the same infinity). A mismatch report
names the worst element (index, expected, actual), how many elements are
off and where the first few are. numpy only: `verify` does not load torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .tensor_file import Tensor

SHOWN_LOCATIONS = 5


@dataclass
class TensorComparison:
    name: str
    ok: bool
    problem: str = ""            # shape / dtype / count problems (no element comparison)
    mismatches: int = 0
    numel: int = 0
    worst_index: tuple[int, ...] | None = None
    worst_expected: float = 0.0
    worst_actual: float = 0.0
    worst_diff: float = 0.0
    max_abs_diff: float = 0.0
    locations: list[tuple[tuple[int, ...], float, float]] = field(default_factory=list)

    def describe(self, atol: float, rtol: float) -> str:
        if self.problem:
            return f"{self.name}: {self.problem}"
        if self.ok:
            return (f"{self.name}: OK, {self.numel} elements, largest |diff| "
                    f"{self.max_abs_diff:.3g}")
        first = "; ".join(f"{list(i)} expected {e:.6g} got {a:.6g}"
                          for i, e, a in self.locations)
        return (f"{self.name}: {self.mismatches} of {self.numel} elements differ by more than "
                f"atol {atol:g} + rtol {rtol:g} x |expected|; worst at {list(self.worst_index)}: "
                f"expected {self.worst_expected:.6g}, got {self.worst_actual:.6g} (|diff| "
                f"{self.worst_diff:.3g}); first: {first}")


def compare_arrays(name: str, expected: np.ndarray, actual: np.ndarray, atol: float,
                   rtol: float) -> TensorComparison:
    """Compares two float64 arrays of the same shape element by element."""
    e = np.asarray(expected, dtype=np.float64)
    a = np.asarray(actual, dtype=np.float64)
    if e.shape != a.shape:
        return TensorComparison(name, False, f"shape {list(a.shape)}, expected {list(e.shape)}",
                                numel=e.size)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - e)
        both_nan = np.isnan(a) & np.isnan(e)
        same_inf = np.isinf(a) & np.isinf(e) & (np.sign(a) == np.sign(e))
        # Finite pairs only: rtol x |inf| would let any value match an infinity.
        within = (diff <= atol + rtol * np.abs(e)) & np.isfinite(e) & np.isfinite(a)
        ok_mask = within | both_nan | same_inf
        # A NaN on one side only is as bad as it gets.
        badness = np.where(ok_mask, -1.0, np.where(np.isnan(diff), np.inf, diff))
    finite = diff[np.isfinite(diff)]
    result = TensorComparison(name, bool(ok_mask.all()), numel=e.size,
                              max_abs_diff=float(finite.max()) if finite.size else 0.0)
    if result.ok:
        return result
    bad = ~ok_mask
    result.mismatches = int(bad.sum())
    worst = np.unravel_index(int(np.argmax(badness)), e.shape) if e.ndim else ()
    result.worst_index = tuple(int(i) for i in worst)
    result.worst_expected, result.worst_actual = float(e[worst]), float(a[worst])
    result.worst_diff = float(diff[worst])
    for flat in np.flatnonzero(bad.ravel())[:SHOWN_LOCATIONS]:
        idx = np.unravel_index(int(flat), e.shape) if e.ndim else ()
        result.locations.append((tuple(int(i) for i in idx), float(e[idx]), float(a[idx])))
    return result


def compare_tensors(expected: list[Tensor], actual: list[Tensor], atol: float,
                    rtol: float) -> list[TensorComparison]:
    """One comparison per expected output (plus one for a count mismatch)."""
    results = []
    if len(actual) != len(expected):
        results.append(TensorComparison(
            "outputs", False, f"{len(actual)} outputs, the reference has {len(expected)}"))
    for exp, act in zip(expected, actual):
        name = exp.name
        if exp.dtype != act.dtype:
            # A dtype change is a real difference (a float64 output turned float32, ...)
            results.append(TensorComparison(name, False, f"dtype {act.dtype}, expected {exp.dtype}"))
            continue
        results.append(compare_arrays(name, exp.as_float64(), act.as_float64(), atol, rtol))
    return results
