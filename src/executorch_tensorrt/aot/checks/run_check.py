"""The run check: a written program run once through the runtime a user loads
it with, every method, compared with eager PyTorch where a reference exists
(docs/verification.md, "The run check at export").

export() calls it after the files are written and export has let go of its
own copies of the program (export_check.py: in this process, or in a child
for a big program). `verify MODEL.pte` without a reference calls it too, on
generated inputs (integers inside every index range the program records:
input_checks.py), and then reports only whether each method ran.

TensorRT is tried first, as at any load; where it cannot serve this process
(no GPU), the onnxruntime fallback runs the partitions, and the result says
which executors ran. Imports torch and ExecuTorch's runtime extension only when
a check runs; never `executorch.runtime` (load_program says why).
"""
from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ...errors import ExportError
from ...program import tensor_file as tf
from ...program.compare import compare_tensors
from ...program.info import MethodInfo

#: Allowed |program - eager| per output, times max(1, the output's largest
#: |eager|), by engine precision: about twice what docs/precision.md's tests
#: allow (fp16, bf16), and for fp32 2.5x the loosest zoo tolerance (4e-4). The
#: check is there to catch programs that do not run or compute something else;
#: `verify` with its own tolerances remains the tight comparison.
TOLERANCE = {"fp32": 1e-3, "fp16": 4e-3, "bf16": 2e-2}
#: The same for programs that quantize activations (W8A8), by activation
#: dtype. One activation that rounds the other way moves every output it feeds
#: by |weight| x its step, and eager PyTorch and the runtime round ties
#: differently (x * (1 / scale) against QuantizeLinear's x / scale): measured
#: on 1000 inputs, up to 8.8e-3 (int8) and 2.0e-2 (fp8 e4m3, one step at the
#: output's magnitude) off the eager quantized model (docs/quantization.md).
#: About 3x that, so the check flags a program that does not run or computes
#: something else, not a rounding tie.
ACTIVATION_TOLERANCE = {"int8": 3e-2, "fp8": 6e-2}
_FLOATS = ("float16", "bfloat16", "float32", "float64")
GENERATED_INT_HIGH = 16  # generated integer inputs lie in [0, 16) unless a range is tighter


@dataclass(frozen=True)
class MethodRunCheck:
    """One method's run: whether it ran, why not, and how far from eager."""
    method: str
    ran: bool
    inputs: str                      # "example inputs", "generated inputs", ...
    error: str = ""                  # the exception, and the backend's recorded cause
    executors: tuple[str, ...] = ()  # kinds that ran its TensorRT partitions
    compared: bool = False           # False: no eager reference for this method
    max_abs_diff: float | None = None
    tolerance: float | None = None   # the largest allowed |diff| (the loosest output's)
    mismatch: str = ""               # the first output beyond its tolerance, described
    top1: tuple[int, int] | None = None  # (rows equal, rows): _top1
    # A run that raised: "tensorrt" when TensorRTBackend recorded a new cause,
    # "outside" when it recorded none (an ExecuTorch kernel or another delegate).
    failed_in: str = ""

    @property
    def ok(self) -> bool:
        return self.ran and not self.mismatch

    def describe(self) -> str:
        on = f" on {', '.join(self.executors)}" if self.executors else ""
        if not self.ran:
            return f"method {self.method!r}: did not run ({self.inputs}): {self.error}"
        if not self.compared:
            return f"method {self.method!r}: ran{on} ({self.inputs}; no eager reference to compare)"
        verdict = "matches eager" if not self.mismatch else "DIFFERS from eager"
        text = (f"method {self.method!r}: ran{on} ({self.inputs}), {verdict}: largest |diff| "
                f"{self.max_abs_diff:.3g}, tolerance {self.tolerance:.3g}")
        if self.top1 is not None:
            text += f", top-1 equal in {self.top1[0]} of {self.top1[1]} rows"
        return text + (f"; {self.mismatch}" if self.mismatch else "")


@dataclass(frozen=True)
class RunCheck:
    """The check of one program: a result per method, or why it was not run."""
    methods: tuple[MethodRunCheck, ...] = ()
    skipped: str = ""                # non-empty: the check did not run, and why

    @property
    def ok(self) -> bool:
        return not self.skipped and all(m.ok for m in self.methods)

    def failures(self) -> list[MethodRunCheck]:
        return [m for m in self.methods if not m.ok]

    def describe(self) -> str:
        if self.skipped:
            return f"run check: skipped ({self.skipped})"
        return "\n".join(["run check:"] + [f"  {m.describe()}" for m in self.methods])


class RunCheckError(ExportError):
    """The written program failed its run check, so export did not publish it:
    what was at `target` is unchanged, and the new files are kept for
    inspection in a folder beside it (`path` is the program there). `check`
    holds the per-method results."""

    def __init__(self, path: Path, check: RunCheck, target: Path | None = None):
        self.path, self.check = path, check
        self.target = target if target is not None else path
        parts = []
        for m in check.failures():
            if not m.ran:
                parts.append(f"method {m.method!r} could not run on the {m.inputs}: {m.error}")
            else:
                parts.append(f"method {m.method!r} ran but differs from eager PyTorch on the "
                             f"{m.inputs}: largest |diff| {m.max_abs_diff:.3g} > tolerance "
                             f"{m.tolerance:.3g} ({m.mismatch})")
        super().__init__(
            f"the run check of the exported program failed: {'; '.join(parts)}. So "
            f"{self.target} was not published (any earlier file there is unchanged); the new "
            f"files are kept in {path.parent} so you can inspect them (executorch-tensorrt "
            f"inspect / run). {_remedy(check.failures())}")


def _remedy(failures: list[MethodRunCheck]) -> str:
    """What the failures point at, most specific first: a program that cannot
    run is not helped by run_check=False."""
    if any(m.failed_in == "outside" for m in failures):
        return ("The failing call is outside TensorRT: TensorRTBackend recorded no error, so "
                "an operator left to ExecuTorch (a portable kernel or another delegate) "
                "refused its inputs, typically a memory layout (dim order) or dtype that "
                "kernel does not take. The partition report lists the ops TensorRT did not "
                "take and why (export_program(...).report, the report file beside the "
                "program): get them onto TensorRT (e.g. fix what the report names), or add "
                "a partitioner that takes them (partitioners=[XnnpackPartitioner()]). "
                "run_check=False would publish a program that fails the same way.")
    if any(m.failed_in == "tensorrt" for m in failures):
        return ("The failing call is a TensorRT partition (its cause is quoted above); "
                "run_check=False would publish a program that fails the same way. If the "
                "cause is not something the environment explains, please report it with "
                "the model.")
    return ("A model that is not deterministic (random ops, dropout in training mode) "
            "differs by design; where reduced precision explains the difference, loosen "
            "the comparison with run_check_tolerance= (--run-check-tolerance); otherwise "
            "this is most likely a bug of executorch-tensorrt: please report it with the "
            "model. To publish the program anyway, export with run_check=False "
            "(--no-run-check).")


def tolerance_for(precision: str | None, activations: str | None = None) -> float:
    """The check's tolerance for an engine `precision` and, for a program that
    quantizes activations, their dtype ("int8", "fp8")."""
    tol = TOLERANCE.get(precision or "fp32", TOLERANCE["fp32"])
    return max(tol, ACTIVATION_TOLERANCE.get(activations or "", 0.0))


def safe_int_range(methods: Sequence[MethodInfo]) -> tuple[int, int]:
    """[low, high) for generated integer inputs: inside every index range any
    TensorRT partition of the program records (an input that indexes a
    dimension must stay below its size), and small."""
    low, high = 0, GENERATED_INT_HIGH
    for m in methods:
        for d in m.delegates:
            for b in (d.meta.inputs if d.meta is not None else ()):
                if b.index_range is not None:
                    low, high = max(low, b.index_range[0]), min(high, b.index_range[1])
    return (low, high) if high > low else (0, 1)


