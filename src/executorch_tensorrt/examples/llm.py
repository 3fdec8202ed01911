"""Small decoder-only LLMs with KV caches, random weights, no downloads.

- `CachedDecoder`: hand-written, `register_buffer` caches updated with
  `index_copy_` at `input_pos` (the form ExecuTorch's own examples use);
- `hf_tiny_llama`: transformers' Llama from a tiny config, wrapped by
  transformers' own ExecuTorch integration (`TorchExportableModuleForDecoderOnlyLM`,
  static cache).
Both export one method `forward(tokens[1, S], positions[S]) -> logits[1, S, V]`
with a dynamic S, serving prefill (S > 1) and decode (S = 1).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..llm.hf_export import hf_static_cache_wrapper


class _Layer(nn.Module):
    def __init__(self, dim: int, heads: int, max_len: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        shape = (1, heads, max_len, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))

    def forward(self, x: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.norm1(x)
        split = lambda t: t.view(b, s, self.heads, self.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
        self.k_cache.index_copy_(2, input_pos, k)
        self.v_cache.index_copy_(2, input_pos, v)
        positions = torch.arange(self.k_cache.shape[2])
        mask = positions[None, :] <= input_pos[:, None]  # [S, max_len]: causal, filled only
        scores = q @ self.k_cache.transpose(2, 3) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~mask, float("-inf"))
        attn = torch.softmax(scores, dim=-1) @ self.v_cache
        x = x + self.o(attn.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))


class CachedDecoder(nn.Module):
    """A decoder-only LM whose layers keep K/V caches as registered buffers."""

    def __init__(self, vocab: int = 96, dim: int = 32, heads: int = 4, layers: int = 2,
                 max_len: int = 48):
        super().__init__()
        self.max_len = max_len
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(_Layer(dim, heads, max_len) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, input_pos)
        return self.head(self.norm(x))


def decoder_example(max_seq: int = 16):
    """(example inputs, dynamic_shapes) for torch.export of either model."""
    seq = torch.export.Dim("seq", min=1, max=max_seq)
    return ((torch.tensor([[1, 2, 3]]), torch.arange(3)), ({1: seq}, {0: seq}))


def export_cached_decoder(model: CachedDecoder, max_seq: int = 16) -> torch.export.ExportedProgram:
    args, dynamic = decoder_example(max_seq)
    return torch.export.export(model, args, dynamic_shapes=dynamic)


def hf_tiny_llama(max_cache_len: int = 48, seed: int = 0, batch_size: int = 1):
    """transformers' ExecuTorch wrapper (static cache of `batch_size` rows)
    around a tiny random Llama; export it with llm.hf_export.export_hf."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64, use_cache=True)
    torch.manual_seed(seed)
    return hf_static_cache_wrapper(LlamaForCausalLM(cfg).eval(), max_cache_len, batch_size)
