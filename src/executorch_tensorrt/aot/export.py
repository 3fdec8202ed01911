"""export(): nn.Module -> .pte whose TensorRT partitions carry real engines,
plus `<model>.expected` (+ `.expected.etensors`): the eager reference for the
example inputs (docs/verification.md)."""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import torch
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

from ..errors import ExportError
from ..tools.expected import reference_source, write_export_reference
from ..tools.program_info import describe_program
from . import device_resident as dr
from ..tensorrt.engine_builder import Progress, progress_to, stderr_progress
from .partitioner import BACKEND_ID, PartitionReport, TensorRTPartitioner
from .runtime_kernels import check_runtime_kernels


class PartitionSplitWarning(UserWarning):
    """A method runs in several TensorRT partitions (each boundary is a round trip)."""


@dataclass
class ExportResult:
    path: Path
    expected_path: Path | None
    seconds: dict[str, float] = field(default_factory=dict)
    partitioner: TensorRTPartitioner | None = None
    backends: dict[str, list[str]] = field(default_factory=dict)  # method -> delegate ids


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


def _warn_splits(backends: dict[str, list[str]], reports: list[PartitionReport]) -> None:
    names = list(backends)
    for i, (method, ids) in enumerate(backends.items()):
        count = ids.count(BACKEND_ID)
        if count <= 1:
            continue
        report = reports[i] if len(reports) == len(names) else None
        ops = sorted({report.ops_of.get(n, n) for n in report.rejected}) if report else []
        warnings.warn(PartitionSplitWarning(
            f"method {method!r} runs in {count} TensorRT partitions, split by ops TensorRT did "
            f"not take: {', '.join(ops) or 'unknown'}. Each boundary costs a round trip "
            "through ExecuTorch; exclude_ops or a model change can merge them."), stacklevel=3)


def export_program(model: torch.nn.Module | Mapping[str, torch.export.ExportedProgram],
                   example_inputs: Sequence[Any] | None, path: str | Path, *,
                   dynamic_shapes=None, partitioners: Sequence = (), exclude_ops=(),
                   require_backends: Iterable[str] = (), write_expected_file: bool = True,
                   reference_inputs: Sequence[Any] | None = None,
                   device_resident: bool = False,
                   progress: Progress | None = stderr_progress, **options) -> ExportResult:
    """export() returning timings, backends and the partitioner's reports too.

    `model` may also be a dict of method name -> ExportedProgram (several
    methods in one program, each partitioned on its own; example_inputs None).
    """
    path = Path(path)
    if path.suffix != ".pte":
        raise ValueError(f"{path} should end in .pte")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"the folder {path.parent} does not exist")
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
        reference = None
    else:
        inputs = _as_inputs(example_inputs)
        if progress:
            progress("torch.export...")
        programs = {"forward": torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes)}
        reference = (model, inputs)
    seconds["torch_export"] = time.perf_counter() - t0
    trt_partitioner = TensorRTPartitioner(exclude_ops=exclude_ops, progress=progress, **options)
    if device_resident:
        dr.place_on_device(trt_partitioner)
    t1 = time.perf_counter()
    if progress:
        progress("partitioning and building TensorRT engines...")
    with progress_to(progress), warnings.catch_warnings():
        # torch's pytree deprecation, raised where torch.export deep-copies
        # treespecs while ExecuTorch lowers: nothing a caller can act on.
        warnings.filterwarnings("ignore", category=FutureWarning, message=r".*LeafSpec.*")
        edge = to_edge_transform_and_lower(
            programs, partitioner=[trt_partitioner, *partitioners],
            # Non-core ATen ops (erfinv, ...) must get through to be reported below.
            compile_config=EdgeCompileConfig(_check_ir_validity=False))
        if device_resident:
            dr.check_device_io(edge)
        program = edge.to_executorch(*([dr.backend_config()] if device_resident else []))
    seconds["lower"] = time.perf_counter() - t1
    methods = describe_program(program.executorch_program)
    check_runtime_kernels(methods)
    if device_resident:
        dr.check_program(program.buffer)
    backends = {m.name: [d.backend for d in m.delegates] for m in methods}
    _check_required(backends, require_backends)
    _warn_splits(backends, trt_partitioner.reports)
    path.write_bytes(program.buffer)
    # -- reference (tools/expected.py): written after the program, never blocks it --
    ref = reference_source(reference[0] if reference else programs,
                           reference[1] if reference else None, reference_inputs)
    exp = write_export_reference(path, ref if write_expected_file else None)
    # -- end of reference --
    seconds["total"] = time.perf_counter() - t0
    if progress:
        progress(f"wrote {path} ({path.stat().st_size} bytes) in {seconds['total']:.1f} s")
    return ExportResult(path, exp, seconds, trt_partitioner, backends)


def export(model: torch.nn.Module, example_inputs: Sequence[Any], path: str | Path, *,
           dynamic_shapes=None, partitioners: Sequence = (), exclude_ops=(), **options) -> Path:
    """Exports `model` to a .pte and returns its path.

    TensorRT takes what its parser supports; `partitioners` then take what they
    can of the rest (and of what `exclude_ops` kept off TensorRT); ExecuTorch's
    portable kernels run what remains. Fails before writing anything if an op
    would be left without a kernel in the installed runtime, or if a backend
    named in `require_backends` got no delegate. Also writes `<path>.expected`
    and `<path>.expected.etensors`: the example inputs (or `reference_inputs`)
    and the eager outputs for them, which runners replay and `verify` compares
    with; when the eager run fails, export warns (ReferenceWarning) and writes
    the program without them (`write_expected_file=False`: never). Options:
    TensorRTCompileSpec fields (compute_capabilities, workspace_bytes, device_id, precision),
    `require_backends`, `progress` (a callable, or None for silence),
    `device_resident=True` (method inputs and outputs stay in CUDA memory on
    device_id; fails naming any input or output that would need a copy; see
    docs/device-resident.md).
    """
    return export_program(model, example_inputs, path, dynamic_shapes=dynamic_shapes,
                          partitioners=partitioners, exclude_ops=exclude_ops, **options).path


__all__ = ["export", "export_program", "ExportResult", "ExportError", "PartitionSplitWarning"]
