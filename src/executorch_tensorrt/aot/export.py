"""export(): nn.Module -> .pte (+ .ptd) whose TensorRT partitions carry their
ONNX graphs and engines with the weights once in named data (docs/big-models.md),
plus `<model>.expected` (+ `.expected.etensors`): the eager reference for the
example inputs (docs/verification.md)."""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

from ..errors import ExportError
from ..quantization.importers.qdq_graph import activation_quantization, check_qdq_delegated
from ..quantization.workflow import prepare_for_export
from .partition.shape_values import private_shape_values
from ..program.references import reference_source, write_export_reference
from ..program.info import describe_program
from .checks import device_resident as dr
from ..tensorrt.engine_builder import Progress, progress_to, stderr_progress
from .checks.memory_check import check_export_memory, weight_bytes
from .export_files import beside, rejected_folder, write_program
from ..output_files import Staging, check_free_space, check_target, write_whole, writing
from .partition.float64 import rewrite_float64
from .partition.partitioner import BACKEND_ID, TensorRTPartitioner
from .partition.report import PartitionReport, format_report, write_report
from .trace.cia_ops_cache import cia_ops_cached
from .checks.export_check import checks_in_child, export_run_check, start_check_child, stop_check_child
from .checks.run_check import RunCheck, RunCheckError, tolerance_for
from .checks.runtime_kernels import check_edge_kernels, check_runtime_kernels
from .checks.lowering_errors import executorch_step
from .trace.moe_experts import traceable_experts


class PartitionSplitWarning(UserWarning):
    """A method runs in several TensorRT partitions (each boundary is a round trip)."""


@dataclass
class ExportResult:
    path: Path
    expected_path: Path | None
    seconds: dict[str, float] = field(default_factory=dict)
    partitioner: TensorRTPartitioner | None = None
    backends: dict[str, list[str]] = field(default_factory=dict)  # method -> delegate ids
    reports: dict[str, PartitionReport] = field(default_factory=dict)  # method -> report
    report_path: Path | None = None
    data_paths: list[Path] = field(default_factory=list)  # .ptd files (external_weights)
    run_check: RunCheck | None = None  # the written program run once (None: run_check=False)

    @property
    def report(self) -> PartitionReport:
        """The first (usually only) method's partition report."""
        return next(iter(self.reports.values()))


def _as_inputs(example_inputs) -> tuple:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)):
        raise TypeError("example_inputs must be a tuple of tensors, got "
                        f"{type(example_inputs).__name__}")
    return tuple(example_inputs)


def _check_required(backends: dict[str, list[str]], required: Iterable[str]) -> None:
    present = {b for ids in backends.values() for b in ids}
    missing = sorted(set(required) - present)
    if missing:
        raise ExportError(
            f"require_backends names {', '.join(missing)}, but the program has no delegate of "
            f"{'that backend' if len(missing) == 1 else 'those backends'} (delegates present: "
            f"{', '.join(sorted(present)) or 'none'}). Nothing was written. A partitioner "
            "probably took nothing: check exclude_ops, the partitioner order, and what "
            "TensorRT's parser rejected (export_program(...).partitioner.reports).")


def _method_reports(methods: list[str],
                    reports: list[PartitionReport]) -> dict[str, PartitionReport]:
    # ExecuTorch partitions the methods in the order it was given them, one
    # partition() call each (the written program may order them otherwise).
    if len(reports) != len(methods):
        return {}
    return dict(zip(methods, reports))


def target_flavor() -> str:
    """The TensorRT flavour this export targets (the installed one): what the
    quantization checks hold each scheme against."""
    from ..tensorrt.flavor import load_tensorrt

    return load_tensorrt().flavor


def _check_took_something(reports: dict[str, PartitionReport], allow: bool) -> None:
    empty = {m: r for m, r in reports.items() if not r.partitions and r.ops_of}
    if not empty or allow:
        return
    causes = "; ".join(f"method {m!r}: " + " | ".join(r.main_reasons())
                       for m, r in empty.items())
    raise ExportError(
        f"TensorRT took nothing from {', '.join(repr(m) for m in empty)}, so the program "
        f"would have no TensorRT delegate. Nothing was written. Why: {causes}. Fix the "
        "cause (options, dtypes, exclude_ops), or pass allow_no_tensorrt=True to write the "
        "program without TensorRT. The full report:\n"
        + format_report({m: r for m, r in empty.items()}))


