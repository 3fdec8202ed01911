"""The aarch64 half of tools/release/emulated_run.sh: runs under qemu-aarch64
with Debian's arm64 python3.11 and the aarch64 wheels (torch, executorch, ours),
in ONE interpreter, because importing torch alone takes minutes under
emulation (docs/aarch64.md).

    python3.11 emulated_runtime.py WORK_DIR

For every WORK_DIR/*.pte (exported on x86_64 beside its .expected reference
and, for one, its .ptd), through the CLI's own commands:
  1. without EXECUTORCH_TENSORRT_FALLBACK: `run` must fail loud (exit 3, the
     cause naming the variable), on the first program only;
  2. with the fallback: `run --outputs NAME.arm.etensors` (ExecuTorch's Python
     runtime, our backend, onnxruntime's aarch64 kernels), then `verify` against
     the reference written at export; the fallback's message must appear.
Prints one line per step with its wall time; exits 1 if any step is wrong.
"""
from __future__ import annotations

import contextlib
import io
import os
import platform
import sys
import time
from pathlib import Path


def timed(label: str, fn):
    start = time.monotonic()
    result = fn()
    print(f"emulated: {label}: {time.monotonic() - start:.1f} s", flush=True)
    return result


def cli(argv: list[str]) -> tuple[int, str]:
    """One CLI command in this interpreter: (exit code, what it wrote to stderr)."""
    from executorch_tensorrt.cli.main import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


def main(argv: list[str]) -> int:
    work = Path(argv[0])
    programs = sorted(work.glob("*.pte"))
    if not programs:
        print(f"emulated: no .pte in {work}", file=sys.stderr)
        return 2
    print(f"emulated: machine {platform.machine()}, Python {platform.python_version()}",
          flush=True)
    if platform.machine() != "aarch64":
        print("emulated: this half runs under qemu-aarch64", file=sys.stderr)
        return 2
    torch = timed("import torch", lambda: __import__("torch"))
    print(f"emulated: torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}")
    etrt = timed("import executorch_tensorrt", lambda: __import__("executorch_tensorrt"))
    from executorch.runtime import Runtime

    registry = Runtime.get().backend_registry
    etrt.register()
    print(f"emulated: TensorRTBackend registered: {registry.is_available('TensorRTBackend')}")
    wrong = 0 if registry.is_available("TensorRTBackend") else 1

    os.environ.pop("EXECUTORCH_TENSORRT_FALLBACK", None)
    code, err = timed(f"run {programs[0].name} without the fallback",
                      lambda: cli(["run", str(programs[0])]))
    loud = code == 3 and "EXECUTORCH_TENSORRT_FALLBACK" in err
    print(f"emulated: fail-loud: exit {code}, {err.strip().splitlines()[-1] if err.strip() else ''}")
    wrong += 0 if loud else 1

    os.environ["EXECUTORCH_TENSORRT_FALLBACK"] = "onnxruntime"
    announced = False  # the fallback says so once per process, at its first partition
    for pte in programs:
        out = pte.with_suffix(".arm.etensors")
        code, err = timed(f"run {pte.name}", lambda: cli(["run", str(pte), "--outputs", str(out)]))
        announced = announced or "onnxruntime" in err
        vcode, verr = cli(["verify", str(pte), str(out)]) if code == 0 else (code, "")
        print(f"emulated: {pte.name}: run exit {code}, verify exit {vcode}"
              + (f"\n{err}{verr}" if code or vcode else ""), flush=True)
        wrong += int(code != 0 or vcode != 0)
    print(f"emulated: the fallback announced itself: {announced}")
    return 1 if wrong or not announced else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
