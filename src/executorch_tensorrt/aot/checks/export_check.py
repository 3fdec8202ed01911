"""How export runs the check of the program it wrote (aot/checks/run_check.py):
on the reference's inputs, in this process or, for a big program, a child.

Running a program costs about twice its weights on top of the process (the
mapped program pages and onnxruntime's session build), while export itself
streams them (docs/big-models.md). Above IN_PROCESS_LIMIT bytes of program,
export therefore runs the same check_program in a fresh interpreter: its
own peak stays what the export needed, and a crash of the program cannot
take the exporting process down (it becomes the check's failure). Below the
limit the interpreter's start (seconds) would cost more than the check.

    python -m executorch_tensorrt.aot.checks.export_check ARGS_JSON
    python -m executorch_tensorrt.aot.checks.export_check -   (ARGS_JSON on standard input)

prints the RunCheck as JSON on its last line of standard output. The child's
imports cost more than the check itself, so export starts it with `-` as
soon as it knows the weights are big (start_check_child) and hands it the
arguments when the program is written. It starts through CHILD_START, not
`-m`: torch and ExecuTorch's runtime extension are imported before this
package, whose import would otherwise load ExecuTorch through
`executorch.runtime` and with it `executorch.exir`, the compiler (about 7 s
of CPU of the child's 10: docs/verification.md).
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from ...program import tensor_file as tf
from ...program.info import MethodInfo
from ...program.references import tensors_path
from .run_check import MethodRunCheck, RunCheck, check_program, safe_int_range, stored_case

IN_PROCESS_LIMIT = 32 * 1024 * 1024  # .pte + .ptd bytes run in the exporting process
STDERR_SHOWN = 2000
# The extension before the package: the adapter's loader then finds
# libexecutorch.so loaded and imports nothing more to get it (run_check.load_program).
CHILD_START = ("import sys, torch\n"
               "from executorch.extension.pybindings import _C\n"
               "from executorch_tensorrt.aot.checks.export_check import main\n"
               "main(sys.argv[1:])\n")


def checks_in_child(nbytes: int) -> bool:
    """Whether a program of `nbytes` (.pte + .ptd) is checked in a child process."""
    return nbytes > IN_PROCESS_LIMIT


def to_json(check: RunCheck) -> str:
    return json.dumps(dataclasses.asdict(check))


def from_json(text: str) -> RunCheck:
    data = json.loads(text)
    methods = tuple(MethodRunCheck(**{**m, "executors": tuple(m["executors"]),
                                      "top1": tuple(m["top1"]) if m["top1"] else None})
                    for m in data["methods"])
    return RunCheck(methods, data["skipped"])


def start_check_child() -> subprocess.Popen:
    """A check child that imports what it needs now and waits for its
    arguments on standard input (check_in_child); stop_check_child when
    export does not use it."""
    return subprocess.Popen([sys.executable, "-c", CHILD_START, "-"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop_check_child(child: subprocess.Popen | None) -> None:
    if child is not None and child.poll() is None:
        child.kill()
        child.communicate()


def check_in_child(path: Path, data_path: Path | None,
                   references: dict[str, tuple[Path, str]], tolerance: float,
                   int_range: tuple[int, int],
                   child: subprocess.Popen | None = None) -> RunCheck:
    """`references`: method -> (tensor file of its inputs and eager outputs, source)."""
    args = {"path": str(path), "data": str(data_path) if data_path else None,
            "references": {m: [str(f), source] for m, (f, source) in references.items()},
            "tolerance": tolerance, "int_range": list(int_range)}
    child = child if child is not None else start_check_child()
    try:
        stdout, stderr = child.communicate(json.dumps(args) + "\n")
    except BrokenPipeError:  # it died before reading its arguments
        stdout, stderr = child.communicate()
    lines = stdout.strip().splitlines()
    if child.returncode == 0 and lines:
        return from_json(lines[-1])
    how = (f"was killed by signal {-child.returncode}" if child.returncode < 0
           else f"exited with status {child.returncode}")
    return RunCheck((MethodRunCheck(
        "*", False, "the check's child process",
        f"the child process running the program {how}: "
        f"{stderr.strip()[-STDERR_SHOWN:] or 'no output'}"),))


def _eager_file(folder: str, eager, method: str = "forward") -> tuple[Path, str] | None:
    """The eager run of `eager` ((model, inputs, source), when export wrote no
    reference) stored in `folder`, or None when there is none or it fails."""
    from ...program.references import reference_outputs

    if eager is None:
        return None
    model, inputs, source = eager
    try:
        outputs = reference_outputs(model, inputs)
    except Exception:  # noqa: BLE001 - the model's own error: export warned about it already
        return None
    path = Path(folder) / (f"eager-{method}" + tf.SUFFIX)
    tf.write_tensors(path, [tf.from_torch(f"input.{i}", t) for i, t in enumerate(inputs)]
                     + [tf.from_torch(f"output.{i}", o) for i, o in enumerate(outputs)])
    return path, source


def export_run_check(path: Path, data_paths: Sequence[Path], methods: Sequence[MethodInfo],
                     eager, expected_file: Path | None, device_resident: bool,
                     tolerance: float, child: subprocess.Popen | None = None,
                     method_eager: dict | None = None) -> RunCheck:
    """export()'s check of the program it wrote (export.py raises RunCheckError
    when the result is not ok). `forward` runs on the written reference's
    inputs, else on `eager`'s; a method named in `method_eager` (method ->
    (model, inputs, source)) on its inputs, compared with its eager outputs;
    the other methods on generated inputs. A
    program above IN_PROCESS_LIMIT bytes runs in a child process
    (check_in_child; `child`: one start_check_child started earlier), so that
    export's own peak memory stays bounded. An unused `child` is stopped."""
    try:
        return _export_run_check(path, data_paths, methods, eager, expected_file,
                                 device_resident, tolerance, child, method_eager or {})
    finally:
        stop_check_child(child)


