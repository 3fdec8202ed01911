"""The executorch-tensorrt argument parser: every subcommand, its options and
help text, each bound to its implementation in cli/commands.py.

Kept apart from the commands so that it stays readable, and so that building
it imports nothing heavy: --help, --version and usage errors answer without
loading torch (tests/cli checks it).
"""
from __future__ import annotations

import argparse

from ..examples.names import EXAMPLE_NAMES
from .commands import (cmd_demo, cmd_export, cmd_inspect, cmd_prepare, cmd_profile, cmd_run,
                       cmd_verify)
from .llm_export import cmd_llm_export

EXIT_CODES = """exit codes:
  0  success
  1  checked and wrong: outputs differ from the reference (verify, demo),
     or inspect --device-resident found a problem
  2  usage: bad arguments, a missing file or one of the wrong kind, an
     unknown method, a malformed reference or tensor file, an output file
     that cannot be written
  3  the program could not be loaded or run (the backend's cause is printed)
  4  export failed
Set EXECUTORCH_TENSORRT_DEBUG=1 for Python tracebacks."""


def _version() -> str:
    from .. import __version__  # the package is imported already; metadata lookups are slow

    return __version__


def _add_data_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", metavar="PTD",
                   help="the program's weights file (.ptd; default: MODEL with the suffix "
                        ".ptd, when it exists)")


