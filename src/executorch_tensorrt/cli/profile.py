"""`executorch-tensorrt profile`: run a program with ETDump and show where the
TensorRT partitions spend their time (docs/profiling.md).

Each TensorRT partition's call is broken into the stages its executor went
through and, with per-node profiling, into ONNX nodes (onnxruntime fallback)
or TensorRT layers (GPU). The events are ExecuTorch delegate events, read
back with executorch.devtools.Inspector; an ETRecord (export_program's
etrecord_path) lets Inspector name the exported ATen ops of each event.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import types
from dataclasses import dataclass, field
from pathlib import Path

from ..runtime.profiling import PROFILE_NODES_ENV, STAGE_NAMES
from ..program import tensor_file as tf
from .runner import (RunError, UsageError, backend_cause, check_program_file, choose_inputs,
                     method_input_specs)

BACKEND = "TensorRTBackend"


@dataclass
class EventRow:
    name: str
    durations_ms: list[float]
    ops: list[str] = field(default_factory=list)  # exported ATen ops (needs an ETRecord)

    @property
    def mean_ms(self) -> float:
        return statistics.fmean(self.durations_ms) if self.durations_ms else 0.0


@dataclass
class PartitionProfile:
    instruction: int  # the delegate call's instruction index in the method
    total: EventRow | None = None  # ExecuTorch's DELEGATE_CALL event
    stages: list[EventRow] = field(default_factory=list)
    nodes: list[EventRow] = field(default_factory=list)


def default_etrecord(pte: Path) -> Path | None:
    candidate = pte.with_suffix(".etrecord")
    return candidate if candidate.is_file() else None


@contextlib.contextmanager
def _nodes_env(enabled: bool):
    old = os.environ.get(PROFILE_NODES_ENV)
    if enabled:
        os.environ[PROFILE_NODES_ENV] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(PROFILE_NODES_ENV, None)
        else:
            os.environ[PROFILE_NODES_ENV] = old


def run_with_etdump(pte: str | Path, etdump: str | Path, calls: int = 10, nodes: bool = False,
                    method: str = "forward", inputs_file: Path | None = None,
                    data_path: str | Path | None = None) -> str:
    """Runs `calls` calls of `method` with ETDump on and writes it to `etdump`;
    returns where the inputs came from."""
    if calls < 1:
        raise UsageError(f"--calls must be at least 1, got {calls}")
    pte = check_program_file(pte)
    import executorch_tensorrt
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    executorch_tensorrt.register()
    # The executors read the switch when they are created: the module loads
    # its methods lazily, at the first call.
    with _nodes_env(nodes):
        try:
            module = _load_for_executorch(str(pte), enable_etdump=True,
                                          data_path=str(data_path) if data_path else None)
        except Exception as e:  # noqa: BLE001 - ExecuTorch raises RuntimeError with a code
            raise RunError(f"ExecuTorch cannot load {pte}: {e}") from None
        specs = method_input_specs(types.SimpleNamespace(metadata=module.method_meta(method)))
        inputs, where = choose_inputs(specs, inputs_file, None,
                                      pte.with_suffix(".expected.etensors"))
        torch_inputs = [tf.to_torch(t) for t in inputs]
        for _ in range(calls):
            try:
                module.run_method(method, torch_inputs)
            except Exception as e:  # noqa: BLE001
                raise RunError(f"running {method!r} failed: {e}"
                               f"{backend_cause(executorch_tensorrt.last_error())}") from None
    module.write_etdump_result_to_file(str(etdump))
    return where


def read_partitions(etdump: str | Path, etrecord: str | Path | None = None
                    ) -> list[PartitionProfile]:
    """The TensorRT partitions' events of the ETDump's Execute block, in call order."""
    import warnings

    from executorch.devtools import Inspector

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Inspector warns about debug data we did not ask for
        inspector = Inspector(etdump_path=str(etdump),
                              etrecord=str(etrecord) if etrecord else None)
    partitions: dict[int, PartitionProfile] = {}
    for block in inspector.event_blocks:
        if block.name != "Execute":
            continue
        for event in block.events:
            instruction = getattr(event, "_instruction_id", None)
            if instruction is None or event.perf_data is None:
                continue
            row = EventRow(event.name, list(event.perf_data.raw), list(event.op_types or []))
            if event.is_delegated_op:
                part = partitions.setdefault(instruction, PartitionProfile(instruction))
                (part.stages if event.name in STAGE_NAMES else part.nodes).append(row)
            elif event.name == "DELEGATE_CALL" and instruction in partitions:
                partitions[instruction].total = row
    return [partitions[k] for k in sorted(partitions)]


def _table(title: str, rows: list[EventRow]) -> list[str]:
    width = max([len(r.name) for r in rows] + [len(title)])
    lines = [f"  {title:<{width}}  calls    mean ms     min ms     max ms  ATen ops"]
    for r in rows:
        d = r.durations_ms
        ops = ", ".join(dict.fromkeys(op.split(".")[1] if op.count(".") else op for op in r.ops))
        lines.append(f"  {r.name:<{width}}  {len(d):5d}  {r.mean_ms:9.4f}  {min(d):9.4f}  "
                     f"{max(d):9.4f}  {ops}")
    return lines


def format_profile(partitions: list[PartitionProfile]) -> str:
    if not partitions:
        return (f"no {BACKEND} events in the ETDump: the program has no TensorRT partition, "
                "or the adapter was built without ExecuTorch's event tracer")
    out = []
    for k, p in enumerate(partitions):
        total = f"; DELEGATE_CALL mean {p.total.mean_ms:.4f} ms" if p.total else ""
        out.append(f"partition {k} (instruction {p.instruction}){total}")
        out += _table("stage", p.stages)
        if p.nodes:
            out += _table("node / layer", p.nodes)
    return "\n".join(out)


def profile(pte: str | Path, calls: int = 10, nodes: bool = False,
            etrecord: str | Path | None = None, etdump: str | Path | None = None,
            method: str = "forward", inputs_file: Path | None = None,
            data_path: str | Path | None = None) -> str:
    """Runs the program with ETDump and returns the tables to print.
    `data_path`: the program's weights file (.ptd), if it has one."""
    pte = check_program_file(pte)
    etrecord = etrecord or default_etrecord(pte)
    with tempfile.TemporaryDirectory(prefix="executorch_tensorrt_profile_") as tmp:
        path = Path(etdump) if etdump else Path(tmp) / "program.etdp"
        where = run_with_etdump(pte, path, calls, nodes, method, inputs_file, data_path)
        partitions = read_partitions(path, etrecord)
    header = (f"{pte}: {calls} calls of {method!r}, {where}"
              + (f"; ETRecord {etrecord}" if etrecord else "; no ETRecord (no ATen ops)"))
    return header + "\n" + format_profile(partitions)
