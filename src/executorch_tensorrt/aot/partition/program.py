"""Cuts a set of edge nodes out of a program as its own ExportedProgram.

The same ExecuTorch helpers `to_backend` uses, applied to a deep copy, so
the partitioner checks exactly the program that preprocess will receive.
"""
from __future__ import annotations

import torch
from executorch.exir.backend.backend_api import _get_node_list_with_same_tag
from executorch.exir.backend.utils import _maybe_duplicate_constant_nodes, tag_constant_data
from executorch.exir.lowered_backend_module import (
    create_exported_program_from_submodule,
    create_submodule_from_nodes,
)

from ..program_copy import copy_program

_PROBE_TAG = "etrt_probe"


def _free_stand_in(value):
    """Same shape and dtype, one element of memory (deep-copies for free)."""
    if not isinstance(value, torch.Tensor):
        return value
    one = torch.zeros((), dtype=value.dtype)
    stand_in = one.expand(value.shape)
    return torch.nn.Parameter(stand_in, requires_grad=False) if isinstance(
        value, torch.nn.Parameter) else stand_in


def _own_shared_constants(probe: torch.export.ExportedProgram) -> None:
    """A weight the partition shares with nodes outside it gets its own
    placeholder, as to_backend does before lowering (else the cut fails). The
    duplication deep-copies the weight, so it runs on free stand-ins and the
    copies then share the original tensor."""
    saved = {**probe._state_dict, **probe._constants}
    probe._state_dict = {k: _free_stand_in(v) for k, v in probe._state_dict.items()}
    probe._constants = {k: _free_stand_in(v) for k, v in probe._constants.items()}
    try:
        _maybe_duplicate_constant_nodes(probe, _PROBE_TAG)
    finally:
        target_of = {s.arg.name: s.target for s in probe.graph_signature.input_specs
                     if getattr(s.arg, "name", None) is not None}
        for d in (probe._state_dict, probe._constants):
            for k in d:
                d[k] = saved[k] if k in saved else saved[target_of[k]]


def extract_partition(ep: torch.export.ExportedProgram, node_names: set[str],
                      real_weights=None) -> torch.export.ExportedProgram:
    """`real_weights` (name -> tensor) replaces fake weights of the same name."""
    probe = copy_program(ep, real_weights)
    gm = probe.graph_module
    for node in gm.graph.nodes:
        if node.name in node_names:
            node.meta["delegation_tag"] = _PROBE_TAG
    tag_constant_data(probe)
    _own_shared_constants(probe)
    node_list = _get_node_list_with_same_tag(gm, _PROBE_TAG, probe)
    with gm._set_replace_hook(probe.graph_signature.get_replace_hook()):
        submodule, call_node = create_submodule_from_nodes(gm, node_list, _PROBE_TAG)
    submodule.graph.output_node().meta = gm.graph.output_node().meta
    sub_ep, _, _ = create_exported_program_from_submodule(
        submodule, probe, _PROBE_TAG, call_node, False)
    return sub_ep
