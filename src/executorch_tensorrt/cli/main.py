"""The executorch-tensorrt command line's entry point (`executorch_tensorrt.cli:main`,
`python -m executorch_tensorrt.cli`): parse (cli/parser.py), run the command
(cli/commands/), and turn what it raises into a message and an exit code.
Set EXECUTORCH_TENSORRT_DEBUG=1 for Python tracebacks.
"""
from __future__ import annotations

import os
import sys

from .exits import Fail, classify
from .parser import build_parser

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except Fail as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    except Exception as e:  # noqa: BLE001 - a CLI reports, it does not trace back
        if os.environ.get("EXECUTORCH_TENSORRT_DEBUG"):
            raise
        code, message = classify(e)
        print(f"error: {message}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
