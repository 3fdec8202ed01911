"""`executorch-tensorrt selftest`: a battery of small programs through
TensorRT, the fallback and eager on this machine (cli/selftest.py)."""
from __future__ import annotations

from pathlib import Path

from ..exits import EXIT_MISMATCH, EXIT_NO_TENSORRT, EXIT_OK, EXIT_USAGE, Fail


def register(sub) -> None:
    from .common import add_command

    p = add_command(
        sub, "selftest",
        help="check the TensorRT path on this machine: export, run, compare, time",
        description="Exports built-in programs (examples, a transformer block, a KV-cache "
                    "decoder, int8 and int4 models) into OUT, runs each through TensorRT and "
                    "through the onnxruntime fallback (in a child that sees no GPU), compares "
                    "every output element with eager PyTorch and with each other, and times "
                    "each call against TensorRT's own enqueue loop over the same engine. "
                    "Writes OUT/selftest.json for bug reports; nothing outside OUT (the engine "
                    "cache is OUT/engine-cache unless --use-cache). Exit 0: all passed and "
                    "TensorRT ran; 1: an output differs or a step failed; 5: TensorRT could not "
                    "run here (each program says why), the rest passed.")
    p.add_argument("--out", default="etrt-selftest", metavar="DIR")
    p.add_argument("--cases", metavar="NAMES",
                   help="comma-separated subset (default: all; see the report for names)")
    p.add_argument("--calls", type=int, default=100, metavar="N",
                   help="timed calls per program where TensorRT runs")
    p.add_argument("--export-only", action="store_true",
                   help="export the battery into OUT and run nothing (for a target without "
                        "the export toolchain: copy OUT there and pass it as --programs)")
    p.add_argument("--programs", metavar="DIR",
                   help="run the battery exported into DIR by --export-only instead of "
                        "exporting here")
    p.add_argument("--use-cache", action="store_true",
                   help="read and fill the engine cache loads use, instead of one inside OUT")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..selftest import CASE_NAMES, selftest

    if args.calls < 1:
        raise Fail(EXIT_USAGE, f"--calls must be at least 1, got {args.calls}")
    names = tuple(n.strip() for n in args.cases.split(",")) if args.cases else CASE_NAMES
    try:
        report = selftest(Path(args.out), names, args.calls, args.use_cache,
                          Path(args.programs) if args.programs else None, args.export_only)
    except ValueError as e:
        raise Fail(EXIT_USAGE, str(e)) from None
    print(f"report: {Path(args.out) / 'selftest.json'}")
    if not report["all_ok"]:
        return EXIT_MISMATCH
    if args.export_only:
        return EXIT_OK
    return EXIT_OK if report["tensorrt_ran"] else EXIT_NO_TENSORRT
