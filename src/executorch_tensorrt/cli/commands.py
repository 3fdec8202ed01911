"""What each executorch-tensorrt subcommand does (`cmd_*`), and how an error a
command lets through becomes an exit code and a message (`classify`).

A thin layer over the tools (runner.py runs and times, program/compare.py
and program/references.py check, model_source.py finds what to export,
program/info.py describes). Each command imports what it needs when it runs, so that
parsing (cli/parser.py, which names these functions) loads nothing heavy.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_RUN, EXIT_EXPORT = 0, 1, 2, 3, 4


class Fail(Exception):
    """A command's own refusal: the message to print and the exit code (main.py)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def cmd_inspect(args) -> int:
    from .runner import check_program_file

    path = check_program_file(args.model)  # before loading torch: a wrong file answers fast
    data = _data_path(path, args.data)
    from ..program import named_data as ndi
    from ..program.info import describe_program, device_resident_problems, format_program, read_pte

    pte = read_pte(path)
    methods = describe_program(pte.program)
    print(format_program(methods))
    from ..program.cache_report import cache_report, format_cache_report

    caches = cache_report(methods)
    if caches.caches:
        print(format_cache_report(caches))
    try:
        in_ptd = ndi.read_ptd_index(data) if data is not None else {}
    except ndi.DataFileError as e:
        raise Fail(EXIT_USAGE, str(e)) from None
    ptd_name = data.name if data is not None else None
    print(ndi.format_named_data(ndi.collect(methods, ndi.pte_named_data(pte), in_ptd, ptd_name),
                                ptd_name))
    if any(d.backend == "TensorRTBackend" and d.meta is not None
           for m in methods for d in m.delegates):
        from ..deploy.prepare import first_load, format_first_load

        try:
            print(format_first_load(first_load(path, cache=args.cache, capability=args.target)))
        except ValueError as e:  # a --target not of the form SM89
            raise Fail(EXIT_USAGE, str(e)) from None
    if args.report:
        from ..aot.partition.report import format_report, read_report

        try:
            report = read_report(path)
        except (OSError, ValueError) as e:
            raise Fail(EXIT_USAGE, f"no partition report: {e}") from None
        print("\n" + format_report(report))
    if not args.device_resident:
        return EXIT_OK
    problems = device_resident_problems(methods)
    for problem in problems:
        print(f"device-resident: FAIL: {problem}")
    if problems:
        return EXIT_MISMATCH
    print("device-resident: OK (no et_copy ops; every method input and output is a CUDA tensor)")
    return EXIT_OK


def _export_options(args) -> dict:
    options: dict = {"exclude_ops": tuple(args.exclude_op),
                     "require_backends": tuple(args.require_backend)}
    if args.precision:
        options["precision"] = args.precision
    if args.compute_capability:
        options["compute_capabilities"] = tuple(args.compute_capability)
    if args.external_weights and args.inline_weights:
        raise Fail(EXIT_USAGE, "--external-weights and --inline-weights contradict each other: "
                                "inline weights live in the blobs, not in a .ptd")
    if args.external_weights:
        options["external_weights"] = True
    if args.inline_weights:
        options["inline_weights"] = True
    if args.no_memory_check:
        options["check_memory"] = False
    if args.allow_unquantized:
        options["allow_unquantized"] = True
    if args.no_run_check:
        options["run_check"] = False
    if args.run_check_tolerance is not None:
        if not args.run_check_tolerance > 0:
            raise Fail(EXIT_USAGE, "--run-check-tolerance must be > 0")
        options["run_check_tolerance"] = args.run_check_tolerance
    if args.profiles is not None and args.profile:
        raise Fail(EXIT_USAGE, "--profiles N splits the range itself; --profile gives each "
                                "profile: use one of them")
    if args.profiles is not None or args.profile:
        from ..aot.profiles.option import normalize_profiles, parse_profile_text

        try:
            options["profiles"] = normalize_profiles(
                args.profiles if args.profiles is not None
                else [parse_profile_text(t) for t in args.profile])
        except ValueError as e:
            raise Fail(EXIT_USAGE, str(e).replace("profiles=", "--profiles ")) from None
    return options


def _calibration_batches(path: str) -> list[tuple]:
    """--calibration FILE: input.i [N, ...] -> N batches (input.0[b], input.1[b], ...)."""
    from ..program import tensor_file as tf

    try:
        inputs = [tf.to_torch(t) for t in tf.select(tf.read_tensors(path), "input")]
    except (OSError, tf.TensorFileError) as e:
        raise Fail(EXIT_USAGE, f"--calibration {path}: {e}") from None
    counts = {int(t.shape[0]) if t.dim() else 0 for t in inputs}
    if not inputs or len(counts) != 1 or 0 in counts:
        raise Fail(EXIT_USAGE, f"--calibration {path}: expected input.0, input.1, ... each with "
                                "the same number N >= 1 of batches on its first dimension, got "
                                f"shapes {[list(t.shape) for t in inputs]}")
    return [tuple(t[b] for t in inputs) for b in range(counts.pop())]


