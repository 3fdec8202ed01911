"""`<model>.expected`: eager reference outputs for inputs filled with 1.0, and
the comparison that `executorch-tensorrt verify` makes against a runner's
printed output.

Format written here (JSON, one object):
  {"format": "executorch-tensorrt-expected/1", "inputs": "ones",
   "outputs": [{"shape": [2, 10], "dtype": "float32", "numel": 20,
                "values": [...all, or the first PREFIX...],
                "complete": true|false, "min": .., "max": .., "mean": ..}]}
Also read: the two-line form other tools write: line 1 a shape like
`[64,64]`, line 2 one value that every element equals.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import ExecuTorchTensorRTError

FORMAT = "executorch-tensorrt-expected/1"
FULL_LIMIT = 4096  # outputs up to this many elements are stored whole
PREFIX = 256
PRINTED = 8        # values a reference runner prints per output


class ExpectedError(ExecuTorchTensorRTError, ValueError):
    """An .expected file, or a runner's output, that cannot be compared."""


@dataclass
class ExpectedOutput:
    shape: list[int]
    values: list[float]      # all values, or a prefix
    complete: bool
    dtype: str = "float32"
    stats: dict | None = None


def expected_path(pte_path: str | Path) -> Path:
    return Path(pte_path).with_suffix(".expected")


def ones_like_inputs(example_inputs) -> tuple:
    return tuple(torch.ones_like(t) if isinstance(t, torch.Tensor) else t
                 for t in example_inputs)


def reference_outputs(model, example_inputs) -> list[torch.Tensor]:
    with torch.no_grad():
        out = model(*ones_like_inputs(example_inputs))
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    for i, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            raise ExpectedError(f"output {i} is a {type(o).__name__}, not a tensor")
        if o.is_floating_point() and not torch.isfinite(o).all():
            raise ExpectedError(
                f"the eager reference output {i} for inputs of 1.0 is not finite "
                "(NaN or inf), so it cannot serve as a reference; check the model")
    return outs


def write_expected(path: str | Path, outputs: list[torch.Tensor]) -> Path:
    entries = []
    for o in outputs:
        flat = o.detach().flatten().to(torch.float64)
        complete = flat.numel() <= FULL_LIMIT
        entries.append({
            "shape": list(o.shape), "dtype": str(o.dtype).removeprefix("torch."),
            "numel": flat.numel(), "complete": complete,
            "values": (flat if complete else flat[:PREFIX]).tolist(),
            "min": float(flat.min()) if flat.numel() else None,
            "max": float(flat.max()) if flat.numel() else None,
            "mean": float(flat.mean()) if flat.numel() else None,
        })
    path = Path(path)
    path.write_text(json.dumps({"format": FORMAT, "inputs": "ones", "outputs": entries}) + "\n")
    return path


def _parse_shape(text: str, where: str) -> list[int]:
    m = re.fullmatch(r"\s*\[\s*([0-9,\s]*)\]\s*", text)
    if not m:
        raise ExpectedError(f"{where}: {text.strip()!r} is not a shape like [64,64]")
    return [int(d) for d in m.group(1).replace(" ", "").split(",") if d]


def read_expected(path: str | Path) -> list[ExpectedOutput]:
    text = Path(path).read_text()
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ExpectedError(f"{path}: invalid JSON: {e}") from None
        if data.get("format") != FORMAT:
            raise ExpectedError(f"{path}: unknown format {data.get('format')!r}")
        return [ExpectedOutput(o["shape"], o["values"], o["complete"], o.get("dtype", ""),
                               {k: o.get(k) for k in ("min", "max", "mean")})
                for o in data["outputs"]]
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) != 2:
        raise ExpectedError(f"{path}: expected the JSON form or two lines (shape, value), "
                            f"found {len(lines)} lines")
    shape = _parse_shape(lines[0], str(path))
    try:
        value = float(lines[1])
    except ValueError:
        raise ExpectedError(f"{path}: line 2 {lines[1]!r} is not a number") from None
    numel = math.prod(shape)
    return [ExpectedOutput(shape, [value] * min(numel, PREFIX), numel <= PREFIX)]


_OUTPUT = re.compile(r"^output\[(\d+)\] shape=(\[[0-9,]*\])\s*$")
_VALUES = re.compile(r"^\s*values:\s*(.*)$")


def parse_runner_output(text: str) -> list[tuple[list[int], list[float] | None]]:
    """(shape, printed values) per `output[i] shape=[...]` block of a runner."""
    outputs: list[tuple[list[int], list[float] | None]] = []
    for line in text.splitlines():
        m = _OUTPUT.match(line)
        if m:
            if int(m.group(1)) != len(outputs):
                raise ExpectedError(f"runner output lists output[{m.group(1)}] after "
                                    f"{len(outputs)} outputs")
            outputs.append((_parse_shape(m.group(2), "runner output"), None))
            continue
        v = _VALUES.match(line)
        if v and outputs and outputs[-1][1] is None:
            try:
                values = [float(x) for x in v.group(1).split(",") if x.strip()]
            except ValueError:
                raise ExpectedError(
                    f"runner output has an unparsable values line: {line!r}") from None
            outputs[-1] = (outputs[-1][0], values)
    return outputs


def format_values(values) -> str:
    return ", ".join(f"{float(v):.4f}" for v in values)


def compare(expected: list[ExpectedOutput], printed_text: str, tolerance: float) -> list[str]:
    """Problems found; empty when the runner's output matches. Tolerance 0
    means the printed text must equal what the reference prints exactly."""
    problems = []
    got = parse_runner_output(printed_text)
    if len(got) != len(expected):
        problems.append(f"the runner printed {len(got)} outputs, the reference has {len(expected)}")
    for i, (exp, (shape, values)) in enumerate(zip(expected, got)):
        if shape != list(exp.shape):
            problems.append(f"output[{i}]: shape {shape}, expected {exp.shape}")
            continue
        if values is None:
            problems.append(f"output[{i}]: no values line")
            continue
        want = exp.values[:PRINTED]
        n = min(PRINTED, math.prod(shape))
        if len(values) != min(n, len(want)):
            problems.append(f"output[{i}]: {len(values)} values printed, "
                            f"expected {min(n, len(want))}")
            continue
        if tolerance == 0:
            if format_values(values) != format_values(want):
                problems.append(f"output[{i}]: printed {format_values(values)}, expected "
                                f"exactly {format_values(want)}")
        else:
            worst = max((abs(a - b) for a, b in zip(values, want)), default=0.0)
            if not worst <= tolerance:
                problems.append(f"output[{i}]: largest difference {worst:.3g} exceeds "
                                f"tolerance {tolerance:g}")
    return problems
