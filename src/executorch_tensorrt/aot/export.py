"""export(): nn.Module -> .pte whose TensorRT partitions carry real engines."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

from ..errors import ExportError
from .engine_builder import Progress, stderr_progress
from .partitioner import TensorRTPartitioner
from .runtime_kernels import check_runtime_kernels


@dataclass
class ExportResult:
    path: Path
    seconds: dict[str, float] = field(default_factory=dict)
    partitioner: TensorRTPartitioner | None = None


def _check_inputs(example_inputs) -> tuple:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)):
        raise TypeError(f"example_inputs must be a tuple of tensors, got {type(example_inputs).__name__}")
    return tuple(example_inputs)


def export_program(model: torch.nn.Module, example_inputs: Sequence[Any], path: str | Path, *,
                   dynamic_shapes=None, partitioners: Sequence = (), exclude_ops=(),
                   progress: Progress | None = stderr_progress, **options) -> ExportResult:
    """Like export(), returning timings and the partitioner's report too."""
    path = Path(path)
    if path.suffix != ".pte":
        raise ValueError(f"{path} should end in .pte")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"the folder {path.parent} does not exist")
    inputs = _check_inputs(example_inputs)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    if progress:
        progress("torch.export...")
    ep = torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes)
    seconds["torch_export"] = time.perf_counter() - t0
    trt_partitioner = TensorRTPartitioner(exclude_ops=exclude_ops, progress=progress, **options)
    t1 = time.perf_counter()
    if progress:
        progress("partitioning and building TensorRT engines...")
    edge = to_edge_transform_and_lower(
        ep, partitioner=[trt_partitioner, *partitioners],
        # Non-core ATen ops (erfinv, ...) must get through to be reported below.
        compile_config=EdgeCompileConfig(_check_ir_validity=False))
    program = edge.to_executorch()
    seconds["lower"] = time.perf_counter() - t1
    check_runtime_kernels(program.executorch_program)
    path.write_bytes(program.buffer)
    seconds["total"] = time.perf_counter() - t0
    if progress:
        progress(f"wrote {path} ({path.stat().st_size} bytes) in {seconds['total']:.1f} s")
    return ExportResult(path, seconds, trt_partitioner)


def export(model: torch.nn.Module, example_inputs: Sequence[Any], path: str | Path, *,
           dynamic_shapes=None, partitioners: Sequence = (), exclude_ops=(), **options) -> Path:
    """Exports `model` to a .pte: TensorRT takes what its parser supports, the given
    partitioners then take what they can of the rest, and ExecuTorch's portable
    kernels run what remains. Fails before writing anything if an op would be
    left without a kernel in the installed runtime. Options are
    TensorRTCompileSpec fields (compute_capabilities, workspace_bytes, device_id,
    precision) and `progress` (a callable or None). Returns the written path."""
    return export_program(model, example_inputs, path, dynamic_shapes=dynamic_shapes,
                          partitioners=partitioners, exclude_ops=exclude_ops, **options).path


__all__ = ["export", "export_program", "ExportResult", "ExportError"]