def _quantized(src, args):
    """The source with its model quantized (--quantize); a saved ExportedProgram
    has no modules left to quantize."""
    if src.program is not None:
        raise Fail(EXIT_USAGE, "--quantize needs a model (module:callable, file.py:callable or "
                                "--example), not a saved ExportedProgram: quantize before "
                                "torch.export")
    from ..quantization import QuantizationError, quantize

    calibration = _calibration_batches(args.calibration) if args.calibration else None
    try:
        model = quantize(src.model, src.inputs, scheme=args.quantize, group_size=args.group_size,
                         calibration=calibration, allow_unquantized=args.allow_unquantized)
    except QuantizationError as e:
        raise Fail(EXIT_EXPORT, f"--quantize {args.quantize}: {e}") from None
    return dataclasses.replace(src, model=model,
                               description=f"{src.description} ({args.quantize})")


def cmd_export(args) -> int:
    from .model_source import load_source, parse_dynamic
    from .runner import UsageError

    out = Path(args.output)
    if out.suffix != ".pte":
        raise Fail(EXIT_USAGE, f"the output {out} should end in .pte")
    if (args.source is None) == (args.example is None):
        raise Fail(EXIT_USAGE, "give either a SOURCE (model.pt2, module:callable, "
                                "file.py:callable) or --example NAME")
    dims = [parse_dynamic(d) for d in args.dynamic]
    if args.calibration and not args.quantize:
        raise Fail(EXIT_USAGE, "--calibration calibrates --quantize int8_w8a8 / fp8_w8a8; "
                                "give --quantize too")
    options = _export_options(args)
    if args.etrecord:  # for `profile`: Inspector maps events to ATen ops with it
        options["etrecord_path"] = out.with_suffix(".etrecord")
    reference_inputs = None
    if args.reference_inputs:
        from ..program import tensor_file as tf

        reference_inputs = [tf.to_torch(t) for t in
                            tf.select(tf.read_tensors(args.reference_inputs), "input")]
    try:
        src = load_source(args.source, args.example, dims)
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's factory failed
        raise Fail(EXIT_EXPORT, f"making the model from {args.source} failed: "
                                 f"{type(e).__name__}: {e}") from None
    if args.quantize:
        src = _quantized(src, args)
    from ..aot.export import export_program

    print(f"exporting {src.description} -> {out}", file=sys.stderr)
    try:
        if src.program is not None:
            result = export_program({"forward": src.program}, None, out,
                                    reference_inputs=reference_inputs,
                                    write_expected_file=not args.no_reference, **options)
        else:
            result = export_program(src.model, src.inputs, out, dynamic_shapes=src.dynamic_shapes,
                                    reference_inputs=reference_inputs,
                                    write_expected_file=not args.no_reference, **options)
    except Exception as e:  # noqa: BLE001 - torch.export and lowering raise many kinds
        if os.environ.get("EXECUTORCH_TENSORRT_DEBUG"):
            raise
        raise Fail(EXIT_EXPORT, f"export failed: {type(e).__name__}: {e}") from None
    backends = ", ".join(f"{m}: {' '.join(ids) or 'no delegate'}"
                         for m, ids in result.backends.items())
    print(f"wrote {result.path} ({backends})"
          + "".join(f" + {p}" for p in result.data_paths))
    if result.expected_path:
        print(f"reference: {result.expected_path} (+ {result.expected_path.name}.etensors)")
    if result.run_check is not None:
        print(result.run_check.describe())
    return EXIT_OK


def cmd_run(args) -> int:
    from ..program import tensor_file as tf
    from .runner import (
        check_program_file,
        choose_inputs,
        execute,
        format_outputs,
        load_method,
        method_input_specs,
        reference_path,
    )

    path = check_program_file(args.model)
    data = _data_path(path, args.data)
    _refuse_device_resident(path, args.method)
    method = load_method(path, args.method, data)
    inputs, where = choose_inputs(method_input_specs(method),
                                  Path(args.inputs) if args.inputs else None, args.fill,
                                  reference_path(path))
    print(f"note: {where}", file=sys.stderr)
    outputs = execute(method, inputs)
    print(format_outputs(outputs))
    if args.outputs:
        tf.write_tensors(args.outputs, outputs)
        print(f"note: wrote the full outputs to {args.outputs}", file=sys.stderr)
    return EXIT_OK


