"""`executorch-tensorrt verify`: a runner's outputs against the reference
written at export; without a reference, every method run once."""
from __future__ import annotations

import sys
from pathlib import Path

from ..exits import EXIT_MISMATCH, EXIT_OK, EXIT_RUN, EXIT_USAGE, Fail
from .common import add_command, add_data_argument, data_path, refuse_device_resident_program


def register(sub) -> None:
    p = add_command(
        sub, "verify",
        help="compare a runner's outputs with the reference written at export",
        description="OUTPUT is a tensor file from `run --outputs` (every element is compared: "
                    "|actual - expected| <= atol + rtol * |expected|, NaN equals NaN) or a "
                    "runner's printed output (only the printed values are compared). A "
                    "model.pte with no reference beside it and no OUTPUT: every method is run "
                    "once on generated inputs and verify says whether each ran (exit 3 when "
                    "one did not).")
    p.add_argument("expected", help="model.pte, model.expected or model.expected.etensors")
    p.add_argument("output", nargs="?", default=None,
                   help="tensor file or printed output (default: standard input)")
    p.add_argument("--atol", type=float, help="absolute tolerance (default 1e-4)")
    p.add_argument("--rtol", type=float,
                   help="relative tolerance (default 1e-4; 0 when the absolute one is 0)")
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="same as --atol (kept for older scripts); 0: printed text must match "
                        "exactly, tensors element for element")
    add_data_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ...program import tensor_file as tf
    from ...program.compare import compare_tensors
    from ...program.references import compare, expected_path, read_expected, reference_tensors

    atol = args.tolerance if args.atol is None else args.atol
    # A zero tolerance means exact unless a relative one is asked for.
    rtol = args.rtol if args.rtol is not None else (0.0 if atol == 0 else 1e-4)
    if atol < 0 or rtol < 0:
        raise Fail(EXIT_USAGE, "--atol/--tolerance and --rtol must be >= 0")
    if args.output is None and _without_reference(Path(args.expected)):
        return _run_check_without_reference(Path(args.expected), args.data)
    actual = "-" if args.output is None else args.output
    if actual != "-" and tf.is_tensor_file(actual):
        ref_path, expected = reference_tensors(args.expected)
        got = tf.select(tf.read_tensors(actual), "output")
        results = compare_tensors(expected, got, atol, rtol)
        for r in results:
            print(("OK   " if r.ok else "FAIL ") + r.describe(atol, rtol))
        if all(r.ok for r in results):
            print(f"OK: {len(expected)} output(s) match {ref_path} in every element "
                  f"(atol {atol:g}, rtol {rtol:g})")
            return EXIT_OK
        return EXIT_MISMATCH
    exp_file = Path(args.expected)
    if exp_file.suffix == ".pte":
        exp_file = expected_path(exp_file)
    if actual != "-" and Path(actual).is_dir():
        raise Fail(EXIT_USAGE, f"{actual} is a directory, not a runner's output")
    try:
        expected = read_expected(exp_file)
        text = sys.stdin.read() if actual == "-" else Path(actual).read_text(errors="replace")
    except OSError as e:
        raise Fail(EXIT_USAGE, f"{e.filename}: {e.strerror}") from None
    problems = compare(expected, text, atol, rtol)
    for p in problems:
        print(f"FAIL {p}")
    if problems:
        return EXIT_MISMATCH
    print(f"OK: {len(expected)} output(s) match {exp_file} in the printed values only "
          f"(atol {atol:g}, rtol {rtol:g}); compare whole outputs with run --outputs FILE")
    return EXIT_OK


def _without_reference(path: Path) -> bool:
    """A .pte with neither reference file beside it (verify then runs it)."""
    from ...program.references import expected_path, tensors_path

    return (path.suffix == ".pte" and not expected_path(path).exists()
            and not tensors_path(path).exists())


def _run_check_without_reference(path: Path, data: str | None) -> int:
    """verify MODEL.pte with no reference: every method once on generated
    inputs (aot/checks/run_check.py); exit 0 when all ran, 3 when one did not."""
    from ..runner import check_program_file

    path = check_program_file(path)
    ptd = data_path(path, data)
    refuse_device_resident_program(path)
    from ...aot.checks.run_check import check_program, safe_int_range, tolerance_for
    from ...program.info import read_program

    print(f"note: no reference beside {path}: running every method once on generated inputs",
          file=sys.stderr)
    check = check_program(path, ptd, {}, tolerance_for(None),
                          safe_int_range(read_program(path)))
    print(check.describe())
    if check.ok:
        print(f"OK: {len(check.methods)} method(s) ran (nothing compared: no reference)")
        return EXIT_OK
    return EXIT_RUN