def _warn_splits(backends: dict[str, list[str]], reports: dict[str, PartitionReport]) -> None:
    for method, ids in backends.items():
        count = ids.count(BACKEND_ID)
        if count <= 1:
            continue
        report = reports.get(method)
        ops = sorted({report.ops_of.get(n, n) for n in report.rejected}) if report else []
        warnings.warn(PartitionSplitWarning(
            f"method {method!r} runs in {count} TensorRT partitions, split by ops TensorRT did "
            f"not take: {', '.join(ops) or 'unknown'}. Each boundary costs a round trip "
            "through ExecuTorch; exclude_ops or a model change can merge them."), stacklevel=3)


@cia_ops_cached()  # torch's CIA-op set, built once per export instead of per decomposition
def export_program(model: torch.nn.Module | Mapping[str, torch.export.ExportedProgram],
                   example_inputs: Sequence[Any] | None, path: str | Path, *,
                   dynamic_shapes=None, partitioners: Sequence = (), exclude_ops=(),
                   require_backends: Iterable[str] = (), write_expected_file: bool = True,
                   reference_inputs: Sequence[Any] | None = None,
                   reference_model: Callable[..., Any] | None = None,
                   method_references: Mapping[str, tuple[Callable[..., Any], Sequence[Any]]]
                   | None = None,
                   device_resident: bool = False, allow_no_tensorrt: bool = False,
                   progress: Progress | None = stderr_progress,
                   etrecord_path: str | Path | None = None, external_weights: bool = False,
                   check_memory: bool = True, allow_unquantized: bool = False,
                   constant_methods: Mapping[str, Any] | None = None, run_check: bool = True,
                   run_check_tolerance: float | None = None,
                   quantization: Mapping[str, str] | None = None, **options) -> ExportResult:
    """export() returning timings, backends and the partition reports too.

    `model` may also be a dict of method name -> ExportedProgram (several
    methods in one program, each partitioned on its own; example_inputs None);
    `reference_model` with `reference_inputs` is then the eager `forward` the
    reference and the run check compare with. `method_references`: method
    name -> (eager callable, inputs) the run check runs that method on and
    compares with (llm.export_multimodal: each of its methods).
    `etrecord_path`: also write ExecuTorch's ETRecord there, which Inspector
    needs to map profiling events to nodes (docs/profiling.md).
    `external_weights=True`: the weights go to `<stem>.ptd` beside the .pte.
    `check_memory=False`: export even when the memory estimate says it will
    not fit (memory_check.py).
    `allow_unquantized=True`: a model from quantization.quantize() whose scheme
    the TensorRT flavour or targets cannot run exports with those layers float
    (the report says why) instead of failing.
    `constant_methods`: name -> value methods written into the program as they
    are (ints, bools, lists of ints; e.g. the metadata an LLM runner reads).
    `quantization`: with a dict of ExportedPrograms, the report's layer ->
    how-it-runs lines of the quantize() plan they were traced from (llm.export).
    `run_check=False`: do not run the written program once before returning
    (run_check.py); `run_check_tolerance`: its allowed difference from eager,
    times max(1, an output's largest magnitude) (default by precision, looser for
    programs that quantize activations: run_check.ACTIVATION_TOLERANCE).
    """
    path = Path(path)
    if path.suffix != ".pte":
        raise ValueError(f"{path} should end in .pte")
    check_target(path)
    if etrecord_path is not None:
        check_target(Path(etrecord_path))
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    if isinstance(model, Mapping):
        if example_inputs is not None or dynamic_shapes is not None:
            raise TypeError("with a dict of ExportedPrograms, pass example_inputs=None and "
                            "give dynamic shapes to torch.export")
        programs = dict(model)
        for name, ep in programs.items():
            if not isinstance(ep, torch.export.ExportedProgram):
                raise TypeError(f"method {name!r}: expected an ExportedProgram, got "
                                f"{type(ep).__name__}")
        # The eager `forward` when the caller has one (llm.export: the model with
        # a fresh cache), else the reference comes from the programs themselves.
        reference = ((reference_model, tuple(reference_inputs))
                     if reference_model is not None and reference_inputs is not None else None)
        quantized_layers = dict(quantization or {})  # the caller's quantize() plan
    else:
        inputs = _as_inputs(example_inputs)
        if progress:
            progress("torch.export...")
        # torchao weights, ModelOpt quantizers, quantize() plans and PT2E graphs,
        # checked against the flavour and targets (quantization/workflow.py).
        prepared = prepare_for_export(model, target_flavor(),
                                      options.get("compute_capabilities"), allow_unquantized)
        traced, quantized_layers = prepared.traced, prepared.lines
        with traceable_experts(model):  # MoE experts in a form TensorRT takes (trace/moe_experts.py)
            programs = {"forward": torch.export.export(traced, inputs,
                                                       dynamic_shapes=dynamic_shapes)}
        reference = (prepared.reference, inputs)
    seconds["torch_export"] = time.perf_counter() - t0
    if external_weights:
        if options.get("inline_weights"):
            raise ValueError("external_weights=True and inline_weights=True contradict each "
                             "other: inline weights live in the blob, not in a .ptd")
        options["weights_file"] = path.stem
    for ep in programs.values():  # TensorRT has no float64 (partition/float64.py)
        rewrite_float64(ep)
    real_weights = [{**ep.state_dict, **ep.constants} for ep in programs.values()]
    # W8A8 programs: eager and the runtime may round an activation's tie apart.
    check_tolerance = (run_check_tolerance if run_check_tolerance is not None else
                       tolerance_for(options.get("precision"), activation_quantization(
                           ep.graph for ep in programs.values())))
    if check_memory:
        check_export_memory(real_weights, options.get("inline_weights", False), progress)
    # The weights are a lower bound of the program's size: refuse before the work.
    weights = weight_bytes(real_weights).total  # reads this process's memory map: once
    check_free_space(path.parent, weights, f"{path.name} (its weights alone)")
    # A program this big is checked in a child process: started now, its
    # imports overlap the export (export_check.start_check_child).
    child = (start_check_child() if run_check and not device_resident
             and checks_in_child(weights) else None)
    try:
        trt_partitioner = TensorRTPartitioner(exclude_ops=exclude_ops, progress=progress,
                                              keep_whole=partitioners, **options)
        trt_partitioner.real_weights = real_weights
        if device_resident:
            dr.place_on_device(trt_partitioner)
        t1 = time.perf_counter()
        if progress:
            progress("partitioning and building TensorRT engines...")
        with progress_to(progress), warnings.catch_warnings():
            # torch's pytree deprecation, raised where torch.export deep-copies
            # treespecs while ExecuTorch lowers: nothing a caller can act on.
            warnings.filterwarnings("ignore", category=FutureWarning, message=r".*LeafSpec.*")
            with executorch_step("to_edge_transform_and_lower"):
                edge = to_edge_transform_and_lower(
                    programs, partitioner=[trt_partitioner, *partitioners],
                    transform_passes=[private_shape_values],  # before partitioning
                    # Non-core ATen ops (erfinv, ...) must get through to be reported below.
                    compile_config=EdgeCompileConfig(_check_ir_validity=False),
                    constant_methods=dict(constant_methods) if constant_methods else None,
                    generate_etrecord=etrecord_path is not None)
            trt_partitioner.export_cache.clear()  # preprocess is done: what it left goes
            check_qdq_delegated(edge)
            if device_resident:
                dr.check_device_io(edge)
            check_edge_kernels(edge)  # an op with no kernel: refused before to_executorch
            with executorch_step("to_executorch"):
                program = edge.to_executorch(*([dr.backend_config()] if device_resident else []))
        seconds["lower"] = time.perf_counter() - t1
        methods = describe_program(program.executorch_program)
        check_runtime_kernels(methods)
        if device_resident:
            dr.check_program(program.buffer)
        backends = {m.name: [d.backend for d in m.delegates] for m in methods}
        reports = _method_reports(list(programs), trt_partitioner.reports)
        for report in reports.values():
            report.quantization = dict(quantized_layers)
        _check_took_something(reports, allow_no_tensorrt)
        _check_required(backends, require_backends)
        _warn_splits(backends, reports)
        if progress:
            partial = {m: r for m, r in reports.items() if r.rejected and r.partitions}
            if partial:
                progress("TensorRT took part of the program:\n" + format_report(partial))
        # Every file goes to a staging folder beside `path` first; the set is
        # published together, the program last, once it passed its run check
        # (output_files.py, docs/output-files.md).
        with Staging(path.parent, path) as staging:
            written = write_program(program, path, staging, progress)
            staging.sync_in_background()  # the program to the disk while the rest is made
            etrecord = program.get_etrecord() if etrecord_path is not None else None
            if etrecord is not None and beside(etrecord_path, path):
                written.etrecord = staging.write(Path(etrecord_path), etrecord.save)
            written.report = write_report(written.program, reports) if reports else None
            # The reference (program/references.py): written after the program, never blocks it.
            ref = reference_source(reference[0] if reference else programs,
                                   reference[1] if reference else None, reference_inputs)
            written.expected = write_export_reference(written.program,
                                                      ref if write_expected_file else None)
            checked = None
            if run_check:
                del program, edge  # export's copies go before the program is loaded to run
                t2 = time.perf_counter()
                # With no reference written, the check makes the eager outputs itself.
                checked = export_run_check(written.program, written.data, methods,
                                           None if write_expected_file else ref,
                                           written.expected, device_resident, check_tolerance,
                                           child, {m: (f, tuple(i), "given reference inputs")
                                                   for m, (f, i) in
                                                   (method_references or {}).items()})
                seconds["run_check"] = time.perf_counter() - t2
                if progress:
                    progress(checked.describe())
            if checked is not None and not checked.ok and not checked.skipped:
                rejected = rejected_folder(path)
                with writing(rejected):
                    staging.keep_as(rejected.name)
                raise RunCheckError(rejected / path.name, checked, path)
            published = written.publish(staging, path)
        if progress:
            progress(f"published {', '.join(published.names())} in {path.parent}")
        if etrecord is not None and not beside(etrecord_path, path):
            write_whole(Path(etrecord_path), etrecord.save)  # for Inspector, after the program
    finally:
        stop_check_child(child)  # an export that failed before its check
    seconds["total"] = time.perf_counter() - t0
    result = ExportResult(path, published.expected, seconds, trt_partitioner, backends, reports,
                          published.report, published.data, checked)
    if progress:
        progress(f"exported {path} in {seconds['total']:.1f} s")
    return result


