"""`executorch-tensorrt demo`: a built-in model exported, inspected, run and
compared with eager (cli/demo.py)."""
from __future__ import annotations

from pathlib import Path

from ...examples.names import EXAMPLE_NAMES
from ..exits import EXIT_MISMATCH, EXIT_OK
from .common import add_command


def register(sub) -> None:
    p = add_command(sub, "demo",
                    help="export a built-in model, inspect, run, compare with eager")
    p.add_argument("--example", choices=EXAMPLE_NAMES, default="cnn")
    p.add_argument("--out-dir", default="out")
    p.add_argument("--atol", type=float, default=1e-4)
    p.add_argument("--rtol", type=float, default=1e-4)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..demo import run_demo

    return EXIT_OK if run_demo(args.example, Path(args.out_dir), args.atol, args.rtol) \
        else EXIT_MISMATCH
