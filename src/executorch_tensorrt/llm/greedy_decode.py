"""Greedy decoding over a program exported as `forward(tokens[1, S], positions[S])
-> logits[1, S, V]` (one method with a dynamic S: prefill, then one token per call).

Works with an ExecuTorch `Method` (anything with `.execute(list)`) or any
callable `(tokens, positions) -> logits`, e.g. the eager module, so the same
loop gives the reference. The caches live in the program (for TensorRT
partitions: in the delegate); call `executorch_tensorrt.reset_state()` before
a new prompt, or load the method again.

With `limits` (llm.metadata.LLMMetadata, e.g. `read_metadata(program)` of a
program written by llm.export) a prompt longer than `max_seq_len` goes in in
chunks of at most that many tokens (as ExecuTorch's runner does), and a prompt
that with the tokens to generate does not fit in `max_context_len`, or a token
id outside the vocabulary, is refused before anything runs.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from .metadata import LLMMetadata

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


def _check_limits(prompt: torch.Tensor, n: int, start_pos: int, limits: LLMMetadata) -> None:
    end = start_pos + prompt.shape[1] + n - 1  # the last token generated is never fed back
    if end > limits.max_context_len:
        raise ValueError(
            f"a prompt of {prompt.shape[1]} tokens from position {start_pos} plus {n} new "
            f"tokens needs {end} cache positions; the program's max_context_len is "
            f"{limits.max_context_len}. Shorten the prompt or generate fewer tokens.")
    bad = prompt[(prompt < 0) | (prompt >= limits.vocab_size)]
    if bad.numel():
        raise ValueError(f"token id {int(bad[0])} is outside the vocabulary: ids are 0.."
                         f"{limits.vocab_size - 1} (get_vocab_size = {limits.vocab_size})")


def greedy_decode(method, prompt_ids: Sequence[int] | torch.Tensor, n: int, *,
                  start_pos: int = 0, keep_logits: bool = True,
                  limits: LLMMetadata | None = None) -> Generation:
    """Feeds the prompt (in one call, or in chunks of `limits.max_seq_len`),
    then `n - 1` single tokens, picking the argmax each time; returns the n
    generated tokens (and their logits)."""
    step = as_step(method)
    prompt = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(1, -1)
    if prompt.shape[1] == 0 or n < 1:
        raise ValueError(f"need a non-empty prompt and n >= 1 (prompt of {prompt.shape[1]} "
                         f"tokens, n={n})")
    if limits is not None:
        _check_limits(prompt, n, start_pos, limits)
    chunk = limits.max_seq_len if limits is not None else prompt.shape[1]
    out = Generation(tokens=[])
    with torch.no_grad():
        t0 = time.perf_counter()
        for first in range(0, prompt.shape[1], chunk):
            part = prompt[:, first:first + chunk]
            logits = step(part, torch.arange(start_pos + first, start_pos + first + part.shape[1]))
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
