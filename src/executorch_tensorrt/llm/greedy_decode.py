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

A batch (a program exported with `batch_size` B > 1: a static cache of B
rows) takes a prompt of B rows of one length, `[B, S]`; each row is decoded
greedily on its own (one position per step, shared by the rows) and its tokens
are in `Generation.rows`.
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
    tokens: list[int]                       # the generated tokens (not the prompt); row 0
    logits: list[torch.Tensor] = field(default_factory=list)  # [V] ([B, V]) per token
    rows: list[list[int]] = field(default_factory=list)  # each row's tokens (rows[0] = tokens)
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
    generated tokens (and their logits). `prompt_ids`: one prompt, or `[B, S]`
    (B rows of S tokens) for a program exported with a batch of B."""
    step = as_step(method)
    prompt = torch.as_tensor(prompt_ids, dtype=torch.long)
    if prompt.dim() > 2:
        raise ValueError(f"a prompt is [S] tokens or a batch of [B, S], got shape "
                         f"{list(prompt.shape)}")
    prompt = prompt.reshape(-1 if prompt.dim() == 2 else 1, prompt.shape[-1])
    batch = prompt.shape[0]
    if prompt.shape[1] == 0 or n < 1:
        raise ValueError(f"need a non-empty prompt and n >= 1 (prompt of {prompt.shape[1]} "
                         f"tokens, n={n})")
    if limits is not None:
        _check_limits(prompt, n, start_pos, limits)
    chunk = limits.max_seq_len if limits is not None else prompt.shape[1]
    out = Generation(tokens=[], rows=[[] for _ in range(batch)])
    out.tokens = out.rows[0]
    with torch.no_grad():
        t0 = time.perf_counter()
        for first in range(0, prompt.shape[1], chunk):
            part = prompt[:, first:first + chunk].contiguous()  # a batch's slice is not
            logits = step(part, torch.arange(start_pos + first, start_pos + first + part.shape[1]))
        out.prefill_seconds = time.perf_counter() - t0
        pos = start_pos + prompt.shape[1]
        for i in range(n):
            last = logits[:, -1].detach().clone()
            chosen = torch.argmax(last, dim=-1)
            for row, token in zip(out.rows, chosen.tolist()):
                row.append(token)
            if keep_logits:
                out.logits.append(last[0] if batch == 1 else last)
            if i == n - 1:
                break
            t0 = time.perf_counter()
            logits = step(chosen.reshape(batch, 1), torch.tensor([pos]))
            out.decode_seconds.append(time.perf_counter() - t0)
            pos += 1
    return out
