"""Checks that the installed ExecuTorch runtime can run a program: every
operator left outside the delegates has a kernel, and every delegate's
backend is registered. A program that would fail to load with 0x14 is never
written; one meant for another runtime (e.g. ExecuTorch's CUDA runtime, for
CudaBackend delegates) is written with a warning that says so."""
from __future__ import annotations

import warnings

from ...errors import ExportError
from ...program.info import MethodInfo
from ..partition.partitioner import BACKEND_ID


class RuntimeMismatchWarning(UserWarning):
    """The program needs a runtime other than the installed one."""


def registered_kernels() -> set[str]:
    from executorch.extension.pybindings import portable_lib

    return set(portable_lib._get_operator_names())


def registered_backends() -> set[str]:
    from executorch.runtime import Runtime

    return set(Runtime.get().backend_registry.registered_backend_names) | {BACKEND_ID}


def check_runtime_kernels(methods: list[MethodInfo], *,
                          runtime: str = "the installed ExecuTorch runtime") -> None:
    """`methods` as program_info.describe_program gives them."""
    kernels = registered_kernels()
    missing = sorted({(m.name, op) for m in methods for op in m.operators if op not in kernels})
    foreign = sorted({d.backend for m in methods for d in m.delegates} - registered_backends())
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
