"""Running a saved .pte the way the reference runners do: check the file,
load a method through `executorch.runtime`, make or read its inputs,
execute, time. The CLI, the demo and tools/bench/models.py compose these.

Inputs, in order of preference: a tensor file (`input.*`), the reference
inputs stored beside the program (`model.expected.etensors`, written by
export from the example inputs), or a deterministic, non-constant pattern
(`pattern_values`; the C++ runner makes the same one) so that batch-order,
transpose or dim-order bugs change the outputs. `ones` remains for tools
that compare with older runners.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..program import tensor_file as tf

PTE_IDENTIFIER_AT = 4  # a .pte is a flatbuffer: file identifier "ET.." at byte 4


class UsageError(ValueError):
    """The command was given something it cannot use (exit code 2)."""


class RunError(RuntimeError):
    """The program could not be loaded or run (exit code 3)."""


def reference_path(pte: str | Path) -> Path:
    """`model.expected.etensors`: reference inputs and outputs beside `model.pte`."""
    return Path(pte).with_suffix(".expected" + tf.SUFFIX)


def check_program_file(path: str | Path) -> Path:
    """`path` as a readable ExecuTorch program, or UsageError saying what it is instead."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{path} is a directory; give the .pte file inside it")
    if not path.exists():
        raise UsageError(f"{path} does not exist")
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise UsageError(f"{path} cannot be read: {e.strerror}") from None
    if len(head) < 8 or head[PTE_IDENTIFIER_AT:PTE_IDENTIFIER_AT + 2] != b"ET":
        kind = ("a tensor file" if head.startswith(tf.MAGIC) else
                "a JSON or text file" if head.lstrip()[:1] in (b"{", b"[") else
                "a zip archive (a .pt2 from torch.export.save? export it first)"
                if head.startswith(b"PK") else "not an ExecuTorch program")
        raise UsageError(f"{path} is {kind}: an ExecuTorch program (.pte) has the identifier "
                         f"'ET..' at byte 4, this file has {head[4:8]!r}")
    return path


PTD_IDENTIFIER = b"FT01"  # a .ptd (ExecuTorch flat tensor file) has it at byte 4


def default_data_path(pte: str | Path) -> Path:
    """`model.ptd` beside `model.pte`: where export(..., external_weights=True)
    writes the weights (ExecuTorch names the file after the external tag,
    which export sets to the program's stem)."""
    return Path(pte).with_suffix(".ptd")


def resolve_data_path(pte: str | Path, data: str | Path | None) -> tuple[Path | None, str | None]:
    """The .ptd to load with `pte` and a note saying so: `data` when given
    (checked to be a readable flat tensor file), else `model.ptd` beside the
    program when it exists, else None (the weights are in the .pte, or none)."""
    if data is not None:
        path = Path(data)
        if path.is_dir():
            raise UsageError(f"--data {path} is a directory; give the .ptd file inside it")
        try:
            with open(path, "rb") as f:
                head = f.read(8)
        except OSError as e:
            raise UsageError(f"--data {path} cannot be read: {e.strerror}") from None
        if head[PTE_IDENTIFIER_AT:8] != PTD_IDENTIFIER:
            kind = ("an ExecuTorch program (.pte), not its weights" if head[4:6] == b"ET"
                    else "not an ExecuTorch data file")
            raise UsageError(f"--data {path} is {kind}: a .ptd has the identifier "
                             f"{PTD_IDENTIFIER.decode()!r} at byte 4, this file has {head[4:8]!r}")
        return path, None
    beside = default_data_path(pte)
    if beside.is_file():
        return beside, f"loading the weights in {beside} beside the program (--data overrides)"
    return None, None


# ---- inputs ------------------------------------------------------------------

def pattern_values(count: int, dtype: str) -> np.ndarray:
    """Deterministic values with no short period (rows of any width differ):
    h = (i * 2654435761 + 12345) mod 2^32, k = (h >> 8) mod 251; floats
    (k - 125) / 128 in (-1, 1) (7 significant bits: exact in float16 and
    bfloat16 too), integers k mod 16, bools k odd."""
    i = np.arange(count, dtype=np.uint64)
    k = (((i * np.uint64(2654435761) + np.uint64(12345)) & np.uint64(0xFFFFFFFF))
         >> np.uint64(8)) % np.uint64(251)
    k = k.astype(np.int64)
    if dtype == "bool":
        return k % 2 == 1
    if dtype in ("float16", "float32", "float64", "bfloat16"):
        return (k - 125) / 128.0
    return k % 16


