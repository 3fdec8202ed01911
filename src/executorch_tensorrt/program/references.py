"""The eager reference that export writes beside a program, and how runners'
results are checked against it (`executorch-tensorrt verify`).

Beside `model.pte`:
  model.expected.etensors  the inputs the reference ran on (`input.*`, the
                           example inputs unless others were given) and the
                           eager outputs (`output.*`), whole (tensor_file.py)
  model.expected           a small JSON summary: format, where the inputs came
                           from, per output shape, dtype, first values, min,
                           max, mean and NaN/inf counts

`verify` compares a runner's full outputs (`--outputs FILE`) with the
reference element by element (compare.py); it also still accepts a runner's
printed text (`output[i] shape=[...]` + first values), which can only check
what was printed. Older summaries (format 1, outputs for inputs of 1.0) and
the two-line form other tools write (a shape, then one value every element
equals) are read too.

Imports no torch at module level (verify starts fast); building a reference
does.
"""
from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ExecuTorchTensorRTError, OutputWriteError
from ..output_files import write_bytes_whole
from . import tensor_file as tf

FORMAT = "executorch-tensorrt-expected/2"
OLD_FORMAT = "executorch-tensorrt-expected/1"
SUMMARY_VALUES = 16  # first values kept in the text summary
PRINTED = 8          # values a reference runner prints per output


class ExpectedError(ExecuTorchTensorRTError, ValueError):
    """An .expected file, or a runner's output, that cannot be compared."""


class ReferenceWarning(UserWarning):
    """The eager reference could not be made or holds NaN/inf; export still wrote the program."""


@dataclass
class ExpectedOutput:
    shape: list[int]
    values: list[float]      # all values, or a prefix
    complete: bool
    dtype: str = "float32"
    stats: dict | None = None


def expected_path(pte_path: str | Path) -> Path:
    return Path(pte_path).with_suffix(".expected")


def tensors_path(pte_or_expected: str | Path) -> Path:
    """`model.expected.etensors` for `model.pte` or `model.expected`."""
    return Path(pte_or_expected).with_suffix(".expected" + tf.SUFFIX)


# ---- making the reference ----------------------------------------------------

def reference_outputs(model, inputs) -> list:
    """Eager outputs of `model` on `inputs` (tensors; raises ExpectedError otherwise)."""
    import torch

    from torch.utils import _pytree as pytree

    with torch.no_grad():
        out = model(*inputs)
    # The program returns the leaves of the output pytree (dict, ModelOutput, ...).
    outs = pytree.tree_leaves(out)
    for i, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            raise ExpectedError(f"output {i} is a {type(o).__name__}, not a tensor")
    return outs


def write_reference(pte_path: str | Path, inputs, outputs, source: str) -> Path:
    """Writes model.expected.etensors (inputs and outputs) and the model.expected summary."""
    import torch

    stored = [tf.from_torch(f"input.{i}", t) for i, t in enumerate(inputs)
              if isinstance(t, torch.Tensor)]
    if len(stored) != len(inputs):
        raise ExpectedError("only tensor inputs can be stored with the reference")
    results = [tf.from_torch(f"output.{i}", o) for i, o in enumerate(outputs)]
    tf.write_tensors(tensors_path(pte_path), stored + results)
    entries = []
    for t in results:
        flat = t.as_float64().ravel()
        finite = flat[np.isfinite(flat)]
        entries.append({
            "shape": t.shape, "dtype": t.dtype, "numel": int(flat.size),
            "complete": flat.size <= SUMMARY_VALUES,
            "values": [float(v) for v in flat[:SUMMARY_VALUES]],
            "min": float(finite.min()) if finite.size else None,
            "max": float(finite.max()) if finite.size else None,
            "mean": float(finite.mean()) if finite.size else None,
            "nan": int(np.isnan(flat).sum()), "inf": int(np.isinf(flat).sum()),
        })
    summary = {"format": FORMAT, "tensors": tensors_path(pte_path).name, "inputs": source,
               "input_shapes": [t.shape for t in stored], "outputs": entries}
    return write_bytes_whole(expected_path(pte_path), json.dumps(summary, indent=1) + "\n")


