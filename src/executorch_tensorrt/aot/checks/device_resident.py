"""Device-resident programs: every method input and output stays in CUDA memory.

export(..., device_resident=True) tags the TensorRT delegates with ExecuTorch's
`target_device` compile spec (b"cuda:<device_id>") and lowers with
PropagateDevicePass's skip options, so ExecuTorch inserts no host/device copy
(`et_copy` op) and plans no memory for the method's inputs and outputs: the
caller passes CUDA buffers. That holds only when each input feeds one CUDA
delegate directly and each output comes straight out of one; anything else
would need a copy, so export refuses it and names the input or output.
"""
from __future__ import annotations

import operator

import torch
from executorch.exir import ExecutorchBackendConfig
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec
from executorch.exir.delegate import executorch_call_delegate
from executorch.exir.passes import MemoryPlanningPass
from executorch.exir.passes.propagate_device_config import PropagateDeviceConfig
from torch.export.graph_signature import InputKind, OutputKind

from ...errors import ExportError
from ...program.info import ET_COPY_OPS, describe_program, device_resident_problems
from ..compile_spec import TARGET_DEVICE_KEY


def target_device_spec(device_id: int) -> CompileSpec:
    return CompileSpec(TARGET_DEVICE_KEY, f"cuda:{device_id}".encode())


def place_on_device(partitioner) -> None:
    """Adds the target_device spec to a TensorRTPartitioner's delegation spec."""
    spec = partitioner.delegation_spec
    specs = [s for s in spec.compile_specs if s.key != TARGET_DEVICE_KEY]
    specs.append(target_device_spec(partitioner.compile_spec.device_id))
    partitioner.delegation_spec = DelegationSpec(spec.backend_id, specs)


def backend_config() -> ExecutorchBackendConfig:
    """to_executorch's config: no copies for method I/O, and no memory planned for it."""
    return ExecutorchBackendConfig(
        propagate_device_config=PropagateDeviceConfig(
            skip_h2d_for_method_inputs=True, skip_d2h_for_method_outputs=True),
        enable_non_cpu_memory_planning=True,
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False,
                                                alloc_graph_output=False))


def _cuda_delegate(gm: torch.fx.GraphModule, node: torch.fx.Node) -> str | None:
    """The backend id when `node` calls a delegate with a CUDA target_device."""
    if node.op != "call_function" or node.target is not executorch_call_delegate:
        return None
    lowered = getattr(gm, node.args[0].target, None) if node.args else None
    for spec in getattr(lowered, "compile_specs", None) or ():
        if spec.key == TARGET_DEVICE_KEY and bytes(spec.value).lower().startswith(b"cuda"):
            return lowered.backend_id
    return None


def _describe(gm: torch.fx.GraphModule, node: torch.fx.Node) -> str:
    if node.op == "output":
        return "the method's outputs"
    if node.op == "call_function" and node.target is executorch_call_delegate:
        backend = _cuda_delegate(gm, node)
        if backend is not None:
            return f"a {backend} delegate on CUDA"
        lowered = getattr(gm, node.args[0].target, None)
        return f"a {getattr(lowered, 'backend_id', 'unknown')} delegate with no CUDA target"
    if node.op == "placeholder":
        return f"input {node.name!r}"
    target = node.target
    name = getattr(target, "__name__", None) or str(target)
    return f"{name} (outside every CUDA delegate)"


