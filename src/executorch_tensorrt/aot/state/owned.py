"""Delegate-owned state (KV caches): mutable buffers that live inside a partition.

ExecuTorch 1.5.1 lowers a mutated buffer tagged into a delegate as the
delegate's own BUFFER input plus a BUFFER_MUTATION output, and never passes
it at run time: the delegate owns it (docs/llm.md). Here:

- `tag_owned_state` (partitioner) tags a mutated buffer into the partition
  that reads and writes it, and only when that partition does all of it;
- `lift_state` (preprocess) turns each such buffer into a graph input and
  its new value into a graph output, so the ONNX model carries the state as
  input/output pairs that the executors bind to memory they own;
- `finish_onnx` puts those pairs after the user inputs/outputs, names them,
  rewrites the cache update as ONNX TensorScatter where it can (in place),
  and returns the blob's "state" entries and initial-value sections.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import onnx
import torch
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils import _pytree as pytree

from .fp8_cache import quantize_caches
from .kept_write import find_kept_write, mark_kept_writes
from .kv_update import find_kv_updates, mark_kv_updates, rewrite_tensor_scatter
from .lifted import LiftedProgram, LiftedState
from ..torch_dtypes import BLOB_NAME_OF_ONNX, BLOB_NAME_OF_TORCH

STATE_INPUT_PREFIX = "state_in."
STATE_OUTPUT_PREFIX = "state_out."


def tag_owned_state(ep: torch.export.ExportedProgram, notes: dict[str, str]) -> None:
    """Tags each mutated buffer with the partition of its readers and writer when
    one partition holds all of them; otherwise leaves it to ExecuTorch (which then
    copies the delegate's new value into the buffer on every call) and says why in
    `notes` (buffer fqn -> reason)."""
    sig = ep.graph_signature
    writers = {fqn: name for name, fqn in sig.buffers_to_mutate.items()}
    by_name = {n.name: n for n in ep.graph.nodes}
    for node in ep.graph.nodes:
        fqn = sig.inputs_to_buffers.get(node.name) if node.op == "placeholder" else None
        if fqn is None or fqn not in writers:
            continue
        writer = by_name.get(writers[fqn])
        users = list(node.users) + ([writer] if writer is not None else [])
        tags = {u.meta.get("delegation_tag") for u in users}
        if len(tags) == 1 and None not in tags:
            node.meta["delegation_tag"] = tag = tags.pop()
            notes[fqn] = f"owned by TensorRT partition {tag} (kept there between calls)"
            continue
        outside = sorted(u.name for u in users if u.meta.get("delegation_tag") is None)
        notes[fqn] = (
            f"mutable buffer stays with ExecuTorch (a full copy per call): "
            + (f"read or written by nodes outside TensorRT ({', '.join(outside[:4])})"
               if outside else f"read or written by several partitions {sorted(tags)}"))


CALLER_CACHE_KEY = "etrt_caller_cache"


def mark_caller_caches(ep: torch.export.ExportedProgram, notes: dict[str, str]) -> None:
    """state="caller": buffers stay with ExecuTorch; the node writing each one is
    marked, so preprocess may alias that output to its input (TR02). An ordinary
    input is never aliased: the engine would overwrite the caller's tensor."""
    by_name = {n.name: n for n in ep.graph.nodes}
    for writer, fqn in ep.graph_signature.buffers_to_mutate.items():
        if writer in by_name:
            by_name[writer].meta[CALLER_CACHE_KEY] = fqn
            notes[fqn] = "stays with ExecuTorch (state='caller'): copied back after each call"


def lift_state(ep: torch.export.ExportedProgram, tensor_scatter: bool = True) -> LiftedProgram:
    """A copy of `ep` whose delegate-owned buffers are user inputs and whose
    buffer mutations are user outputs; with `tensor_scatter`, contiguous cache
    writes become kv_cache_update (exported as TensorScatter, kv_update.py), and
    first-step writes keep_first (kept_write.py)."""
    sig = ep.graph_signature
    mutated = set(sig.buffers_to_mutate.values())
    owned = [s for s in sig.input_specs
             if s.kind == InputKind.BUFFER and s.target in mutated]
    lifted = LiftedProgram(ep, user_inputs=len(sig.user_inputs), user_outputs=len(sig.user_outputs))
    if not owned:
        return _caller_caches(lifted, tensor_scatter)
    new_sig = copy.deepcopy(sig)
    positions_in, k = {}, 0
    for spec in new_sig.input_specs:
        if spec.kind == InputKind.BUFFER and spec.target in mutated:
            fqn = spec.target
            init = ep.state_dict.get(fqn, ep.constants.get(fqn))
            if init is None:
                raise ValueError(f"mutable buffer {fqn!r} has no initial value in the program")
            lifted.states.append(LiftedState(fqn, spec.arg.name, init.detach().clone()))
            spec.kind, spec.target, spec.persistent = InputKind.USER_INPUT, None, None
            positions_in[fqn] = k
        if spec.kind == InputKind.USER_INPUT:
            k += 1
    # ExecuTorch puts mutation outputs first; the user outputs go first here,
    # the state outputs after them, in the order of the states.
    order = {s.fqn: i for i, s in enumerate(lifted.states)}
    mutation_specs = {s.target: s for s in new_sig.output_specs
                      if s.kind == OutputKind.BUFFER_MUTATION and s.target in order}
    if set(mutation_specs) != set(order):
        raise ValueError("a delegate-owned buffer has no mutation output in the partition")
    for s in mutation_specs.values():
        s.kind, s.target = OutputKind.USER_OUTPUT, None
    gm = copy.deepcopy(ep.graph_module)  # the graph only: weights are placeholders
    program = _with_signature(ep, gm, new_sig, [s.fqn for s in lifted.states])
    lifted.program = program
    names = [s.arg.name for s in program.graph_signature.output_specs
             if s.kind == OutputKind.USER_OUTPUT]
    lifted.state_input_positions = [positions_in[s.fqn] for s in lifted.states]
    lifted.state_output_positions = [names.index(mutation_specs[s.fqn].arg.name)
                                     for s in lifted.states]
    for state in lifted.states:
        state.kv_update = find_kv_updates(program, state.placeholder)
    kept = {s.fqn: w for s in lifted.states if s.kv_update is None
            and (w := find_kept_write(program, s.placeholder)) is not None}
    if tensor_scatter:
        updates = [s.kv_update for s in lifted.states
                   if s.kv_update is not None and s.kv_update.scatter]
        before = [kv.update_node for kv in updates] + [w.update_node for w in kept.values()]
        mark_kv_updates(gm, updates)
        mark_kept_writes(gm, list(kept.values()))
        for state in lifted.states:
            state.kept_write = state.fqn in kept
        after = [kv.update_node for kv in updates] + [w.update_node for w in kept.values()]
        renamed = dict(zip(before, after))
        for spec in program.graph_signature.output_specs:
            if spec.arg.name in renamed:
                spec.arg.name = renamed[spec.arg.name]
    return lifted


def _caller_caches(lifted: LiftedProgram, tensor_scatter: bool) -> LiftedProgram:
    """Caches passed in and out by ExecuTorch (the partition's input, written at
    contiguous positions into its output): rewritten as TensorScatter so the engine
    updates the input in place, and recorded as aliased (output, input) pairs."""
    ep = lifted.program
    sig = ep.graph_signature
    inputs = [s.arg.name for s in sig.input_specs if s.kind == InputKind.USER_INPUT]
    outputs = [s.arg.name for s in sig.output_specs if s.kind == OutputKind.USER_OUTPUT]
    nodes = {n.name: n for n in ep.graph.nodes}
    found = [(i, kv) for i, name in enumerate(inputs)
             if (kv := find_kv_updates(ep, name)) is not None and kv.scatter
             and kv.update_node in outputs
             and nodes[kv.update_node].meta.get(CALLER_CACHE_KEY)]
    if not found or not tensor_scatter:
        return lifted
    gm = copy.deepcopy(ep.graph_module)
    program = _with_signature(ep, gm, copy.deepcopy(sig), [])
    before = [kv.update_node for _, kv in found]
    mark_kv_updates(gm, [kv for _, kv in found])
    renamed = {old: kv.update_node for old, (_, kv) in zip(before, found)}
    for spec in program.graph_signature.output_specs:
        if spec.arg.name in renamed:
            spec.arg.name = renamed[spec.arg.name]
    lifted.program = program
    lifted.aliases = [(i, outputs.index(old)) for (i, _), old in zip(found, before)]
    return lifted


def aliased_io(lifted: LiftedProgram, onnx_bytes: bytes,
               edge_node_of: dict[int, str]) -> tuple[bytes, dict[int, str], list[dict]]:
    """The caller-owned caches' TensorScatter rewrite and their aliased_io entries."""
    model = onnx.load_model_from_string(onnx_bytes)
    edge_node_of = rewrite_tensor_scatter(model, lifted, [], edge_node_of)
    g = model.graph
    entries = [{"output": g.output[o].name, "input": g.input[i].name, "kind": "kv_cache_update"}
               for i, o in lifted.aliases]
    return model.SerializeToString(), edge_node_of, entries


def _with_signature(ep, gm, new_sig, fqns: list[str]) -> torch.export.ExportedProgram:
    state_dict = {k: v for k, v in ep.state_dict.items() if k not in fqns}
    constants = {k: v for k, v in ep.constants.items() if k not in fqns}
    call_graph = copy.deepcopy(ep.module_call_graph)
    n_in = sum(s.kind == InputKind.USER_INPUT for s in new_sig.input_specs)
    n_out = sum(s.kind == OutputKind.USER_OUTPUT for s in new_sig.output_specs)
    call_graph[0].signature.in_spec = pytree.tree_flatten(((0,) * n_in, {}))[1]
    call_graph[0].signature.out_spec = pytree.tree_flatten((0,) * n_out)[1]
    return torch.export.ExportedProgram(
        root=gm, graph=gm.graph, graph_signature=new_sig,
        state_dict=state_dict, range_constraints=ep.range_constraints,
        module_call_graph=call_graph, example_inputs=None,
        constants=constants, verifiers=[ep.verifier])


def _value_type(value: onnx.ValueInfoProto) -> tuple[str, list[int]]:
    t = value.type.tensor_type
    return (BLOB_NAME_OF_ONNX.get(t.elem_type, ""),
            [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim])




@dataclass
class FinishedState:
    onnx_bytes: bytes
    edge_node_of: dict[int, str]
    entries: list[dict]             # the blob's "state" metadata
    sections: dict[str, bytes]      # initial values that are not all zeros
    profile_order: list[int]        # lifted input index for each ONNX input, in order


def finish_onnx(lifted: LiftedProgram, onnx_bytes: bytes, edge_node_of: dict[int, str],
                kv_cache_dtype: str | None = None) -> FinishedState:
    """Moves the state inputs/outputs after the user ones, names them, rewrites
    contiguous cache writes as TensorScatter (or, with kv_cache_dtype
    "float8_e4m3fn", as the fp8 cache's write: fp8_cache.py), and describes
    each state."""
    model = onnx.load_model_from_string(onnx_bytes)
    g = model.graph
    n_in, n_out = len(g.input), len(g.output)
    s_in, s_out = lifted.state_input_positions, lifted.state_output_positions
    if n_in != lifted.user_inputs + len(s_in) or n_out != lifted.user_outputs + len(s_out):
        raise ValueError(f"the ONNX model has {n_in} inputs and {n_out} outputs; the partition "
                         f"has {lifted.user_inputs}+{len(s_in)} and "
                         f"{lifted.user_outputs}+{len(s_out)} (user+state)")
    in_order = [i for i in range(n_in) if i not in s_in] + s_in
    out_order = [i for i in range(n_out) if i not in s_out] + s_out
    inputs, outputs = [copy.deepcopy(g.input[i]) for i in in_order], \
        [copy.deepcopy(g.output[i]) for i in out_order]
    renames: dict[str, str] = {}
    for k, state in enumerate(lifted.states):
        value_in = inputs[lifted.user_inputs + k]
        value_out = outputs[lifted.user_outputs + k]
        renames[value_in.name] = value_in.name = STATE_INPUT_PREFIX + state.fqn
        renames[value_out.name] = value_out.name = STATE_OUTPUT_PREFIX + state.fqn
    _rename_values(g, renames)
    del g.input[:]
    g.input.extend(inputs)
    del g.output[:]
    g.output.extend(outputs)
    entries, sections = [], {}
    for k, state in enumerate(lifted.states):
        dtype, shape = _value_type(inputs[lifted.user_inputs + k])
        want = BLOB_NAME_OF_TORCH.get(state.init.dtype)
        if dtype != want or shape != list(state.init.shape):
            raise ValueError(f"state {state.fqn!r}: the ONNX input is {dtype} {shape}, the "
                             f"buffer is {state.init.dtype} {list(state.init.shape)}")
        entry = {"fqn": state.fqn, "onnx_input": inputs[lifted.user_inputs + k].name,
                 "onnx_output": outputs[lifted.user_outputs + k].name, "dtype": dtype,
                 "shape": shape, "init": "zeros", "update": "functional"}
        if bool(torch.any(state.init != 0)):
            name = f"state_init.{k}"
            sections[name] = state.init.contiguous().numpy().tobytes() \
                if state.init.dtype != torch.bfloat16 else \
                state.init.contiguous().view(torch.int16).numpy().tobytes()
            entry["init"] = "section:" + name
        entries.append(entry)
    if kv_cache_dtype is not None:
        edge_node_of = quantize_caches(model, lifted, entries, edge_node_of)
    edge_node_of = rewrite_tensor_scatter(model, lifted, entries, edge_node_of)
    return FinishedState(model.SerializeToString(), edge_node_of, entries, sections, in_order)


def _rename_values(g: onnx.GraphProto, renames: dict[str, str]) -> None:
    """Renames values in `g` and in the branches of its If nodes, which read
    the outer graph's values by name (decoder_fusions.branch_first_step)."""
    for node in g.node:
        for i, name in enumerate(node.input):
            if name in renames:
                node.input[i] = renames[name]
        for i, name in enumerate(node.output):
            if name in renames:
                node.output[i] = renames[name]
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                _rename_values(attribute.g, renames)
                for value in attribute.g.output:
                    if value.name in renames:
                        value.name = renames[value.name]
    for value in g.value_info:
        if value.name in renames:
            value.name = renames[value.name]