def write_export_reference(pte_path: str | Path, reference) -> Path | None:
    """What export calls with reference_source()'s (model, inputs, source),
    or None for no reference: writes it, or warns (ReferenceWarning) and
    writes nothing: the program is valid without it. A file that cannot be
    written is an error (OutputWriteError), as for the program's own files."""
    if reference is None:
        return None
    model, inputs, source = reference
    try:
        outputs = reference_outputs(model, inputs)
        path = write_reference(pte_path, inputs, outputs, source)
    except OutputWriteError:
        raise
    except Exception as e:  # noqa: BLE001 - the model's own errors, of any kind
        warnings.warn(ReferenceWarning(
            f"no {expected_path(pte_path).name} was written: running the model eagerly on the "
            f"{source} failed ({type(e).__name__}: {e}). The program was exported; verify it "
            "against a reference from other inputs (export_program(..., reference_inputs=...))"
            ), stacklevel=3)
        return None
    for i, o in enumerate(outputs):
        if o.is_floating_point() and not bool(o.isfinite().all()):
            warnings.warn(ReferenceWarning(
                f"reference output {i} for the {source} holds NaN or inf; verify treats NaN as "
                "equal to NaN and an infinity as equal to itself"), stacklevel=3)
    return path


# ---- reading -----------------------------------------------------------------

def _parse_shape(text: str, where: str) -> list[int]:
    m = re.fullmatch(r"\s*\[\s*([0-9,\s]*)\]\s*", text)
    if not m:
        raise ExpectedError(f"{where}: {text.strip()!r} is not a shape like [64,64]")
    return [int(d) for d in m.group(1).replace(" ", "").split(",") if d]


def read_expected(path: str | Path) -> list[ExpectedOutput]:
    """The summary's outputs (values: a prefix, or everything when complete)."""
    path = Path(path)
    if path.is_dir():
        raise ExpectedError(f"{path} is a directory, not an .expected file")
    text = path.read_text(errors="replace")
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ExpectedError(f"{path}: invalid JSON: {e}") from None
        if data.get("format") not in (FORMAT, OLD_FORMAT):
            raise ExpectedError(f"{path}: unknown format {data.get('format')!r}")
        try:
            return [ExpectedOutput(o["shape"], o["values"], o["complete"], o.get("dtype", ""),
                                   {k: o.get(k) for k in ("min", "max", "mean")})
                    for o in data["outputs"]]
        except (KeyError, TypeError) as e:
            raise ExpectedError(f"{path}: malformed output entry ({e})") from None
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
    return [ExpectedOutput(shape, [value] * min(numel, 256), numel <= 256)]


def reference_tensors(reference: str | Path) -> tuple[Path, list[tf.Tensor]]:
    """The full reference outputs for a .pte, .expected or .etensors path."""
    reference = Path(reference)
    path = reference if tf.is_tensor_file(reference) else tensors_path(reference)
    if not path.is_file():
        raise ExpectedError(f"{path} does not exist: the program was exported without a "
                            "full reference (re-export it, or compare printed output)")
    try:
        outputs = tf.select(tf.read_tensors(path), "output")
    except tf.TensorFileError as e:
        raise ExpectedError(str(e)) from None
    if not outputs:
        raise ExpectedError(f"{path} holds no output.* tensors")
    return path, outputs


# ---- printed runner output (the older, prefix-only check) -------------------

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


def compare(expected: list[ExpectedOutput], printed_text: str, atol: float,
            rtol: float = 0.0) -> list[str]:
    """Problems found in a runner's printed output (its first values only).
    atol = rtol = 0 means the printed text must equal the reference's exactly."""
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
        if atol == 0 and rtol == 0:
            if format_values(values) != format_values(want):
                problems.append(f"output[{i}]: printed {format_values(values)}, expected "
                                f"exactly {format_values(want)}")
            continue
        bad = [(k, a, b) for k, (a, b) in enumerate(zip(values, want))
               if not (abs(a - b) <= atol + rtol * abs(b) or (a != a and b != b))]
        if bad:
            k, a, b = max(bad, key=lambda x: abs(x[1] - x[2]) if x[1] == x[1] else math.inf)
            problems.append(f"output[{i}]: {len(bad)} of {len(values)} printed values differ; "
                            f"largest difference {abs(a - b):.3g} at value {k} (expected "
                            f"{b:.6g}, printed {a:.4f}) exceeds atol {atol:g} + rtol {rtol:g} "
                            "x |expected|")
    return problems


def reference_source(model, example_inputs, reference_inputs=None):
    """(callable, inputs, description) for export's reference, or None when
    there is nothing to run: `model` is an nn.Module, or export's dict of
    method -> ExportedProgram (its `forward` with the example inputs
    torch.export recorded)."""
    if isinstance(model, dict):
        ep = model.get("forward")
        if ep is None:
            return None
        recorded = getattr(ep, "example_inputs", None)
        # Keyword inputs cannot be fed by a runner: no recorded reference then.
        example_inputs = recorded[0] if recorded is not None and not recorded[1] else None
        if example_inputs is None and reference_inputs is None:
            return None
        model = ep.module()
    if reference_inputs is not None:
        return model, tuple(reference_inputs), "given reference inputs"
    if example_inputs is None:
        return None
    return model, tuple(example_inputs), "example inputs"