def cmd_profile(args) -> int:
    from .profile import profile
    from .runner import check_program_file

    path = check_program_file(args.model)
    data = _data_path(path, args.data)
    _refuse_device_resident(path, args.method)
    print(profile(path, calls=args.calls, nodes=args.nodes, etrecord=args.etrecord,
                  etdump=args.etdump, method=args.method,
                  inputs_file=Path(args.inputs) if args.inputs else None, data_path=data))
    return EXIT_OK


def cmd_prepare(args) -> int:
    from .runner import check_program_file

    path = check_program_file(args.model)
    data = _data_path(path, args.data)
    from ..deploy.prepare import prepare
    from ..errors import EngineUnavailable

    try:
        done = prepare(path, data, cache=args.cache, capability=args.target)
    except ValueError as e:  # not a program, a damaged .ptd, or a --target not like SM89
        raise Fail(EXIT_USAGE, str(e)) from None
    except EngineUnavailable as e:
        raise Fail(EXIT_RUN, str(e)) from None
    built = [p for p in done if p.source == "built"]
    print(f"prepared {path.name}: {len(done)} TensorRT partitions, {len(built)} built, "
          f"{sum(p.source == 'cache' for p in done)} already prepared, "
          f"{sum(p.source == 'blob' for p in done)} ship their engine"
          + (f"; build time {sum(p.build_seconds or 0 for p in built):.2f} s" if built else ""))
    if args.cache:
        print(f"load with EXECUTORCH_TENSORRT_CACHE_DIR={args.cache} so the load finds them")
    return EXIT_OK


def _data_path(path: Path, data: str | None) -> Path | None:
    """--data, else model.ptd beside model.pte when it exists (said on stderr)."""
    from .runner import resolve_data_path

    resolved, note = resolve_data_path(path, data)
    if note:
        print(f"note: {note}", file=sys.stderr)
    return resolved


def _refuse_device_resident(path: Path, method: str) -> None:
    from ..program.info import device_tensors, read_program

    try:
        methods = read_program(path)
    except ValueError:
        return  # loading says why
    on_device = [t for m in methods if m.name == method for t in device_tensors(m)]
    if on_device:
        raise Fail(EXIT_RUN, f"method {method!r} of {path} keeps {', '.join(on_device)} "
                    "(a device-resident program). executorch's Python runtime gives methods "
                    "host tensors, which such a program cannot take. Run it with the C++ "
                    "reference runner (examples/cpp_runner), which allocates them in CUDA "
                    "memory.")


def cmd_verify(args) -> int:
    from ..program import tensor_file as tf
    from ..program.compare import compare_tensors
    from ..program.references import compare, expected_path, read_expected, reference_tensors

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
    from ..program.references import expected_path, tensors_path

    return (path.suffix == ".pte" and not expected_path(path).exists()
            and not tensors_path(path).exists())


def _run_check_without_reference(path: Path, data: str | None) -> int:
    """verify MODEL.pte with no reference: every method once on generated
    inputs (aot/checks/run_check.py); exit 0 when all ran, 3 when one did not."""
    from .runner import check_program_file

    path = check_program_file(path)
    data_path = _data_path(path, data)
    _refuse_device_resident_program(path)
    from ..aot.checks.run_check import check_program, safe_int_range, tolerance_for
    from ..program.info import read_program

    print(f"note: no reference beside {path}: running every method once on generated inputs",
          file=sys.stderr)
    check = check_program(path, data_path, {}, tolerance_for(None),
                          safe_int_range(read_program(path)))
    print(check.describe())
    if check.ok:
        print(f"OK: {len(check.methods)} method(s) ran (nothing compared: no reference)")
        return EXIT_OK
    return EXIT_RUN


def _refuse_device_resident_program(path: Path) -> None:
    from ..program.info import read_program

    try:
        names = [m.name for m in read_program(path)]
    except ValueError as e:
        raise Fail(EXIT_RUN, str(e)) from None
    for name in names:
        _refuse_device_resident(path, name)


def cmd_demo(args) -> int:
    from .demo import run_demo

    return EXIT_OK if run_demo(args.example, Path(args.out_dir), args.atol, args.rtol) \
        else EXIT_MISMATCH


def classify(e: Exception) -> tuple[int, str]:
    """Exit code and message for an exception a command let through."""
    from ..program.references import ExpectedError
    from .runner import RunError, UsageError
    from ..program.tensor_file import TensorFileError

    if isinstance(e, (UsageError, ExpectedError, TensorFileError)):
        return EXIT_USAGE, str(e)
    if isinstance(e, RunError):
        return EXIT_RUN, str(e)
    if isinstance(e, OSError) and e.filename:
        return EXIT_USAGE, f"{e.filename}: {e.strerror}"
    from ..errors import ExportError

    if isinstance(e, ExportError):
        return EXIT_EXPORT, str(e)
    return EXIT_RUN, f"{type(e).__name__}: {e}"
