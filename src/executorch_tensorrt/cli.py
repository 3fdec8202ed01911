"""The executorch-tensorrt command line: demo, export, inspect, run."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def cmd_inspect(args) -> int:
    from .tools.program_info import device_resident_problems, format_program, read_program

    methods = read_program(args.model)
    print(format_program(methods))
    if not args.device_resident:
        return 0
    problems = device_resident_problems(methods)
    for problem in problems:
        print(f"device-resident: FAIL: {problem}")
    if problems:
        return 1
    print("device-resident: OK (no et_copy ops; every method input and output is a CUDA tensor)")
    return 0


def cmd_export(args) -> int:
    from .aot.export import export_program
    from .tools.models import example

    model, inputs = example(args.example)
    export_program(model, inputs, args.output)
    return 0


def _ones_inputs(method) -> list:
    import torch

    meta = method.metadata
    inputs = []
    for i in range(meta.num_inputs()):
        tm = meta.input_tensor_meta(i)
        dtype = _torch_dtype(int(tm.dtype()))
        inputs.append(torch.ones(list(tm.sizes()), dtype=dtype))
    return inputs


def _torch_dtype(code: int):
    from .runtime.arguments import SCALAR_TYPE_TO_TORCH

    if code not in SCALAR_TYPE_TO_TORCH:
        raise SystemExit(f"input dtype code {code} is not supported by the reference runner")
    return SCALAR_TYPE_TO_TORCH[code]


def _read_or_none(path: Path) -> list:
    """The program's methods, or [] when it cannot be parsed (loading it then says why)."""
    from .tools.program_info import read_program

    try:
        return read_program(path)
    except ValueError:
        return []


def cmd_run(args) -> int:
    import executorch_tensorrt  # noqa: F401 - registers the backend
    from executorch.runtime import Runtime

    from .tools.expected import PRINTED, format_values
    from .tools.program_info import device_tensors

    path = Path(args.model)
    if not path.is_file():
        print(f"error: {path} does not exist", file=sys.stderr)
        return 2
    on_device = [t for m in _read_or_none(path) if m.name == args.method
                 for t in device_tensors(m)]
    if on_device:
        print(f"error: method {args.method!r} of {path} keeps {', '.join(on_device)} "
              "(a device-resident program). executorch's Python runtime gives methods host "
              "tensors, which such a program cannot take. Run it with the C++ reference runner "
              "(examples/cpp_runner), which allocates them in CUDA memory.", file=sys.stderr)
        return 1
    try:
        method = Runtime.get().load_program(str(path)).load_method(args.method)
    except Exception as e:  # noqa: BLE001 - ExecuTorch raises RuntimeError with a code
        print(f"error: cannot load {path}: {e}. {executorch_tensorrt.last_error()}",
              file=sys.stderr)
        return 1
    outputs = method.execute(_ones_inputs(method))
    for i, out in enumerate(outputs):
        flat = out.flatten()
        print(f"output[{i}] shape=[{','.join(str(d) for d in out.shape)}]")
        print(f"  values: {format_values(flat[:PRINTED].tolist())}")
    return 0