def _add_target_arguments(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--target", metavar="SM",
                   help=f"the GPU's compute capability {what}, e.g. SM89 (default: this "
                        "machine's GPU; required on a machine without one)")
    p.add_argument("--cache", metavar="DIR",
                   help="the engine cache (default: $EXECUTORCH_TENSORRT_CACHE_DIR, else "
                        "~/.cache/executorch_tensorrt)")


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="executorch-tensorrt", formatter_class=fmt,
        description="TensorRT delegate for ExecuTorch: export, inspect, run and verify programs.",
        epilog=EXIT_CODES)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("demo", formatter_class=fmt, epilog=EXIT_CODES,
                       help="export a built-in model, inspect, run, compare with eager")
    p.add_argument("--example", choices=EXAMPLE_NAMES, default="cnn")
    p.add_argument("--out-dir", default="out")
    p.add_argument("--atol", type=float, default=1e-4)
    p.add_argument("--rtol", type=float, default=1e-4)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "export", formatter_class=fmt, epilog=EXIT_CODES,
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
    _quantize_options(p, "; needs a module source")
    p.add_argument("--calibration", metavar="FILE",
                   help="int8_w8a8 / fp8_w8a8: a tensor file (.etensors) whose input.0, "
                        "input.1, ... each hold N calibration batches stacked on a new first "
                        "dimension (input.i[b] is batch b's i-th input); without it the example "
                        "inputs calibrate (one batch: weak, with a warning)")
    p.add_argument("--allow-unquantized", action="store_true",
                   help="export layers float where the scheme cannot run on the TensorRT "
                        "flavour or target GPUs, instead of failing (the report says why)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "llm-export", formatter_class=fmt, epilog=EXIT_CODES,
        help="export a transformers causal LM for ExecuTorch's LLM runner (docs/llm.md)",
        description="Writes OUTPUT (.pte, + .ptd with --external-weights) with the method "
                    "forward(tokens[1, S], positions[S]) -> logits, its KV cache owned by "
                    "TensorRT, and the constant methods ExecuTorch's TextLLMRunner reads.")
    p.add_argument("output", help="the .pte to write")
    p.add_argument("--config", metavar="JSON",
                   help="a transformers config.json (or its JSON text): random weights")
    p.add_argument("--model", metavar="DIR", help="a local transformers model folder")
    p.add_argument("--max-seq-len", type=int, required=True,
                   help="most tokens per call (longer prompts go in chunks)")
    p.add_argument("--max-context-len", type=int, required=True,
                   help="the KV cache's positions: prompt plus generated tokens")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32")
    p.add_argument("--batch-size", type=int, default=1,
                   help="rows of the static KV cache (ExecuTorch's runner takes 1)")
    _quantize_options(p)
    p.add_argument("--external-weights", action="store_true",
                   help="store the weights in OUTPUT's .ptd beside it")
    p.add_argument("--seed", type=int, default=0, help="random weights' seed (--config)")
    p.set_defaults(func=cmd_llm_export)

    p = sub.add_parser(
        "verify", formatter_class=fmt, epilog=EXIT_CODES,
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
    _add_data_argument(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("inspect", formatter_class=fmt, epilog=EXIT_CODES,
                       help="describe a .pte: I/O, delegates, operators, blobs")
    p.add_argument("model")
    p.add_argument("--device-resident", action="store_true",
                   help="exit 1 unless every method input and output is recorded as a CUDA "
                        "tensor and no et_copy (host<->device copy) op is left")
    p.add_argument("--report", action="store_true",
                   help="also print the partition report export wrote (model.report.json): "
                        "per ATen op, nodes on TensorRT and elsewhere, and why")
    _add_target_arguments(p, "to say whether the first load on it builds")
    _add_data_argument(p)
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser(
        "prepare", formatter_class=fmt, epilog=EXIT_CODES,
        help="build a program's missing engines for this GPU before its first load",
        description="Builds every engine the first load of MODEL would build (a program "
                    "exported without a GPU ships none; an engine for other GPUs or another "
                    "TensorRT is rebuilt) and stores it in the engine cache that load reads, "
                    "so the load builds nothing. With --cache DIR, load with "
                    "EXECUTORCH_TENSORRT_CACHE_DIR=DIR. inspect --target says what is "
                    "prepared. See docs/gpu-runtime.md (engines before the first call).")
    p.add_argument("model")
    _add_target_arguments(p, "to build for")
    _add_data_argument(p)
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser(
        "run", formatter_class=fmt, epilog=EXIT_CODES,
        help="run a .pte and print its outputs",
        description="Inputs: --inputs FILE, else the example inputs stored beside the program "
                    "(model.expected.etensors), else a deterministic non-constant pattern.")
    p.add_argument("model")
    p.add_argument("--method", default="forward")
    p.add_argument("--inputs", metavar="FILE", help="tensor file with input.0, input.1, ...")
    p.add_argument("--fill", choices=("pattern", "ones"),
                   help="ignore stored inputs: fill with the pattern, or with 1")
    p.add_argument("--outputs", metavar="FILE", help="write the full outputs to a tensor file")
    _add_data_argument(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "profile", formatter_class=fmt, epilog=EXIT_CODES,
        help="run a .pte with ETDump and print where its TensorRT partitions spend time",
        description="Runs CALLS calls with ExecuTorch's ETDump on and prints, per TensorRT "
                    "partition, the time of each stage of the call and (--nodes) of each ONNX "
                    "node (onnxruntime fallback) or TensorRT layer, read back with "
                    "executorch.devtools.Inspector. The ATen ops of each event come from an "
                    "ETRecord (default: MODEL with the suffix .etrecord, if present). See "
                    "docs/profiling.md.")
    p.add_argument("model")
    p.add_argument("--calls", type=int, default=10, help="calls to run (default 10)")
    p.add_argument("--nodes", action="store_true",
                   help="also time each node/layer (slower calls; "
                        "same as EXECUTORCH_TENSORRT_PROFILE_NODES=1)")
    p.add_argument("--method", default="forward")
    p.add_argument("--inputs", metavar="FILE", help="tensor file with input.0, input.1, ...")
    p.add_argument("--etrecord", metavar="FILE", help="the ETRecord written at export")
    p.add_argument("--etdump", metavar="FILE", help="also keep the ETDump there")
    _add_data_argument(p)
    p.set_defaults(func=cmd_profile)
    return parser


def _scheme_list(schemes) -> str:
    """Scheme names with the limits a user meets first (flavour, targets)."""
    def named(s) -> str:
        limits = [*(["standard TensorRT only"] if "tensorrt_rtx" not in s.flavors else []),
                  *([f"SM{s.min_capability}+ targets only"] if s.min_capability else [])]
        return s.name + (f" ({', '.join(limits)})" if limits else "")
    return ", ".join(named(s) for s in schemes)


def _quantize_options(p, note: str = "") -> None:
    """--quantize and --group-size: the same for `export` and `llm-export`; the
    schemes are the quantization registry's (torch-free to import)."""
    from ..quantization.registry import SCHEMES

    runnable = [s for s in SCHEMES.values() if s.implemented]
    p.add_argument("--quantize", metavar="SCHEME",
                   help="quantize the model first: "
                        f"{_scheme_list(s for s in runnable if not s.activations)} (Linear "
                        f"weights), or {_scheme_list(s for s in runnable if s.activations)} "
                        "(Linear and Conv2d weights and activations, calibrated) "
                        f"(docs/quantization.md){note}")
    p.add_argument("--group-size", type=int, default=128, metavar="N",
                   help="int4_weight_only: input features per scale, 32, 64 or 128 "
                        "(default 128; it must divide every Linear's input features)")