def export(model: torch.nn.Module, example_inputs: Sequence[Any], path: str | Path, *,
           dynamic_shapes=None, partitioners: Sequence = (), exclude_ops=(), **options) -> Path:
    """Exports `model` to a .pte and returns its path.

    TensorRT takes what its parser supports; `partitioners` then take what they
    can of the rest (and of what `exclude_ops` kept off TensorRT); ExecuTorch's
    portable kernels run what remains. Fails before writing anything if an op
    would be left without a kernel in the installed runtime, or if a backend
    named in `require_backends` got no delegate, or if TensorRT took nothing
    from a method. Also writes `<path>.expected` and `<path>.expected.etensors`:
    the example inputs (or `reference_inputs`) and the eager outputs for them,
    which runners replay and `verify` compares with; when the eager run fails,
    export warns (ReferenceWarning) and writes the program without them
    (`write_expected_file=False`: never). And `<model>.report.json`: what
    TensorRT took per op and why it left the rest (report.read_report /
    format_report). A model may return any pytree of tensors torch.export
    accepts (tuples, dicts, ModelOutput); the program returns its leaves in
    torch.utils._pytree flatten order.
    Options: TensorRTCompileSpec fields (compute_capabilities,
    workspace_bytes, device_id, precision, profiles: several TensorRT
    optimization profiles for the dynamic dimensions, e.g. 3 or
    [{"batch": (1, 16, 16)}, {"batch": (17, 256, 2048)}]; default one, see
    docs/gpu-runtime.md "Optimization profiles"), `require_backends`,
    `allow_no_tensorrt=True` (write the program even when TensorRT takes
    nothing from a method), `progress` (a callable, or None for silence),
    `device_resident=True` (method inputs and outputs stay in CUDA memory on
    device_id; fails naming any input or output that would need a copy; see
    docs/device-resident.md), `external_weights=True` (the weights go to
    `<stem>.ptd` beside the .pte; load both: `Runtime.load_program(pte,
    data_path=ptd)`), `inline_weights=True` (today's self-contained blob: the
    engine and the ONNX model each carry the weights; no named data),
    `check_memory=False` (skip the out-of-memory estimate). By default the
    weights are stored once in the program's named data (docs/big-models.md).
    Before returning, export runs the written program once on the reference
    inputs and compares with eager (`run_check=False`: not); when it cannot
    run or differs, nothing is published, the new files are kept in
    `<stem>.rejected/` and RunCheckError is raised (docs/verification.md).
    Every file is written whole or not at all and the set is published
    together, the program last: a failed export leaves what was at the path
    (docs/output-files.md).
    """
    return export_program(model, example_inputs, path, dynamic_shapes=dynamic_shapes,
                          partitioners=partitioners, exclude_ops=exclude_ops, **options).path


__all__ = ["export", "export_program", "ExportResult", "ExportError", "PartitionSplitWarning",
           "RunCheck", "RunCheckError"]
