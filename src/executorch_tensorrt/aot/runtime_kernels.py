"""Checks that every operator left outside the delegates has a kernel in the
installed ExecuTorch runtime, so a program never fails to load with 0x14."""
from __future__ import annotations

from ..errors import ExportError


def registered_kernels() -> set[str]:
    from executorch.extension.pybindings import portable_lib

    return set(portable_lib._get_operator_names())


def program_operators(program) -> list[tuple[str, str]]:
    """(method, 'aten::op.overload') for every operator a program's methods call."""
    out = []
    for plan in program.execution_plan:
        for op in plan.operators:
            out.append((plan.name, f"{op.name}.{op.overload}" if op.overload else op.name))
    return out


def check_runtime_kernels(program, *, runtime: str = "the installed ExecuTorch runtime") -> None:
    kernels = registered_kernels()
    missing = sorted({(m, op) for m, op in program_operators(program) if op not in kernels})
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