def pattern_tensor(name: str, dtype: str, shape: list[int]) -> tf.Tensor:
    values = pattern_values(int(np.prod(shape, dtype=np.int64)), dtype)
    if dtype == "bfloat16":  # exact: the values have 7 significant bits
        bits = values.astype(np.float32).view(np.uint32) >> 16
        return tf.Tensor(name, dtype, bits.astype(np.uint16).reshape(shape))
    return tf.Tensor(name, dtype, values.astype(tf.DTYPES[tf.CODE_OF_NAME[dtype]][1])
                     .reshape(shape))


def ones_tensor(name: str, dtype: str, shape: list[int]) -> tf.Tensor:
    if dtype == "bfloat16":
        return tf.Tensor(name, dtype, np.full(shape, 0x3F80, dtype=np.uint16))
    return tf.Tensor(name, dtype, np.ones(shape, dtype=tf.DTYPES[tf.CODE_OF_NAME[dtype]][1]))


@dataclass
class InputSpec:
    dtype: str
    shape: list[int]


def method_input_specs(method) -> list[InputSpec]:
    meta = method.metadata
    specs = []
    for i in range(meta.num_inputs()):
        tm = meta.input_tensor_meta(i)
        code = int(tm.dtype())
        if code not in tf.DTYPES:
            raise UsageError(f"input {i} has ScalarType code {code}, which the runner cannot "
                             f"make; give it with --inputs")
        specs.append(InputSpec(tf.DTYPES[code][0], list(tm.sizes())))
    return specs


def choose_inputs(specs: list[InputSpec], inputs_file: Path | None, fill: str | None,
                  stored: Path | None) -> tuple[list[tf.Tensor], str]:
    """The inputs to feed and a sentence saying where they came from."""
    if inputs_file is not None:
        tensors = tf.select(tf.read_tensors(inputs_file), "input")
        check_inputs(specs, tensors, str(inputs_file))
        return tensors, f"inputs from {inputs_file}"
    if fill is None and stored is not None and stored.is_file():
        tensors = tf.select(tf.read_tensors(stored), "input")
        if tensors:
            check_inputs(specs, tensors, str(stored))
            return tensors, f"the example inputs stored in {stored}"
    maker = ones_tensor if fill == "ones" else pattern_tensor
    tensors = [maker(f"input.{i}", s.dtype, s.shape) for i, s in enumerate(specs)]
    return tensors, ("inputs filled with 1" if fill == "ones" else
                     "deterministic pattern inputs (cli/runner.py pattern_values)")


def check_inputs(specs: list[InputSpec], tensors: list[tf.Tensor], where: str) -> None:
    if len(tensors) != len(specs):
        raise UsageError(f"{where} has {len(tensors)} input tensors, the method takes "
                         f"{len(specs)}")
    for i, (s, t) in enumerate(zip(specs, tensors)):
        if t.dtype != s.dtype:
            raise UsageError(f"{where}: input.{i} is {t.dtype}, the method takes {s.dtype}")
        if len(t.shape) != len(s.shape):
            raise UsageError(f"{where}: input.{i} has shape {t.shape}, the method takes "
                             f"rank {len(s.shape)} ({s.shape})")


# ---- loading and running -----------------------------------------------------

def load_method(path: str | Path, method_name: str = "forward",
                data_path: str | Path | None = None):
    """An executorch.runtime Method, with TensorRTBackend registered and the
    program's weights file `data_path` (.ptd) when given. Raises UsageError
    for an unknown method (listing the methods), RunError when ExecuTorch or
    the backend refuses the program (with the backend's cause)."""
    path = check_program_file(path)
    import executorch_tensorrt
    from executorch.runtime import Runtime

    executorch_tensorrt.register()
    extra = {"data_path": str(data_path)} if data_path is not None else {}
    try:
        program = Runtime.get().load_program(str(path), **extra)
    except Exception as e:  # noqa: BLE001 - ExecuTorch raises RuntimeError with a code
        if data_path is None:
            raise RunError(f"ExecuTorch cannot load {path}: {e}") from None
        raise RunError(f"ExecuTorch cannot load {path} with the weights file {data_path}: {e} "
                       "(the .ptd is truncated or not an ExecuTorch data file; pass the one "
                       "exported with the program)") from None
    names = sorted(program.method_names)
    if method_name not in names:
        raise UsageError(f"{path} has no method {method_name!r}; its methods: "
                         f"{', '.join(names)}")
    try:
        return program.load_method(method_name)
    except Exception as e:  # noqa: BLE001
        cause = executorch_tensorrt.last_error()
        hint = ""
        if "pass the .ptd" in cause:
            hint = (f" No weights file was given: export writes it as "
                    f"{default_data_path(path)} beside the program; pass it with --data PATH."
                    if data_path is None else
                    f" The weights file given, {data_path}, lacks them: pass the .ptd exported "
                    "with this program.")
        raise RunError(f"cannot load method {method_name!r} of {path}: {e}"
                       f"{backend_cause(cause)}{hint}") from None


