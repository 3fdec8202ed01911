"""Greedy decoding over a program exported as `forward(tokens[1, S], positions[S])
-> logits[1, S, V]` (one method with a dynamic S: prefill, then one token per call).

Works with an ExecuTorch `Method` (anything with `.execute(list)`) or any
callable `(tokens, positions) -> logits`, e.g. the eager module, so the same
loop gives the reference. The caches live in the program (for TensorRT
partitions: in the delegate); call `executorch_tensorrt.reset_state()` before
a new prompt, or load the method again.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class Generation:
    tokens: list[int]                       # the generated tokens (not the prompt)
    logits: list[torch.Tensor] = field(default_factory=list)  # [V] per generated token
    prefill_seconds: float = 0.0
    decode_seconds: list[float] = field(default_factory=list)  # one per decode call

    @property
    def seconds_per_token(self) -> float:
        return sum(self.decode_seconds) / max(1, len(self.decode_seconds))


def as_step(method) -> Step:
    """A `(tokens, positions) -> logits` callable over a Method or a callable."""
    if hasattr(method, "execute"):
        return lambda tokens, positions: method.execute([tokens, positions])[0]
    return method


def greedy_decode(method, prompt_ids: Sequence[int] | torch.Tensor, n: int, *,
                  start_pos: int = 0, keep_logits: bool = True) -> Generation:
    """Feeds the prompt in one call, then `n - 1` single tokens, picking the
    argmax each time; returns the n generated tokens (and their logits)."""
    step = as_step(method)
    prompt = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(1, -1)
    if prompt.shape[1] == 0 or n < 1:
        raise ValueError(f"need a non-empty prompt and n >= 1 (prompt of {prompt.shape[1]} "
                         f"tokens, n={n})")
    out = Generation(tokens=[])
    with torch.no_grad():
        t0 = time.perf_counter()
        logits = step(prompt, torch.arange(start_pos, start_pos + prompt.shape[1]))
        out.prefill_seconds = time.perf_counter() - t0
        pos = start_pos + prompt.shape[1]
        for i in range(n):
            last = logits[0, -1].detach().clone()
            token = int(torch.argmax(last))
            out.tokens.append(token)
            if keep_logits:
                out.logits.append(last)
            if i == n - 1:
                break
            t0 = time.perf_counter()
            logits = step(torch.tensor([[token]]), torch.tensor([pos]))
            out.decode_seconds.append(time.perf_counter() - t0)
            pos += 1
    return out
