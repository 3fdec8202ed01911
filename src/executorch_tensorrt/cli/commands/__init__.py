"""The subcommands, one module each: `register(sub)` adds the command's parser
(its arguments, help, and `func=run`), `run(args)` does it and returns the exit
code. A command imports what it needs when it runs, so building the parser
loads nothing heavy. COMMANDS is the order `--help` lists them in."""
from __future__ import annotations

from . import (bench, demo, doctor, export, generate, inspect, llm_export, prepare, profile, run,
               selftest, verify)

COMMANDS = (demo, export, llm_export, generate, verify, inspect, prepare, run, profile, bench,
            doctor, selftest)
