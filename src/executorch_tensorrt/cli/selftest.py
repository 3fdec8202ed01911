"""`executorch-tensorrt selftest`: does the TensorRT path work on this machine?

Exports a battery of small programs into one output folder (built-in
examples, a transformer block, a KV-cache decoder, quantized models), then
for each: runs it through ExecuTorch's runtime with TensorRT (no fallback
allowed), runs it on the onnxruntime fallback in a child process that sees no
GPU, and compares every output element of both with eager PyTorch and with
each other. Where TensorRT ran, each call is timed against TensorRT's own
enqueue loop over the same engine and bindings (`execute_async_v3`, then a
stream synchronize): the limit of any call around it. Where TensorRT cannot
run, each program says why (the backend's own cause) and the rest still runs.

Nothing is written outside the output folder: the engine cache is a folder
inside it unless `use_cache` (then the user's cache is read and filled).
The JSON report (`selftest.json`) is what to attach to a bug report.
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from ..program import tensor_file as tf
from ..program.compare import compare_tensors
from ..output_files import write_bytes_whole
from ..runtime.executor import FALLBACK_ENV, STAND_IN_ENV
from .runner import RunError

REPORT = "selftest.json"
# Tolerances of a comparison with eager: the run check's, by what the case computes.
TOLERANCE = {"fp32": 1e-3, "int8": 3e-2, "int4": 6e-2}


@dataclass
class Comparison:
    against: str          # "eager" or "fallback"
    ok: bool
    detail: str


@dataclass
class CaseResult:
    name: str
    what: str
    exported: bool = False
    export_only: bool = False           # exported to be run elsewhere (--export-only)
    export_error: str | None = None
    fallback_ran: bool = False
    fallback_error: str | None = None
    tensorrt_ran: bool = False
    tensorrt_error: str | None = None   # why TensorRT could not run it (the backend's cause)
    comparisons: list[Comparison] = field(default_factory=list)
    program_us: float | None = None     # median per call through ExecuTorch
    # TensorRT's own execute_async_v3 + sync, summed over partitions
    enqueue_us: float | None = None

    @property
    def ok(self) -> bool:
        return (self.exported and (self.export_only or self.fallback_ran)
                and all(c.ok for c in self.comparisons))


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    tolerance: float
    export: Callable[[Path], Path]   # writes the program (and its .expected) into a folder


def _example_case(name: str, what: str) -> Case:
    def export(folder: Path) -> Path:
        from ..aot.export import export_program
        from ..examples.models import example

        model, inputs = example(name)
        return export_program(model, inputs, folder / f"{name}.pte", progress=None).path

    return Case(name, what, TOLERANCE["fp32"], export)


def _sum_case() -> Case:
    def export(folder: Path) -> Path:
        import torch

        from ..aot.export import export_program

        class Sum(torch.nn.Module):
            def forward(self, x, y):
                return x + y

        g = torch.Generator().manual_seed(0)
        inputs = (torch.randn(2, 3, generator=g), torch.randn(2, 3, generator=g))
        return export_program(Sum().eval(), inputs, folder / "sum.pte", progress=None).path

    return Case("sum", "two inputs, one elementwise op", TOLERANCE["fp32"], export)


def _quantized_case(scheme: str) -> Case:
    def export(folder: Path) -> Path:
        import torch

        from ..aot.export import export_program
        from ..examples.models import Mlp
        from ..quantization import quantize

        torch.manual_seed(0)
        model = quantize(Mlp().eval(), scheme=scheme, group_size=32)  # 64 input features
        return export_program(model, (torch.randn(4, 64),), folder / f"{scheme}.pte",
                              progress=None).path

    return Case(scheme, f"a 3-layer MLP, {scheme}", TOLERANCE[scheme[:4]], export)


def _decoder_case() -> Case:
    def export(folder: Path) -> Path:
        from .. import llm
        from ..llm.exporter import causal_lm, eager_decoder
        from ..llm.hf_export import hf_example_inputs
        from ..program.references import write_reference

        model = causal_lm(TINY_LLAMA)
        path = folder / "decoder.pte"
        llm.export(model, max_seq_len=4, max_context_len=48, output=path, progress=None)
        inputs = hf_example_inputs(4)
        outputs = eager_decoder(model, 48)(*inputs)
        write_reference(path, inputs, [outputs], "the decoder's first call on a fresh cache")
        return path

    return Case("decoder", "a 2-layer Llama with its KV cache owned by the delegate",
                TOLERANCE["fp32"], export)


TINY_LLAMA = {"model_type": "llama", "vocab_size": 128, "hidden_size": 32,
              "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": 64}

CASES = (
    _example_case("add", "one elementwise op"),
    _sum_case(),
    _example_case("cnn", "conv, batch norm, pooling, linear"),
    _example_case("transformer", "a pre-norm transformer block"),
    _example_case("bitwise", "TensorRT around an op it refuses (ExecuTorch runs that op)"),
    _decoder_case(),
    _quantized_case("int8_weight_only"),
    _quantized_case("int4_weight_only"),
)
CASE_NAMES = tuple(c.name for c in CASES)


def _run_fallback(pte: Path, out: Path) -> tuple[list[tf.Tensor] | None, str | None]:
    """The program on the onnxruntime fallback, in a child that sees no GPU."""
    env = {**{k: v for k, v in os.environ.items() if k != STAND_IN_ENV},  # onnxruntime only
           "CUDA_VISIBLE_DEVICES": "", "EXECUTORCH_TENSORRT_FALLBACK": "onnxruntime"}
    done = subprocess.run([sys.executable, "-m", "executorch_tensorrt", "run", str(pte),
                           "--outputs", str(out)], capture_output=True, text=True, env=env,
                          timeout=900)
    if done.returncode != 0:
        said = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]
        return None, said[-1].removeprefix("error: ") if said else (
            done.stderr.strip().splitlines() or ["failed"])[-1]
    return tf.read_tensors(out), None


def _enqueue_us(executors, calls: int) -> float | None:
    """TensorRT's own loop over each live TensorRT executor's context, as
    bound by the last call: median microseconds per enqueue + synchronize."""
    total = 0.0
    for ex in executors:
        bound = ex.bound
        samples = []
        for _ in range(calls):
            start = time.perf_counter()
            if not bound.context.execute_async_v3(bound.stream.handle):
                return None
            bound.stream.synchronize()
            samples.append((time.perf_counter() - start) * 1e6)
        total += statistics.median(samples)
    return total


def _run_tensorrt(pte: Path, inputs: list[tf.Tensor], calls: int):
    """(outputs, program µs per call, enqueue µs per call) with TensorRT only."""
    from ..runtime import callbacks
    from .runner import load_method, run_method

    before = {id(e) for e in callbacks.install().live_executors()}
    data = pte.with_suffix(".ptd")
    method = load_method(pte, "forward", data if data.is_file() else None)
    given = [tf.to_torch(t) for t in inputs]
    outputs = run_method(method, given)
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        run_method(method, given)
        samples.append((time.perf_counter() - start) * 1e6)
    mine = [e for e in callbacks.install().live_executors()
            if id(e) not in before and e.kind == "tensorrt"]
    return ([tf.from_torch(f"output.{i}", o) for i, o in enumerate(outputs)],
            statistics.median(samples), _enqueue_us(mine, calls))


@contextlib.contextmanager
def _env(changes: dict[str, str | None]):
    """The environment with `changes` (None: unset) for the block, then as it was."""
    saved = {name: os.environ.get(name) for name in changes}
    for name, value in changes.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _compare(against: str, expected, actual, tolerance: float) -> Comparison:
    results = compare_tensors(expected, actual, atol=tolerance, rtol=tolerance)
    bad = [r for r in results if not r.ok]
    return Comparison(against, not bad,
                      "; ".join(r.describe(tolerance, tolerance) for r in bad) if bad else
                      f"every element within {tolerance:g}")


def run_case(case: Case, folder: Path, calls: int, programs: Path | None = None,
             export_only: bool = False) -> CaseResult:
    """One case; `programs`: a battery exported before (`export_only`) to run
    instead of exporting here (a target without the export toolchain)."""
    from ..program.references import reference_tensors

    result = CaseResult(case.name, case.what)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        if programs is not None:
            pte = programs / case.name / f"{case.name}.pte"
            if not pte.is_file():
                raise FileNotFoundError(f"{pte} does not exist (export the battery with "
                                        "selftest --export-only)")
        else:
            pte = case.export(folder)
        result.exported = True
    except Exception as e:  # noqa: BLE001 - reported, the battery goes on
        result.export_error = f"{type(e).__name__}: {e}"
        return result
    if export_only:
        result.export_only = True
        return result
    inputs = tf.select(tf.read_tensors(pte.with_suffix(".expected.etensors")), "input")
    _, eager = reference_tensors(pte)
    fallback, result.fallback_error = _run_fallback(pte, folder / f"{case.name}.fallback.etensors")
    if fallback is not None:
        result.fallback_ran = True
        result.comparisons.append(_compare("eager (fallback)", eager, fallback, case.tolerance))
    try:
        with _env({FALLBACK_ENV: None}):  # TensorRT or a refusal, never the fallback
            trt, result.program_us, result.enqueue_us = _run_tensorrt(pte, inputs, calls)
        result.tensorrt_ran = True
    except RunError as e:  # the backend's cause, as run gives it (the path is the case's)
        result.tensorrt_error = str(e).replace(f" of {pte}", "")
        return result
    result.comparisons.append(_compare("eager (TensorRT)", eager, trt, case.tolerance))
    if fallback is not None:
        result.comparisons.append(_compare("fallback (TensorRT)", fallback, trt, case.tolerance))
    return result


def selftest(out: Path, names: tuple[str, ...] = CASE_NAMES, calls: int = 100,
             use_cache: bool = False, programs: Path | None = None, export_only: bool = False,
             progress: Callable[[str], None] = print) -> dict:
    """Runs the battery into `out` and writes `out/selftest.json`; returns the
    report. `export_only`: export it, run nothing; `programs`: run a battery
    exported so (into that folder) instead of exporting."""
    from .. import __version__

    unknown = sorted(set(names) - set(CASE_NAMES))
    if unknown:
        raise ValueError(f"unknown case {', '.join(unknown)}; the cases: {', '.join(CASE_NAMES)}")
    out.mkdir(parents=True, exist_ok=True)
    from importlib.metadata import PackageNotFoundError, version

    from ..deploy.doctor import torch_check

    try:
        executorch = version("executorch")
    except PackageNotFoundError:
        executorch = "not installed"
    torch_version, torch_mismatch = torch_check(executorch)
    if torch_mismatch:  # every case will fail at its first call: say why once, first
        progress(f"selftest: torch {torch_version}: {torch_mismatch}")
    results: list[CaseResult] = []
    # The user's engine cache stays untouched (the fallback children inherit this).
    cache = {} if use_cache else {"EXECUTORCH_TENSORRT_CACHE_DIR": str(out / "engine-cache")}
    with _env(cache):
        for case in (c for c in CASES if c.name in names):
            progress(f"selftest: {case.name} ({case.what})...")
            results.append(run_case(case, out / case.name, calls, programs, export_only))
            said = {r.tensorrt_error for r in results[:-1]}
            progress("  " + describe(results[-1], repeated=results[-1].tensorrt_error in said))
    report = {"version": __version__, "python": platform.python_version(),
              "machine": platform.machine(), "stand_in": os.environ.get(STAND_IN_ENV),
              "executorch": executorch, "torch": torch_version, "torch_mismatch": torch_mismatch,
              "cases": [asdict(r) | {"ok": r.ok} for r in results],
              "tensorrt_ran": any(r.tensorrt_ran for r in results),
              "all_ok": all(r.ok for r in results)}
    write_bytes_whole(out / REPORT, json.dumps(report, indent=1) + "\n")
    return report


def describe(r: CaseResult, repeated: bool = False) -> str:
    if not r.exported:
        return f"{r.name}: EXPORT FAILED: {r.export_error}"
    if r.export_only:
        return f"{r.name}: exported"
    parts = [f"{c.against}: {'ok' if c.ok else 'DIFFERS'}" + ("" if c.ok else f" ({c.detail})")
             for c in r.comparisons]
    if not r.fallback_ran:
        parts.append(f"fallback did not run: {r.fallback_error}")
    if r.tensorrt_ran:
        fake = os.environ.get(STAND_IN_ENV)
        timing = (f"TensorRT as a FAKE test-only stand-in ({STAND_IN_ENV}={fake}): " if fake
                  else "") + f"{r.program_us:.1f} us/call"
        if r.enqueue_us is not None:
            timing += (f" vs TensorRT's own enqueue loop {r.enqueue_us:.1f} us "
                       f"(+{r.program_us - r.enqueue_us:.1f} us)")
        parts.append(timing)
    else:
        parts.append("TensorRT did not run: "
                     + ("the same cause as above" if repeated else r.tensorrt_error))
    return f"{r.name}: " + "; ".join(parts)