def generated_inputs(method, int_range: tuple[int, int]) -> list:
    """Inputs that match a loaded method's planned shapes and dtypes
    (seeded: the same program gets the same inputs)."""
    import torch

    from ...dtypes import by_scalar_type

    gen = torch.Generator().manual_seed(0)
    meta, inputs = method.method_meta(), []
    for i in range(meta.num_inputs()):
        try:
            tm = meta.input_tensor_meta(i)
        except Exception:  # noqa: BLE001 - ExecuTorch raises for a non-tensor input
            raise ValueError(f"input {i} is not a tensor; run the method with its inputs "
                             "given (executorch-tensorrt run --inputs)") from None
        row = by_scalar_type(int(tm.dtype()))
        dtype = getattr(torch, row.torch, None) if row is not None and row.torch else None
        if dtype is None:
            raise ValueError(f"input {i} has ScalarType {int(tm.dtype())}, which the check "
                             "cannot make")
        shape = [int(s) for s in tm.sizes()]
        if dtype == torch.bool:
            inputs.append(torch.randint(0, 2, shape, generator=gen).bool())
        elif dtype.is_floating_point:
            inputs.append((torch.rand(shape, generator=gen) * 2 - 1).to(dtype))
        else:
            inputs.append(torch.randint(*int_range, shape, generator=gen).to(dtype))
    return inputs


@dataclass(frozen=True)
class MethodCase:
    """What to run a method on: given inputs (and eager outputs to compare
    with), or None for generated inputs and no comparison."""
    inputs: list | None = None       # torch tensors
    expected: list[tf.Tensor] | None = None
    source: str = "example inputs"


@contextmanager
def _fallback_allowed():
    """TensorRT first, then the onnxruntime fallback, for this check only."""
    from ...runtime.executor import FALLBACK_ENV, FALLBACK_ONNXRUNTIME

    before = os.environ.get(FALLBACK_ENV)
    os.environ[FALLBACK_ENV] = FALLBACK_ONNXRUNTIME
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(FALLBACK_ENV, None)
        else:
            os.environ[FALLBACK_ENV] = before


def _error(e: BaseException) -> str:
    import executorch_tensorrt

    cause = [ln.strip() for ln in executorch_tensorrt.last_error().splitlines() if ln.strip()]
    text = f"{type(e).__name__}: {e}"
    return text + (f" (TensorRTBackend: {cause[0]})" if cause and cause[0] not in text else "")


def _compare(expected: list[tf.Tensor], got: list[tf.Tensor], tol: float) -> tuple[float, float, str]:
    """(largest |diff|, its output's tolerance, first mismatch or "")."""
    if len(got) != len(expected):
        return math.inf, 0.0, f"{len(got)} outputs, eager has {len(expected)}"
    worst, allowed, mismatch = 0.0, 0.0, ""
    for e, g in zip(expected, got):
        flat = e.as_float64()
        finite = np.abs(flat[np.isfinite(flat)])
        atol = tol * max(1.0, float(finite.max()) if finite.size else 1.0)
        (r,) = compare_tensors([e], [g], atol, 0.0)
        if r.max_abs_diff >= worst:
            worst, allowed = r.max_abs_diff, atol
        if not r.ok and not mismatch:
            mismatch = r.describe(atol, 0.0)
            if r.problem:
                worst, allowed = math.inf, atol
    return worst, allowed, mismatch


def _top1(expected: list[tf.Tensor], got: list[tf.Tensor]) -> tuple[int, int] | None:
    """For a first output of floating scores over a last dimension (class
    scores, an LLM's logits): in how many of its rows the largest score sits
    at the same index as eager's (the class, the next token), of how many.
    Reported, not judged: a near tie may flip within the tolerance."""
    if not expected or not got or expected[0].dtype not in _FLOATS:
        return None
    e, g = expected[0].as_float64(), got[0].as_float64()
    if e.shape != g.shape or e.ndim == 0 or e.shape[-1] < 2:
        return None
    same = e.reshape(-1, e.shape[-1]).argmax(-1) == g.reshape(-1, g.shape[-1]).argmax(-1)
    return int(same.sum()), int(same.size)


