"""Copies of programs that the partitioner may modify and export.

ExecuTorch hands partitioners a program whose weights are FakeTensors (to
save memory), which can neither be deep-copied nor exported to ONNX. The
copies here carry real stand-in weights of the same shapes and dtypes: good
for asking TensorRT what it supports, never for the engine preprocess
builds (preprocess receives the real weights).
"""
from __future__ import annotations

import copy

import torch
from torch._subclasses.fake_tensor import FakeTensor


def _stand_in(value):
    if isinstance(value, FakeTensor):
        real = torch.zeros(value.shape, dtype=value.dtype)
        if value.is_floating_point():
            real.fill_(0.5)
        return torch.nn.Parameter(real, requires_grad=False) if isinstance(
            value, torch.nn.Parameter) else real
    return value


def copy_program(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """A deep copy of `ep`, with real stand-ins for fake weights."""
    saved = ep._state_dict, ep._constants
    ep._state_dict = {k: _stand_in(v) for k, v in saved[0].items()}
    ep._constants = {k: _stand_in(v) for k, v in saved[1].items()}
    try:
        return copy.deepcopy(ep)
    finally:
        ep._state_dict, ep._constants = saved
