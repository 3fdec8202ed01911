"""Cross-attention keys and values kept as state the TensorRT partition owns.

optimum-executorch's speech class (ExecuTorchModelForSpeechSeq2Seq) calls
`text_decoder(decoder_input_ids, encoder_hidden_states, cache_position)` on
every step, with the same encoder output for one utterance. The keys and
values projected from it depend on nothing else, so the decoder step keeps
them in buffers, one key and one value buffer per decoder layer:

    buffer[:, :, :S] = where(cache_position[0] == 0, project(hidden), buffer[:, :, :S])

The buffers are mutated, so the partition owns them like the self-attention
cache (aot/state/). The partition's export (aot/state/kept_write.py and the
ONNX rule `branch_kept_writes` in aot/onnx/decoder_fusions.py) turns each
write into a TensorScatter at position 0 of an update that one ONNX If on
the predicate gives: the projections at position 0, an empty tensor later,
so the buffer is updated in place and a later step copies nothing. Where
that form is not taken, `branch_first_step` turns the Wheres into the same
If and the buffers stay a functional state.

The projections also run when nothing is kept yet: a flag (state
`cross_attention_kept`, 0 after load or `reset_state`) says whether a call
has stored them, so a first call at a position above 0 projects the
`encoder_hidden_states` it is given instead of attending to zeros. Later
calls at positions above 0 read what was kept and ignore the encoder output
they are given: each utterance starts at position 0, as optimum's classes do.
"""
from __future__ import annotations

import functools

import torch
from torch import nn

_KEY, _VALUE = "cross_key_{}", "cross_value_{}"


def add_cross_attention_state(module: nn.Module, layers: int, heads: int, length: int,
                              head_dim: int, dtype: torch.dtype) -> None:
    """Registers the zero-initialized key and value buffers [1, heads, length,
    head_dim] of `layers` decoder layers on `module` (what torch.export lifts
    as mutated buffers). `length`: the most encoder positions a call passes."""
    for i in range(layers):
        for name in (_KEY, _VALUE):
            module.register_buffer(name.format(i), torch.zeros(1, heads, length, head_dim,
                                                               dtype=dtype), persistent=False)
    module.register_buffer("cross_attention_kept", torch.zeros((), dtype=torch.float32),
                           persistent=False)
    module.cross_attention_layers = layers
    module.cross_attention_cache_class = _kept_cache_class()  # outside the trace


def cross_attention_cache(module: nn.Module, cache_position: torch.Tensor):
    """The cross-attention half of the EncoderDecoderCache for one decoder call
    of `module` (which add_cross_attention_state prepared)."""
    layers = [(getattr(module, _KEY.format(i)), getattr(module, _VALUE.format(i)))
              for i in range(module.cross_attention_layers)]
    kept = module.cross_attention_kept
    project = (cache_position[0] == 0) | (kept == 0)
    # max(kept, 1), not a constant 1: a state whose new value is a constant
    # would be an initializer, which ONNX cannot name as the graph's output
    kept.copy_(torch.maximum(kept, torch.ones_like(kept)))
    return module.cross_attention_cache_class(layers, project)


def _keep(buffer: torch.Tensor, fresh: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    """The first `fresh.shape[2]` positions of `buffer`: `fresh` (stored) on the
    first step, the stored values otherwise."""
    length = fresh.shape[2]
    kept = torch.where(first, fresh, buffer[:, :, :length])
    # slice_scatter, not a copy into the slice: a view of a dynamic length
    # makes torch.export guard against the buffer's full length
    buffer.copy_(buffer.slice_scatter(kept, dim=2, start=0, end=length))
    return kept


@functools.cache
def _kept_cache_class():
    """A transformers Cache class whose update keeps the keys and values in the
    step module's buffers. Made once, outside the trace (dynamo cannot define
    classes)."""
    from transformers.cache_utils import DynamicCache

    class CrossAttentionKept(DynamicCache):
        def __init__(self, layers, first):
            super().__init__()
            self._kept, self._first = layers, first

        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            keys, values = self._kept[layer_idx]
            return _keep(keys, key_states, self._first), _keep(values, value_states, self._first)

        def get_seq_length(self, layer_idx: int = 0):
            return 0  # transformers then projects and calls update every step

    return CrossAttentionKept


__all__ = ["add_cross_attention_state", "cross_attention_cache"]
