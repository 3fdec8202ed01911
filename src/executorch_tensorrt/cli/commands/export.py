"""`executorch-tensorrt export`: a model (.pt2, module:callable, file.py:callable
or a built-in example) to a .pte, with its reference and run check."""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from ...examples.names import EXAMPLE_NAMES
from ..exits import EXIT_EXPORT, EXIT_OK, EXIT_USAGE, Fail
from .common import add_command, add_quantize_options


def register(sub) -> None:
    p = add_command(
        sub, "export",
        help="export a model (.pt2, module:callable, or --example) to a .pte",
        description="SOURCE is a saved torch.export program (model.pt2), or MODULE:CALLABLE / "
                    "FILE.py:CALLABLE returning an ExportedProgram or (model, example_inputs"
                    "[, dynamic_shapes]). Also writes OUTPUT's reference (.expected and "
                    ".expected.etensors: example inputs and eager outputs).")
    p.add_argument("source", nargs="?", help="model.pt2, module:callable or file.py:callable")
    p.add_argument("output", help="the .pte to write")
    p.add_argument("--example", choices=EXAMPLE_NAMES, help="a built-in model instead of SOURCE")
    p.add_argument("--precision", choices=("fp32", "fp16", "bf16"))
    p.add_argument("--dynamic", action="append", default=[], metavar="INPUT:DIM:MIN:MAX",
                   help="make dimension DIM of input INPUT range over MIN..MAX (repeatable), "
                        "e.g. 0:0:1:8 for a batch of 1 to 8")
    p.add_argument("--profiles", type=int, metavar="N",
                   help="N TensorRT optimization profiles: the widest dynamic dimension split "
                        "in power-of-two buckets (default: one over each dimension's range)")
    p.add_argument("--profile", action="append", default=[], metavar="DIM=MIN:OPT:MAX[,...]",
                   help="one optimization profile (repeatable, first containing a call's "
                        "shapes runs it); DIM is a Dim's name or INPUT:DIM, e.g. "
                        "0:0=1:16:16 --profile 0:0=17:256:256")
    p.add_argument("--exclude-op", action="append", default=[], metavar="OP",
                   help="keep an ATen op off TensorRT, e.g. aten.convolution.default")
    p.add_argument("--require-backend", action="append", default=[], metavar="BACKEND",
                   help="fail unless the program has a delegate of BACKEND")
    p.add_argument("--compute-capability", action="append", default=[], metavar="SM",
                   help="TensorRT-RTX target, e.g. SM89 (repeatable; default: all it supports)")
    p.add_argument("--external-weights", action="store_true",
                   help="store the weights in OUTPUT's .ptd beside it (load both)")
    p.add_argument("--inline-weights", action="store_true",
                   help="self-contained blobs: the engine and the ONNX model each carry the "
                        "weights (twice the size, < 2 GB; no build or refit at load). Without "
                        "a GPU this still builds a full engine, for --compute-capability "
                        "(default: every one TensorRT-RTX supports)")
    p.add_argument("--no-memory-check", action="store_true",
                   help="export even when the memory estimate says it will not fit")
    p.add_argument("--reference-inputs", metavar="FILE",
                   help="a tensor file whose input.* make the reference instead of the "
                        "example inputs")
    p.add_argument("--no-reference", action="store_true", help="write no .expected reference")
    p.add_argument("--no-run-check", action="store_true",
                   help="do not run the written program once and compare it with eager "
                        "(by default export fails, exit 4, when it cannot run or differs: "
                        "nothing is published, the new files go to OUTPUT's .rejected folder)")
    p.add_argument("--run-check-tolerance", type=float, metavar="TOL",
                   help="the run check's allowed |program - eager| per output, times max(1, "
                        "its largest |eager|) (default 1e-3 fp32, 4e-3 fp16, 2e-2 bf16)")
    p.add_argument("--etrecord", action="store_true",
                   help="also write OUTPUT's ETRecord (.etrecord), for `profile`")
    add_quantize_options(p, "; needs a module source")
    p.add_argument("--calibration", metavar="FILE",
                   help="int8_w8a8 / fp8_w8a8: a tensor file (.etensors) whose input.0, "
                        "input.1, ... each hold N calibration batches stacked on a new first "
                        "dimension (input.i[b] is batch b's i-th input); without it the example "
                        "inputs calibrate (one batch: weak, with a warning)")
    p.add_argument("--allow-unquantized", action="store_true",
                   help="export layers float where the scheme cannot run on the TensorRT "
                        "flavour or target GPUs, instead of failing (the report says why)")
    p.set_defaults(func=run)


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
        from ...aot.profiles.option import normalize_profiles, parse_profile_text

        try:
            options["profiles"] = normalize_profiles(
                args.profiles if args.profiles is not None
                else [parse_profile_text(t) for t in args.profile])
        except ValueError as e:
            raise Fail(EXIT_USAGE, str(e).replace("profiles=", "--profiles ")) from None
    return options


def _calibration_batches(path: str) -> list[tuple]:
    """--calibration FILE: input.i [N, ...] -> N batches (input.0[b], input.1[b], ...)."""
    from ...program import tensor_file as tf

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
    from ...quantization import QuantizationError, quantize

    calibration = _calibration_batches(args.calibration) if args.calibration else None
    try:
        model = quantize(src.model, src.inputs, scheme=args.quantize, group_size=args.group_size,
                         calibration=calibration, allow_unquantized=args.allow_unquantized)
    except QuantizationError as e:
        raise Fail(EXIT_EXPORT, f"--quantize {args.quantize}: {e}") from None
    return dataclasses.replace(src, model=model,
                               description=f"{src.description} ({args.quantize})")


def run(args) -> int:
    from ..model_source import load_source, parse_dynamic
    from ..runner import UsageError

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
        from ...program import tensor_file as tf

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
    from ...aot.export import export_program

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
