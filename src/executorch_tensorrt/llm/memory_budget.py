"""Will an LLM program fit a GPU's memory? `llm.export(memory_budget=...)`
(`llm-export --memory-budget 8GB`) answers before anything is exported:
weights (the decoder's tensors as they will be stored, after quantization),
KV cache (layers x 2 x kv_heads x head_dim x positions x element size) and
an activation estimate, against the budget. It chooses the largest
max_context_len that fits, or refuses with each part and the remedies.

The activation term is an estimate (TensorRT decides its scratch memory at
build time): the builder's real figure is recorded in the program and the
memory report after export shows it (program/memory_report.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from ..errors import ExportError
from ..program.memory_report import size_text

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*")
# The activation estimate, fitted to TensorRT-RTX's builder figures for tiny
# to small decoders (docs/llm.md, "Memory"): about 7.8 MiB whatever the
# model, plus about the float32 bytes of the largest values a call holds
# (logits, MLP, attention scores), float16 programs included. The estimate
# takes 8 MiB and twice those bytes, so it lies at or above those figures.
ACTIVATION_FIXED = 8 << 20
ACTIVATION_FACTOR = 2
# A context chosen below its ceiling is rounded down to a multiple of this.
CONTEXT_STEP = 64


class MemoryBudgetError(ExportError):
    """The model cannot fit the memory budget with any context length."""


def parse_size(text) -> int:
    """Bytes in "8GB" (10^9), "7.5GiB" (2^30), "512MiB", "4096" (bytes)."""
    if isinstance(text, bool):
        raise ValueError(f"memory budget {text!r} is not a size")
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE.fullmatch(str(text))
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _UNITS:
            raise ValueError(f"memory budget {text!r} is not a size: give a number and a unit "
                             "(B, KB, MB, GB, TB = powers of 1000; KiB, MiB, GiB, TiB = powers "
                             "of 1024), e.g. '8GB', '7.5GiB', '512MiB'")
        value = int(float(m.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ValueError(f"memory budget {text!r} must be more than 0 bytes")
    return value


@dataclass(frozen=True)
class MemoryPlan:
    """The parts of a program's memory at `max_context_len` positions."""

    budget: int
    weights: int
    kv_per_position: int          # bytes one position costs over every layer (K and V)
    activation_fixed: int
    activation_per_position: int
    max_seq_len: int
    max_context_len: int

    def kv_bytes(self, positions: int | None = None) -> int:
        return self.kv_per_position * (positions or self.max_context_len)

    def activation_bytes(self, positions: int | None = None) -> int:
        return self.activation_fixed + self.activation_per_position * (
            positions or self.max_context_len)

    def total(self, positions: int | None = None) -> int:
        return self.weights + self.kv_bytes(positions) + self.activation_bytes(positions)

    def describe(self) -> str:
        n = self.max_context_len
        return (f"memory budget {size_text(self.budget)}: weights {size_text(self.weights)} + "
                f"KV cache {size_text(self.kv_bytes())} ({n} positions) + activation estimate "
                f"{size_text(self.activation_bytes())} = {size_text(self.total())}")


def stored_weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the module's parameters and saved buffers, each storage once
    (tied embeddings count once), as quantization left them."""
    seen, total = set(), 0
    for t in model.state_dict(keep_vars=True).values():
        if not isinstance(t, torch.Tensor):
            continue
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), t.numel(), t.dtype)
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


def _int(config, *names, default=None):
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return int(value)
    return default


def plan_memory(model: torch.nn.Module, config, budget, *, max_seq_len: int,
                max_context_len: int | None, batch_size: int, dtype: torch.dtype,
                quantize: str | None, kv_cache_dtype: str | None = None) -> MemoryPlan:
    """The largest max_context_len (at most `max_context_len`, else the
    model's positions) whose weights + KV cache + activation estimate fit
    `budget`; MemoryBudgetError when not even max_seq_len positions fit."""
    budget = parse_size(budget)
    layers = _int(config, "num_hidden_layers", "n_layer")
    heads = _int(config, "num_attention_heads", "n_head")
    hidden = _int(config, "hidden_size", "n_embd")
    kv_heads = _int(config, "num_key_value_heads", default=heads)
    head_dim = _int(config, "head_dim", default=hidden // heads if hidden and heads else None)
    if None in (layers, heads, hidden, head_dim):
        raise ValueError(f"memory_budget: the {type(config).__name__} names no layer count, "
                         "attention heads or hidden size; export with max_context_len instead")
    size = torch.empty((), dtype=dtype).element_size()
    vocab = _int(config, "vocab_size", default=0)
    inter = _int(config, "intermediate_size", "n_inner", default=4 * hidden)
    tokens = batch_size * max_seq_len
    # Per call, in float32: logits, the MLP's two projections, a few
    # hidden-sized values, and the attention scores (heads x tokens x positions).
    fixed = ACTIVATION_FIXED + ACTIVATION_FACTOR * tokens * 4 * (vocab + 2 * inter + 4 * hidden)
    per_position = ACTIVATION_FACTOR * tokens * heads * 4
    kv_size = 1 if kv_cache_dtype is not None else size  # float8_e4m3fn: one byte
    kv = layers * 2 * kv_heads * head_dim * kv_size * batch_size
    ceiling = max_context_len or _int(config, "max_position_embeddings", "n_positions")
    if ceiling is None:
        raise ValueError("memory_budget: the model's config names no max_position_embeddings; "
                         "give max_context_len as the ceiling")
    weights = stored_weight_bytes(model)
    fits = (budget - weights - fixed) // (kv + per_position)
    if fits < max_seq_len:
        raise MemoryBudgetError(_refusal(MemoryPlan(budget, weights, kv, fixed, per_position,
                                                    max_seq_len, max_seq_len), quantize,
                                         kv_cache_dtype))
    chosen = min(ceiling, fits)
    if chosen < ceiling and chosen >= 2 * CONTEXT_STEP:
        chosen = max(chosen - chosen % CONTEXT_STEP, max_seq_len)
    return MemoryPlan(budget, weights, kv, fixed, per_position, max_seq_len, chosen)


def _refusal(plan: MemoryPlan, quantize: str | None, kv_cache_dtype: str | None = None) -> str:
    n = plan.max_seq_len
    over = plan.total(n) - plan.budget
    remedies = []
    if quantize != "int4_weight_only":
        remedies.append("quantize='int4_weight_only' (--quantize int4_weight_only): weights "
                        "about a quarter of float16's bytes")
    remedies.append(f"a smaller max_seq_len (activation grows with the tokens per call: "
                    f"{size_text(plan.activation_bytes(n))} at {n})")
    remedies.append("a float16 or bfloat16 dtype if the model is float32 (halves weights and "
                    "KV cache)")
    if kv_cache_dtype is None:
        remedies.append("kv_cache_dtype='float8_e4m3fn' (--kv-cache-dtype fp8; SM89+ targets): "
                        "a KV cache of one byte per element")
    remedies.append("a smaller model")
    return (f"the model does not fit the memory budget of {size_text(plan.budget)} "
            f"({plan.budget} bytes) even with the shortest context ({n} positions = "
            f"max_seq_len): weights {size_text(plan.weights)} + KV cache "
            f"{size_text(plan.kv_bytes(n))} ({plan.kv_per_position} bytes per position) + "
            f"activation estimate {size_text(plan.activation_bytes(n))} = "
            f"{size_text(plan.total(n))}, {size_text(over)} over. Nothing was exported. "
            "Remedies: " + "; ".join(remedies))