def load_program(path: str | Path, data_path: str | Path | None):
    """The program loaded by ExecuTorch's runtime extension: the call
    `executorch.runtime.Runtime.load_program` makes for a path (same C++
    runtime, same loader, same verification), without that module, whose
    import pulls in `executorch.exir` (the compiler: about 7 s of CPU in a fresh
    interpreter, 70 % of the check child's imports, docs/verification.md)."""
    from executorch.extension.pybindings import _C

    return _C._load_program(str(path), program_verification=_C.Verification.InternalConsistency,
                            data_path=None if data_path is None else str(data_path))


def method_names(program) -> list[str]:
    return sorted(program.get_method_name(i) for i in range(program.num_methods()))


def check_program(path: str | Path, data_path: str | Path | None,
                  cases: dict[str, MethodCase], tolerance: float,
                  int_range: tuple[int, int] = (0, GENERATED_INT_HIGH)) -> RunCheck:
    """Loads `path` (+ `data_path`) with executorch.runtime and runs every
    method once: on its case's inputs (compared with its eager outputs) or,
    for a method without a case, on generated inputs. Never raises for the
    program's own failures: they are the result."""
    import executorch_tensorrt

    from ...runtime import callbacks

    executorch_tensorrt.register()
    results = []
    with _fallback_allowed():
        try:
            program = load_program(path, data_path)
        except Exception as e:  # noqa: BLE001 - ExecuTorch raises RuntimeError with a code
            return RunCheck(tuple(MethodRunCheck(m, False, c.source, f"loading the program: "
                                                 f"{_error(e)}") for m, c in cases.items())
                            or (MethodRunCheck("*", False, "-", _error(e)),))
        # Only the executors this program makes (others may be live in the process).
        before = {id(e) for e in callbacks.install().live_executors()}
        for name in method_names(program):
            case = cases.get(name, MethodCase(source="generated inputs"))
            results.append(_run_method(program, name, case, tolerance, int_range, before))
        del program  # the executors go with it
    return RunCheck(tuple(results))


def _run_method(program, name: str, case: MethodCase, tolerance: float,
                int_range: tuple[int, int], before: set[int]) -> MethodRunCheck:
    from ...runtime import callbacks

    try:
        method = program.load_method(name)
    except Exception as e:  # noqa: BLE001
        return MethodRunCheck(name, False, case.source, f"loading the method: {_error(e)}")
    try:
        inputs = case.inputs if case.inputs is not None else generated_inputs(method, int_range)
    except ValueError as e:
        return MethodRunCheck(name, False, case.source, str(e))
    import executorch_tensorrt

    prior = executorch_tensorrt.last_error()
    try:
        outputs = method(list(inputs))
    except Exception as e:  # noqa: BLE001
        cause = executorch_tensorrt.last_error()
        return MethodRunCheck(name, False, case.source, f"running it: {_error(e)}",
                              failed_in="tensorrt" if cause and cause != prior else "outside")
    kinds = tuple(sorted({e.kind for e in callbacks.install().live_executors()
                          if id(e) not in before}))
    if case.expected is None:
        return MethodRunCheck(name, True, case.source, executors=kinds)
    got = [tf.from_torch(f"output.{i}", o) for i, o in enumerate(outputs)]
    worst, allowed, mismatch = _compare(case.expected, got, tolerance)
    return MethodRunCheck(name, True, case.source, executors=kinds, compared=True,
                          max_abs_diff=worst, tolerance=allowed, mismatch=mismatch,
                          top1=_top1(case.expected, got))


def stored_case(tensors_file: Path, source: str) -> MethodCase:
    """`forward`'s case from a tensor file of input.* and output.* tensors."""
    stored = tf.read_tensors(tensors_file)
    return MethodCase([tf.to_torch(t) for t in tf.select(stored, "input")],
                      tf.select(stored, "output"), source)
