"""What several commands share: their help layout, the --data, --target /
--cache and --quantize arguments, the .ptd beside a program, and the refusal
of device-resident programs that executorch's Python runtime cannot feed."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..exits import EXIT_CODES, EXIT_RUN, Fail


def add_command(sub, name: str, **kwargs) -> argparse.ArgumentParser:
    """A subcommand's parser, its help ending with the exit codes."""
    return sub.add_parser(name, formatter_class=argparse.RawDescriptionHelpFormatter,
                          epilog=EXIT_CODES, **kwargs)


def add_data_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", metavar="PTD",
                   help="the program's weights file (.ptd; default: MODEL with the suffix "
                        ".ptd, when it exists)")


def add_target_arguments(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--target", metavar="SM",
                   help=f"the GPU's compute capability {what}, e.g. SM89 (default: this "
                        "machine's GPU; required on a machine without one)")
    p.add_argument("--cache", metavar="DIR",
                   help="the engine cache (default: $EXECUTORCH_TENSORRT_CACHE_DIR, else "
                        "~/.cache/executorch_tensorrt)")


def _scheme_list(schemes) -> str:
    """Scheme names with the limits a user meets first (flavour, targets)."""
    def named(s) -> str:
        limits = [*(["standard TensorRT only"] if "tensorrt_rtx" not in s.flavors else []),
                  *([f"SM{s.min_capability}+ targets only"] if s.min_capability else [])]
        return s.name + (f" ({', '.join(limits)})" if limits else "")
    return ", ".join(named(s) for s in schemes)


def add_quantize_options(p, note: str = "") -> None:
    """--quantize and --group-size: the same for `export` and `llm-export`; the
    schemes are the quantization registry's (torch-free to import)."""
    from ...quantization.registry import SCHEMES

    runnable = [s for s in SCHEMES.values() if s.implemented]
    p.add_argument("--quantize", metavar="SCHEME",
                   help="quantize the model first: "
                        f"{_scheme_list(s for s in runnable if not s.activations)} (Linear "
                        f"weights), or {_scheme_list(s for s in runnable if s.activations)} "
                        "(Linear and Conv2d weights and activations, calibrated) "
                        f"(docs/quantization.md){note}")
    p.add_argument("--group-size", type=int, default=128, metavar="N",
                   help="int4_weight_only: input features per scale, 32, 64 or 128 "
                        "(default 128; it must divide every Linear's input features)")


def data_path(path: Path, data: str | None) -> Path | None:
    """--data, else model.ptd beside model.pte when it exists (said on stderr)."""
    from ..runner import resolve_data_path

    resolved, note = resolve_data_path(path, data)
    if note:
        print(f"note: {note}", file=sys.stderr)
    return resolved


def refuse_device_resident(path: Path, method: str) -> None:
    from ...program.info import device_tensors, read_program

    try:
        methods = read_program(path)
    except ValueError:
        return  # loading says why
    on_device = [t for m in methods if m.name == method for t in device_tensors(m)]
    if on_device:
        raise Fail(EXIT_RUN, f"method {method!r} of {path} keeps {', '.join(on_device)} "
                    "(a device-resident program). executorch's Python runtime gives methods "
                    "host tensors, which such a program cannot take. Run it with the C++ "
                    "reference runner (examples/cpp_runner), which allocates them in CUDA "
                    "memory.")


def refuse_device_resident_program(path: Path) -> None:
    from ...program.info import read_program

    try:
        names = [m.name for m in read_program(path)]
    except ValueError as e:
        raise Fail(EXIT_RUN, str(e)) from None
    for name in names:
        refuse_device_resident(path, name)
