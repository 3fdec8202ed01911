"""`executorch-tensorrt doctor`: what this machine can do (deploy/doctor.py);
exit 0 when TensorRT can run an engine here, 5 when it cannot."""
from __future__ import annotations

from ..exits import EXIT_NO_TENSORRT, EXIT_OK
from .common import add_command, add_data_argument, data_path


def register(sub) -> None:
    p = add_command(
        sub, "doctor", help="say what this machine can do: GPUs, TensorRT, ExecuTorch, cache",
        description="Prints the CUDA driver, each GPU with its compute capability, the "
                    "TensorRT found and what it builds and runs, ExecuTorch, the adapter's "
                    "ABI and the engine cache; given PROGRAM, what its first load does per "
                    "TensorRT partition and whether its weights are in the program or the .ptd "
                    "(--data, default: PROGRAM's .ptd beside it). Exit 0: TensorRT can run engines here; 5: it cannot "
                    "(the reason is printed). See docs/troubleshooting.md.")
    p.add_argument("program", nargs="?", help="a .pte to check")
    add_data_argument(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from ...deploy.doctor import diagnose, format_report

    path = None
    if args.program:
        from ..runner import check_program_file

        path = check_program_file(args.program)
    report = diagnose(path, data_path(path, args.data) if path is not None else None)
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(format_report(report))
        if path is not None:
            from ...deploy.prepare import PartitionLoad, format_first_load

            print(format_first_load([PartitionLoad(**p) for p in report.first_load]))
    return EXIT_OK if report.runs_here else EXIT_NO_TENSORRT
