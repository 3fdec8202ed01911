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


def _edge_ops(graph) -> list:
    """The ops of an edge graph that to_executorch turns into kernel calls
    (its to-out-variant pass skips the rest: Python operators, getitem,
    delegate calls, symbolic-size ops), control-flow bodies included."""
    from executorch.exir.passes import to_out_var_skiplist

    ops = []
    for node in graph.nodes:
        if node.op != "call_function" or node.target in to_out_var_skiplist:
            continue
        if _schema_name(node.target) in _REMOVED_BY_TO_EXECUTORCH:
            continue
        if getattr(node.target, "__module__", None) in ("builtins", "_operator"):
            continue
        if not hasattr(node.target, "_schema"):
            continue  # higher-order ops: their bodies are graphs of their own
        ops.append(node.target)
    return ops


# Asserts and range constraints: to_executorch erases them (RemoveGraphAssertsPass)
# before it looks for out variants, so they need no kernel.
_REMOVED_BY_TO_EXECUTORCH = {"aten::_assert_async", "aten::_assert_scalar",
                             "aten::sym_constrain_range_for_size", "aten::sym_constrain_range",
                             "aten::_assert_tensor_metadata"}


def _schema_name(target) -> str | None:
    schema = getattr(target, "_schema", None)
    return schema.name if schema is not None else None


def _kernel_name(op) -> str | None:
    """The out variant's kernel name to_executorch would call for `op`
    (`aten::add.out`), or None when the op has no out variant at all."""
    from executorch.exir.operator.convert import get_out_args_from_opoverload, to_out_variant

    try:
        if hasattr(op, "to_out_variant"):  # an edge op
            out = op.to_out_variant()
            get_out_args_from_opoverload(out)
        else:
            out, _ = to_out_variant(op)
    except (RuntimeError, AssertionError, KeyError):
        return None
    schema = out._schema
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def check_edge_kernels(edge) -> None:
    """Before to_executorch: every op left outside the delegates of `edge`
    (an EdgeProgramManager) has an out variant and a kernel in the installed
    runtime. to_executorch would otherwise stop with ExecuTorch's bare
    "Missing out variants", or write a program that fails to load."""
    kernels = registered_kernels()
    missing: dict[str, set[str]] = {}
    for method in edge.methods:
        graphs = [m.graph for m in edge.exported_program(method).graph_module.modules()
                  if hasattr(m, "graph")]
        for graph in graphs:
            for op in _edge_ops(graph):
                name = _kernel_name(op)
                if name is None or name not in kernels:
                    missing.setdefault(str(op._schema.name) + (
                        "" if name else " (no out variant)"), set()).add(method)
    if not missing:
        return
    names = ", ".join(f"{op} (method {', '.join(sorted(ms))}; {op.split()[0].replace('::', '.')})"
                      for op, ms in sorted(missing.items()))
    raise ExportError(
        f"the program would leave {names} outside every delegate, and the installed "
        "ExecuTorch runtime has no kernel for it, so to_executorch cannot lower it (or the "
        "program would fail to load with error 0x14, Missing operator). Nothing was written. "
        "Remedies: change the model so TensorRT can take it (its partition report says why "
        "TensorRT's parser refused it: export_program(...).partitioner.reports), give "
        "export a partitioner after TensorRT that takes the op (partitioners=[...], e.g. "
        "ExecuTorch's CudaPartitioner with CUDA PyTorch), or, for a custom op, register an "
        "ExecuTorch kernel for its out variant and load that library before export.")
