"""`executorch-tensorrt profile`: a .pte run with ETDump, where its TensorRT
partitions spend time (cli/profile.py)."""
from __future__ import annotations

from pathlib import Path

from ..exits import EXIT_OK
from .common import add_command, add_data_argument, data_path, refuse_device_resident


def register(sub) -> None:
    p = add_command(
        sub, "profile",
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
    add_data_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..profile import profile
    from ..runner import check_program_file

    path = check_program_file(args.model)
    data = data_path(path, args.data)
    refuse_device_resident(path, args.method)
    print(profile(path, calls=args.calls, nodes=args.nodes, etrecord=args.etrecord,
                  etdump=args.etdump, method=args.method,
                  inputs_file=Path(args.inputs) if args.inputs else None, data_path=data))
    return EXIT_OK
