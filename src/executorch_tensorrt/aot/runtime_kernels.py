"""Checks that the installed ExecuTorch runtime can run a program: every
operator left outside the delegates has a kernel, and every delegate's
backend is registered. A program that would fail to load with 0x14 is never
written; one meant for another runtime (e.g. ExecuTorch's CUDA runtime, for
CudaBackend delegates) is written with a warning that says so."""
from __future__ import annotations

import warnings

from ..errors import ExportError
from .partitioner import BACKEND_ID


class RuntimeMismatchWarning(UserWarning):
    """The program needs a runtime other than the installed one."""


def registered_kernels() -> set[str]:
    from executorch.extension.pybindings import portable_lib

    return set(portable_lib._get_operator_names())


def registered_backends() -> set[str]:
    from executorch.runtime import Runtime

    return set(Runtime.get().backend_registry.registered_backend_names) | {BACKEND_ID}


def program_operators(program) -> list[tuple[str, str]]:
    """(method, 'aten::op.overload') for every operator a program's methods call."""
    out = []
    for plan in program.execution_plan:
        for op in plan.operators:
            out.append((plan.name, f"{op.name}.{op.overload}" if op.overload else op.name))
    return out


def program_backends(program) -> set[str]:
    return {d.id for plan in program.execution_plan for d in plan.delegates}


def check_runtime_kernels(program, *, runtime: str = "the installed ExecuTorch runtime") -> None:
    kernels = registered_kernels()
    missing = sorted({(m, op) for m, op in program_operators(program) if op not in kernels})
    foreign = sorted(program_backends(program) - registered_backends())
    if foreign:
        ops = f" and kernels for {', '.join(op for _, op in missing)}" if missing else ""
        warnings.warn(RuntimeMismatchWarning(
            f"the program uses {', '.join(foreign)}, which {runtime} does not register{ops}; "
            f"it cannot run here. Run it with an ExecuTorch runtime built with "
            f"{'that backend' if len(foreign) == 1 else 'those backends'} (for CudaBackend, "
            "ExecuTorch's CUDA runtime, which PyPI does not ship)."), stacklevel=3)
        return
    if not missing:
        return
    names = ", ".join(f"{op} (method {m})" for m, op in missing)
    aten = sorted({op.split("::", 1)[-1].split(".", 1)[0] for _, op in missing})
    raise ExportError(
        f"the program leaves {names} outside every delegate, and {runtime} has no kernel for "
        f"it, so loading it would fail with error 0x14 (Missing operator). Nothing was "
        f"written. Remedies: give export a partitioner after TensorRT that takes "
        f"{', '.join('aten.' + a for a in aten)} (e.g. ExecuTorch's CudaPartitioner on a "
        f"machine with CUDA PyTorch, for a runtime built with the CUDA backend), or change "
        f"the model to avoid it.")