def io_problems(ep: torch.export.ExportedProgram, method: str) -> list[str]:
    """Why method I/O of a lowered program could not stay on the device."""
    gm = ep.graph_module
    nodes = {n.name: n for n in gm.graph.nodes}
    problems = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind != InputKind.USER_INPUT:
            continue
        name = getattr(spec.arg, "name", None)
        node = nodes.get(name)
        if node is None or not isinstance(node.meta.get("val"), torch.Tensor):
            problems.append(f"method {method!r} input {name!r} is not a tensor, so it cannot "
                            "live in CUDA memory")
            continue
        users = list(node.users)
        if len(users) != 1:
            problems.append(
                f"method {method!r} input {name!r} feeds {len(users)} consumers "
                f"({', '.join(_describe(gm, u) for u in users) or 'none'}); a device-resident "
                "input must feed exactly one TensorRT delegate")
        elif _cuda_delegate(gm, users[0]) is None:
            problems.append(
                f"method {method!r} input {name!r} feeds {_describe(gm, users[0])}, which "
                "runs on the host, so it would need a device-to-host copy")
    output = next(n for n in gm.graph.nodes if n.op == "output")
    outs = output.args[0] if isinstance(output.args[0], (tuple, list)) else (output.args[0],)
    for i, (spec, node) in enumerate(zip(ep.graph_signature.output_specs, outs)):
        if spec.kind != OutputKind.USER_OUTPUT:
            continue
        label = f"method {method!r} output {i}"
        if not isinstance(node, torch.fx.Node):
            problems.append(f"{label} is a constant ({node!r}), not a tensor in CUDA memory")
        elif node.op == "placeholder":
            problems.append(f"{label} is the input {node.name!r} passed through; it is not "
                            "produced by a TensorRT delegate")
        elif not (node.op == "call_function" and node.target is operator.getitem
                  and _cuda_delegate(gm, node.args[0]) is not None):
            problems.append(f"{label} is computed by {_describe(gm, node)}, on the host, so "
                            "it would need a host-to-device copy")
        elif any(u.op != "output" for u in node.users):
            others = ", ".join(_describe(gm, u) for u in node.users if u.op != "output")
            problems.append(f"{label} is also used by {others}; ExecuTorch then copies it to "
                            "the host and returns the host copy")
    problems += _boundary_problems(gm, method)
    return problems


def _boundary_problems(gm: torch.fx.GraphModule, method: str) -> list[str]:
    """Copies inside the method: CUDA delegates next to host ops."""
    problems = []
    for node in gm.graph.nodes:
        backend = _cuda_delegate(gm, node)
        if backend is None:
            continue
        for arg in node.args[1:]:
            if not isinstance(arg, torch.fx.Node) or arg.op == "placeholder":
                continue  # method inputs are checked above
            if not (arg.op == "call_function" and arg.target is operator.getitem
                    and _cuda_delegate(gm, arg.args[0]) is not None):
                problems.append(f"method {method!r}: {_describe(gm, arg)} feeds a {backend} "
                                "delegate, which needs a host-to-device copy inside the method")
        for item in node.users:
            for user in item.users:
                if user.op != "output" and _cuda_delegate(gm, user) is None:
                    problems.append(f"method {method!r}: a {backend} delegate's output feeds "
                                    f"{_describe(gm, user)}, which needs a device-to-host copy "
                                    "inside the method")
    return problems


def check_device_io(edge) -> None:
    """Raises ExportError naming every input and output that cannot stay on the device."""
    problems = [p for name in edge.methods for p in io_problems(edge.exported_program(name), name)]
    if problems:
        raise ExportError(
            "device_resident=True keeps every method input and output in CUDA memory, which "
            "needs each input to feed one TensorRT delegate directly, each output to come "
            "straight out of one, and no host<->device copy (et_copy op) inside the method. "
            "Nothing was written. Not so here:\n  - "
            + "\n  - ".join(problems)
            + "\nMake TensorRT take the ops named above (check exclude_ops and what its "
            "parser rejected: export_program(...).partitioner.reports), or export with "
            "device_resident=False.")


def check_program(buffer: bytes) -> None:
    """The serialized program's own record, as `inspect --device-resident` reads it."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    problems = device_resident_problems(describe_program(deserialize_pte_binary(buffer).program))
    if problems:
        raise ExportError("the lowered program is not device-resident (nothing was written):\n"
                          "  - " + "\n  - ".join(problems))


__all__ = ["ET_COPY_OPS", "backend_config", "check_device_io", "check_program",
           "io_problems", "place_on_device", "target_device_spec"]
