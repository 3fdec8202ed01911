"""What preprocess's state lifting produces, shared by its two steps.

`owned.py` lifts delegate-owned buffers into graph inputs/outputs and
`kv_update.py` rewrites their cache writes; both read these records, so they
live here, below both (neither module imports the other's definitions).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class KvUpdate:
    axis: int                 # the sequence axis of the cache
    positions_input: int      # index of the positions among the lifted user inputs
    update_node: str          # the index_put edge node
    scatter: bool = False     # can become TensorScatter (in place)


@dataclass
class LiftedState:
    fqn: str                 # the buffer's name in the module ("key_cache_0")
    placeholder: str         # its placeholder in the partition's graph
    init: torch.Tensor       # initial value
    kv_update: KvUpdate | None = None  # set when the update is a contiguous cache write
    kept_write: bool = False  # written on a first step only, in place (kept_write.py)


@dataclass
class LiftedProgram:
    program: torch.export.ExportedProgram  # state as user inputs/outputs
    states: list[LiftedState] = field(default_factory=list)
    user_inputs: int = 0       # user inputs of the original program
    user_outputs: int = 0
    state_input_positions: list[int] = field(default_factory=list)  # in the lifted inputs
    state_output_positions: list[int] = field(default_factory=list)
    # Caches ExecuTorch owns (state="caller"): (user input, user output) pairs the
    # engine updates in place, written as Torch-TensorRT's aliased_io (TR02).
    aliases: list[tuple[int, int]] = field(default_factory=list)