def cmd_verify(args) -> int:
    from .tools.expected import ExpectedError, compare, expected_path, read_expected

    exp_file = Path(args.expected)
    if exp_file.suffix == ".pte":
        exp_file = expected_path(exp_file)
    if args.tolerance < 0:
        print("error: --tolerance must be >= 0", file=sys.stderr)
        return 2
    try:
        expected = read_expected(exp_file)
        text = sys.stdin.read() if args.output == "-" else Path(args.output).read_text()
        problems = compare(expected, text, args.tolerance)
    except (ExpectedError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for p in problems:
        print(f"FAIL {p}")
    if problems:
        return 1
    print(f"OK: {len(expected)} output(s) match {exp_file} (tolerance {args.tolerance:g})")
    return 0


def cmd_demo(args) -> int:
    import torch

    import executorch_tensorrt
    from executorch.runtime import Runtime

    from .aot.export import export_program
    from .tools.expected import PRINTED, format_values
    from .tools.models import example
    from .tools.program_info import format_program, read_program
    from .runtime.executors import FALLBACK_ENV, FALLBACK_ONNXRUNTIME

    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model, inputs = example(args.example)
    path = out_dir / f"{args.example}.pte"
    print(f"== export: built-in model {args.example!r} -> {path}")
    result = export_program(model, inputs, path)
    if result.expected_path:
        print(f"eager reference for inputs of 1.0: {result.expected_path}")
    print(f"\n== inspect {path}")
    print(format_program(read_program(path)))
    if os.environ.get(FALLBACK_ENV) is None:
        os.environ[FALLBACK_ENV] = FALLBACK_ONNXRUNTIME
        print(f"\n== run (the demo sets {FALLBACK_ENV}={FALLBACK_ONNXRUNTIME}: where no GPU can "
              "run the engine, the embedded ONNX runs on the CPU with onnxruntime)")
    else:
        print(f"\n== run ({FALLBACK_ENV}={os.environ[FALLBACK_ENV]})")
    t = time.perf_counter()
    try:
        method = Runtime.get().load_program(str(path)).load_method("forward")
    except RuntimeError as e:
        print(f"error: loading failed: {e}: {executorch_tensorrt.last_error()}", file=sys.stderr)
        return 1
    load_s = time.perf_counter() - t
    method.execute(list(inputs))  # warm-up
    runs = 20
    t = time.perf_counter()
    for _ in range(runs):
        outputs = method.execute(list(inputs))
    run_ms = (time.perf_counter() - t) / runs * 1e3
    with torch.no_grad():
        model(*inputs)  # warm-up
        t = time.perf_counter()
        for _ in range(runs):
            expected = model(*inputs)
        eager_ms = (time.perf_counter() - t) / runs * 1e3
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    worst = max(float((o - e).abs().max()) for o, e in zip(outputs, expected))
    for i, o in enumerate(outputs):
        print(f"output[{i}] shape={list(o.shape)} first values: "
              f"{format_values(o.flatten()[:PRINTED].tolist())}")
    print(f"\n== compare with eager PyTorch\nlargest absolute difference: {worst:.3g}")
    print(f"timings: export {result.seconds['total']:.2f} s, load {load_s * 1e3:.1f} ms, "
          f"run {run_ms:.3f} ms/call (ExecuTorch), eager {eager_ms:.3f} ms/call")
    ok = worst <= args.tolerance
    print("PASS" if ok else f"FAIL: difference above {args.tolerance}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    from .tools.models import EXAMPLES

    parser = argparse.ArgumentParser(prog="executorch-tensorrt",
                                     description="TensorRT delegate for ExecuTorch")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="export a built-in model, inspect, run, compare with eager")
    p.add_argument("--example", choices=sorted(EXAMPLES), default="cnn")
    p.add_argument("--out-dir", default="out")
    p.add_argument("--tolerance", type=float, default=1e-4)
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("export", help="export a built-in model to a .pte")
    p.add_argument("--example", choices=sorted(EXAMPLES), default="cnn")
    p.add_argument("output")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("verify", help="compare a runner's printed output with a .expected file")
    p.add_argument("expected", help="the .expected file (or the .pte beside it)")
    p.add_argument("output", nargs="?", default="-",
                   help="the runner's printed output (default: standard input)")
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="largest absolute difference allowed; 0: printed text must match")
    p.set_defaults(func=cmd_verify)
    p = sub.add_parser("inspect", help="describe a .pte: I/O, delegates, operators, blobs")
    p.add_argument("model")
    p.add_argument("--device-resident", action="store_true",
                   help="exit 1 unless every method input and output is recorded as a CUDA "
                        "tensor and no et_copy (host<->device copy) op is left")
    p.set_defaults(func=cmd_inspect)
    p = sub.add_parser("run", help="run a .pte with every input filled with 1.0")
    p.add_argument("model")
    p.add_argument("--method", default="forward")
    p.set_defaults(func=cmd_run)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except Exception as e:  # noqa: BLE001 - a CLI reports, it does not trace back
        if os.environ.get("EXECUTORCH_TENSORRT_DEBUG"):
            raise
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
