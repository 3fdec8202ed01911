"""Copies of programs that the partitioner and preprocess may modify and export.

The graph is deep-copied; the weights are not: the copy shares the original's
tensors (nothing here writes to them), so a copy costs no weight memory.
ExecuTorch hands partitioners a program whose weights are FakeTensors (to
save memory), which can neither be deep-copied nor exported to ONNX; the copy
gets stand-ins of the same shapes and dtypes that are one element broadcast
(stride 0), so they cost no memory either; mutated buffers (KV caches), which
the graph writes and a broadcast view cannot take, get zeros instead (pages
never touched cost no memory). They are good for asking TensorRT what it
supports, never for an engine that is shipped.
"""
from __future__ import annotations

import copy
from typing import Mapping

import torch
from torch._subclasses.fake_tensor import FakeTensor


def _replacement(key: str, value, real: Mapping[str, torch.Tensor] | None,
                 mutated: frozenset[str] = frozenset()):
    """The real tensor for a fake one (same name, shape and dtype), else a
    stand-in; any other value as it is."""
    if not isinstance(value, FakeTensor):
        return value
    found = (real or {}).get(key)
    if (isinstance(found, torch.Tensor) and not isinstance(found, FakeTensor)
            and found.shape == value.shape and found.dtype == value.dtype):
        return found
    if key in mutated:
        return torch.zeros(value.shape, dtype=value.dtype)
    one = torch.full((), 0.5 if value.is_floating_point() else 0, dtype=value.dtype)
    stand_in = one.expand(value.shape)
    return torch.nn.Parameter(stand_in, requires_grad=False) if isinstance(
        value, torch.nn.Parameter) else stand_in


def needs_stand_ins(ep: torch.export.ExportedProgram,
                    real: Mapping[str, torch.Tensor] | None = None) -> bool:
    """Whether copy_program(ep, real) would hold any stand-in."""
    real = real or {}
    return any(isinstance(v, FakeTensor) and _replacement(k, v, real) is not real.get(k)
               for d in (ep.state_dict, ep.constants) for k, v in d.items())


def copy_program(ep: torch.export.ExportedProgram,
                 real: Mapping[str, torch.Tensor] | None = None) -> torch.export.ExportedProgram:
    """A deep copy of `ep`'s graph sharing its weights; fake weights become the
    tensors of the same name in `real` or stand-ins."""
    saved = ep._state_dict, ep._constants
    ep._state_dict, ep._constants = {}, {}
    try:
        copied = copy.deepcopy(ep)
    finally:
        ep._state_dict, ep._constants = saved
    mutated = frozenset(ep.graph_signature.buffers_to_mutate.values())
    copied._state_dict = {k: _replacement(k, v, real, mutated) for k, v in saved[0].items()}
    copied._constants = {k: _replacement(k, v, real, mutated) for k, v in saved[1].items()}
    return copied