def _export_run_check(path, data_paths, methods, eager, expected_file, device_resident,
                      tol, child, method_eager) -> RunCheck:
    if device_resident:
        return RunCheck(skipped="a device-resident program: executorch's Python runtime gives "
                                "methods host tensors; run it with the C++ runner "
                                "(examples/cpp_runner)")
    data = data_paths[0] if data_paths else None
    int_range = safe_int_range(methods)
    size = sum(p.stat().st_size for p in (path, *data_paths))
    with tempfile.TemporaryDirectory(prefix="etrt_run_check_") as folder:
        reference = ((tensors_path(path), "example inputs") if expected_file is not None
                     else _eager_file(folder, eager))
        references = {"forward": reference} if reference is not None else {}
        for method, run in method_eager.items():
            stored = _eager_file(folder, run, method)
            if stored is not None:
                references[method] = stored
        if checks_in_child(size):
            return check_in_child(path, data, references, tol, int_range, child)
        cases = {m: stored_case(*r) for m, r in references.items()}
        return check_program(path, data, cases, tol, int_range)


def main(argv: list[str]) -> None:
    if argv[0] == "-":  # started early: import what the check runs with, then wait
        import torch  # noqa: F401
        from executorch.extension.pybindings import _C  # noqa: F401

        from ...runtime import callbacks  # noqa: F401
        line = sys.stdin.readline()
        if not line.strip():
            return  # export did not need this child
        argv = [line]
    args = json.loads(argv[0])
    cases = {m: stored_case(Path(f), source) for m, (f, source) in args["references"].items()}
    check = check_program(args["path"], args["data"], cases, args["tolerance"],
                          tuple(args["int_range"]))
    print(to_json(check), flush=True)
    sys.stderr.flush()
    # Skip the interpreter's teardown (torch's and onnxruntime's modules: about
    # 0.5 s here, longer than the check); export waits for this process's exit.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
