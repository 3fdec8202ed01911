"""The executorch-tensorrt argument parser: the top-level options, and each
subcommand registered by its own module (cli/commands/).

Building it imports nothing heavy: --help, --version and usage errors answer
without loading torch (tests/cli checks it).
"""
from __future__ import annotations

import argparse

from .commands import COMMANDS
from .exits import EXIT_CODES


def _version() -> str:
    from .. import __version__  # the package is imported already; metadata lookups are slow

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="executorch-tensorrt", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="TensorRT delegate for ExecuTorch: export, inspect, run and verify programs.",
        epilog=EXIT_CODES)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser
