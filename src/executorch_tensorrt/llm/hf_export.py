"""transformers' causal LMs as ExecuTorch programs: transformers' own
ExecuTorch wrapper over a static cache (`hf_static_cache_wrapper`), the eager
decode step over a fresh cache (`hf_decode_step`, the reference `llm.export`
checks against), and the strict torch.export of the wrapper with a dynamic
sequence length (`export_hf`): one method `forward(tokens[B, S],
positions[S]) -> logits[B, S, V]` serving prefill (S > 1) and decode (S = 1).
For multimodal programs the same wrapper fed embeddings (`export_hf_embeds`:
`text_decoder(embeds[1, S, D], positions[S])`, the method ExecuTorch's
MultimodalRunner calls) and the `token_embedding` method
(`export_token_embedding`).
"""
from __future__ import annotations

import importlib
from contextlib import contextmanager

import torch
from torch import nn

from ..quantization.registry import is_read_only


def hf_static_cache_wrapper(model, max_cache_len: int, batch_size: int = 1):
    """transformers' ExecuTorch wrapper around a causal LM: a static cache of
    `batch_size` rows and `max_cache_len` positions (sliding-window layers get
    transformers' hybrid cache). Sets the model's generation config for it."""
    from transformers import GenerationConfig
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    model.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static",
        cache_config={"batch_size": batch_size, "max_cache_len": max_cache_len})
    return TorchExportableModuleForDecoderOnlyLM(model, batch_size=batch_size,
                                                 max_cache_len=max_cache_len)


def hf_decode_step(model, max_cache_len: int, batch_size: int = 1, cache_dtype=None,
                   kv_cache_dtype: str | None = None):
    """`(tokens, positions) -> logits` of a causal LM over a fresh static
    cache (hf_static_cache_wrapper), in `cache_dtype` where given:
    transformers makes it in the model's dtype. `kv_cache_dtype`
    "float8_e4m3fn": every key and value is rounded to fp8 as it is written
    (what an fp8 cache holds, aot/state/fp8_cache.py)."""
    wrapper = hf_static_cache_wrapper(model, max_cache_len, batch_size)
    if cache_dtype is not None:
        for buffer in wrapper.model.buffers(recurse=False):
            if buffer.is_floating_point():
                buffer.data = buffer.data.to(cache_dtype)  # the cache layers hold these objects
    if kv_cache_dtype is not None:
        for layer in wrapper.model.static_cache.layers:
            layer.update = _rounding_writes(layer.update)
    return lambda tokens, positions: wrapper.model(input_ids=tokens, cache_position=positions)


#: e4m3's largest finite value: the fp8 cache's QuantizeLinear saturates there.
FP8_E4M3_MAX = 448.0


def round_to_fp8(x: torch.Tensor) -> torch.Tensor:
    """`x` rounded to float8_e4m3fn (scale 1, nearest even, saturating), in its dtype."""
    return x.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn).to(x.dtype)


def _rounding_writes(update):
    def write(key_states, value_states, *args, **kwargs):
        return update(round_to_fp8(key_states), round_to_fp8(value_states), *args, **kwargs)
    return write


def hf_example_inputs(max_seq: int, batch_size: int = 1) -> tuple:
    """(input_ids, cache_position) export_hf traces with: a few tokens, inside
    the sequence Dim's range."""
    example = min(3, max_seq)
    return torch.tensor([list(range(1, example + 1))] * batch_size), torch.arange(example)


@contextmanager
def _parameters_not_cloned_by_dynamo():
    """Strict torch.export (dynamo) keeps a clone of every real tensor it
    reads, for the rare trace that needs a concrete value: all the weights
    twice over (a 2-layer 8B-shaped bf16 decoder: 3.3 GB -> 8.1 GB peak).
    Inside this block parameters are kept by reference instead: a forward
    never writes its weights, so the reference holds the same values; so are
    buffers marked read-only (a checkpoint's int4 codes and scales:
    quantization.registry.mark_read_only). Other
    tensors (the KV cache buffers, which the trace writes) are cloned as
    before. Where torch has no such hook the export runs as it would."""
    builder = importlib.import_module("torch._dynamo.variables.builder")
    clone = getattr(builder, "_clone_input", None)
    if clone is None:
        yield
        return

    def keep_parameters(value, fake_mode):
        if isinstance(value, nn.Parameter) or is_read_only(value):
            return value
        return clone(value, fake_mode)

    builder._clone_input = keep_parameters
    try:
        yield
    finally:
        builder._clone_input = clone


def export_hf(wrapper, max_seq: int = 16, batch_size: int = 1) -> torch.export.ExportedProgram:
    """`batch_size`: the wrapper's (its static cache's rows)."""
    seq = torch.export.Dim("seq", min=1, max=max_seq)
    input_ids, cache_position = hf_example_inputs(max_seq, batch_size)
    with _parameters_not_cloned_by_dynamo():
        return wrapper.export(input_ids=input_ids, cache_position=cache_position,
                              dynamic_shapes={"input_ids": {1: seq}, "cache_position": {0: seq}},
                              strict=True)


class TokenEmbedding(nn.Module):
    """`tokens[B, S] -> embeddings[B, S, D]`: a multimodal program's
    `token_embedding` method (ExecuTorch's MultimodalRunner embeds text
    tokens with it, then calls `text_decoder` on the embeddings)."""

    def __init__(self, embedding: nn.Module):
        super().__init__()
        self.embedding = embedding

    def forward(self, tokens):
        return self.embedding(tokens)


def export_token_embedding(embedding: nn.Module, max_seq: int) -> torch.export.ExportedProgram:
    seq = torch.export.Dim("seq", min=1, max=max_seq)
    tokens, _ = hf_example_inputs(max_seq)
    with _parameters_not_cloned_by_dynamo():
        return torch.export.export(TokenEmbedding(embedding).eval(), (tokens,),
                                   dynamic_shapes=({1: seq},), strict=True)


def hf_embeds_example_inputs(max_seq: int, hidden_size: int, dtype: torch.dtype) -> tuple:
    """(inputs_embeds, cache_position) export_hf_embeds traces with."""
    example = min(3, max_seq)
    torch.manual_seed(0)
    return torch.randn(1, example, hidden_size).to(dtype), torch.arange(example)


def export_hf_embeds(wrapper, max_seq: int, hidden_size: int,
                     dtype: torch.dtype) -> torch.export.ExportedProgram:
    """`wrapper` (hf_static_cache_wrapper, batch 1) exported as
    `(inputs_embeds[1, S, hidden_size], cache_position[S]) -> logits`."""
    seq = torch.export.Dim("seq", min=1, max=max_seq)
    embeds, cache_position = hf_embeds_example_inputs(max_seq, hidden_size, dtype)
    with _parameters_not_cloned_by_dynamo():
        return wrapper.export(inputs_embeds=embeds, cache_position=cache_position,
                              dynamic_shapes={"inputs_embeds": {1: seq},
                                              "cache_position": {0: seq}},
                              strict=True)
