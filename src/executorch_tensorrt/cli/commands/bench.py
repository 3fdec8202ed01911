"""`executorch-tensorrt bench`: load, first-call and latency figures for a
.pte, optionally against another program in the same process (cli/bench.py)."""
from __future__ import annotations

import json
from pathlib import Path

from ..exits import EXIT_OK
from .common import add_command, add_data_argument, data_path, refuse_device_resident


def register(sub) -> None:
    p = add_command(
        sub, "bench",
        help="time a .pte: load, first call, latency percentiles, throughput, memory",
        description="Runs METHOD of MODEL through ExecuTorch's runtime: the load (engines "
                    "deserialized, or built when none fits this GPU), the first call, then "
                    "--iterations calls after --warmup, reporting min / median / p90 / p99 / "
                    "max latency and throughput. Inputs: --inputs FILE, else the example inputs "
                    "stored beside the program, else a deterministic pattern. With --compare "
                    "OTHER.pte both programs run in this process, alternating call by call, "
                    "and the ratios are printed. On a machine without a GPU the TensorRT "
                    "partitions run on the CPU fallback (EXECUTORCH_TENSORRT_FALLBACK="
                    "onnxruntime), and the report says so.")
    p.add_argument("model")
    p.add_argument("--method", default="forward")
    p.add_argument("--inputs", metavar="FILE", help="tensor file with input.0, input.1, ...")
    p.add_argument("--warmup", type=int, default=10, metavar="N")
    p.add_argument("--iterations", type=int, default=100, metavar="N")
    p.add_argument("--compare", metavar="OTHER", help="another .pte with the same inputs")
    p.add_argument("--compare-data", metavar="PTD", help="OTHER's weights file (.ptd)")
    p.add_argument("--partitions", action="store_true",
                   help="also time each TensorRT partition (a second run with ETDump)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    add_data_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..bench import bench, format_bench
    from ..runner import check_program_file

    path = check_program_file(args.model)
    refuse_device_resident(path, args.method)
    other = check_program_file(args.compare) if args.compare else None
    if other is not None:
        refuse_device_resident(other, args.method)
    results = bench(path, method=args.method, data=data_path(path, args.data),
                    inputs_file=args.inputs, warmup=args.warmup, iterations=args.iterations,
                    compare=other,
                    compare_data=data_path(other, args.compare_data) if other else None,
                    partitions=args.partitions)
    print(json.dumps([r.as_dict() for r in results], indent=1) if args.json
          else format_bench(results))
    return EXIT_OK