def backend_cause(last_error: str) -> str:
    """The backend's recorded cause as one sentence (its first line, without
    the traceback an unexpected error carries), with a hint where one helps."""
    lines = [ln.strip() for ln in last_error.splitlines() if ln.strip()]
    if not lines:
        return ""
    first = lines[0].removesuffix("Traceback (most recent call last):").strip()
    if any(k in last_error for k in ("INVALID_PROTOBUF", "protobuf parsing failed",
                                     "ModelProto")):
        first += (" The ONNX model embedded in the TensorRT partition is damaged, so the .pte "
                  "file is corrupted: export the model again.")
    return f". {first}"


def error_text(e: BaseException) -> str:
    """An exception's message without the C++ backtrace that torch's errors
    (c10::Error, raised through ExecuTorch's bindings) append to it."""
    return str(e).split("\nException raised from ", 1)[0].strip()


def run_method(method, given: list) -> list:
    """One call of an executorch.runtime Method on torch inputs; RunError with
    ExecuTorch's refusal of the inputs or the backend's cause."""
    import executorch_tensorrt

    try:
        return method.execute(given)
    except Exception as e:  # noqa: BLE001 - ExecuTorch raises RuntimeError with a code
        if "set_inputs" in str(e):  # ExecuTorch's own refusal: our backend never ran
            raise RunError(f"running the method failed: {error_text(e)}"
                           f"{input_refusal(method, given)}") from None
        raise RunError(f"running the method failed: {error_text(e)}"
                       f"{backend_cause(executorch_tensorrt.last_error())}") from None


def execute(method, inputs: list[tf.Tensor]) -> list[tf.Tensor]:
    outputs = run_method(method, [tf.to_torch(t) for t in inputs])
    return [tf.from_torch(f"output.{i}", o) for i, o in enumerate(outputs)]


def input_refusal(method, given) -> str:
    """Why ExecuTorch's set_inputs refused the inputs, which it only logs (its
    Python error carries a code, and last_error() is the backend's, which was
    not called): the first input whose dtype, rank, sizes or layout differ
    from the program's plan for it (docs/security.md, "last_error()")."""
    from ..dtypes import by_scalar_type

    meta = method.metadata
    if meta.num_inputs() != len(given):
        return f". The method takes {meta.num_inputs()} inputs, {len(given)} were given."
    for i, t in enumerate(given):
        m = meta.input_tensor_meta(i)
        want = by_scalar_type(int(m.dtype()))
        want_name = want.numpy if want is not None and want.numpy else f"code {int(m.dtype())}"
        got_name = str(t.dtype).removeprefix("torch.")
        planned = list(m.sizes())
        if got_name != want_name:
            return f". ExecuTorch refused input {i}: dtype {got_name}, the program takes {want_name}."
        if t.dim() != len(planned) or any(g > p for g, p in zip(t.shape, planned)):
            return (f". ExecuTorch refused input {i}: shape {list(t.shape)}, the program plans "
                    f"{planned} (exactly that for a static input, at most that per dimension "
                    "for a dynamic one).")
        if not t.is_contiguous():
            return f". ExecuTorch refused input {i}: it is not contiguous (pass a contiguous copy)."
    return (". ExecuTorch refused the inputs before the TensorRT backend ran; its log line "
            "above says why.")


def format_outputs(outputs: list[tf.Tensor], shown: int = 8) -> str:
    """`output[i] shape=[...]` and the first values, as every runner prints them."""
    lines = []
    for i, t in enumerate(outputs):
        lines.append(f"output[{i}] shape=[{','.join(str(d) for d in t.shape)}]")
        values = t.as_float64().ravel()[:shown]
        lines.append("  values: " + ", ".join(f"{float(v):.4f}" for v in values))
    return "\n".join(lines)


# ---- timing ------------------------------------------------------------------

@dataclass
class Timing:
    median_ms: float
    samples_ms: list[float]
    calls: int

    def __str__(self) -> str:
        return f"{self.median_ms:.3f} ms/call (median of {len(self.samples_ms)} x {self.calls})"


def time_calls(fn: Callable[[], object], calls: int = 20, repeats: int = 5,
               warmup: int = 3) -> Timing:
    """Median ms per call over `repeats` batches of `calls` calls."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t) / calls * 1e3)
    return Timing(statistics.median(samples), samples, calls)
