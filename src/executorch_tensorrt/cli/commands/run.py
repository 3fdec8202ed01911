"""`executorch-tensorrt run`: a .pte run once, its outputs printed (cli/runner.py)."""
from __future__ import annotations

import sys
from pathlib import Path

from ..exits import EXIT_OK
from .common import add_command, add_data_argument, data_path, refuse_device_resident


def register(sub) -> None:
    p = add_command(
        sub, "run",
        help="run a .pte and print its outputs",
        description="Inputs: --inputs FILE, else the example inputs stored beside the program "
                    "(model.expected.etensors), else a deterministic non-constant pattern.")
    p.add_argument("model")
    p.add_argument("--method", default="forward")
    p.add_argument("--inputs", metavar="FILE", help="tensor file with input.0, input.1, ...")
    p.add_argument("--fill", choices=("pattern", "ones"),
                   help="ignore stored inputs: fill with the pattern, or with 1")
    p.add_argument("--outputs", metavar="FILE", help="write the full outputs to a tensor file")
    add_data_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ...program import tensor_file as tf
    from ..runner import (
        check_program_file,
        choose_inputs,
        execute,
        format_outputs,
        load_method,
        method_input_specs,
        reference_path,
    )

    path = check_program_file(args.model)
    data = data_path(path, args.data)
    refuse_device_resident(path, args.method)
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
