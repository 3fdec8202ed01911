"""Whisper (transformers' WhisperForConditionalGeneration) as one ExecuTorch
program of the two methods optimum-executorch's `ExecuTorchModelForSpeechSeq2Seq`
runs:

- `encoder(input_features float[1, n_mels, frames]) -> hidden[1, frames / 2, d]`
  (frames fixed: Whisper's positions cover exactly `2 * max_source_positions`);
- `text_decoder(decoder_input_ids int64[1, 1], encoder_hidden_states, cache_position
  int64[1]) -> logits[1, 1, V]`, one token per call over a static self-attention
  cache of `max_cache_len` positions that the TensorRT partition owns (aot/state/).

Cross-attention keys/values are projected from `encoder_hidden_states` at
position 0 only and kept as partition-owned state (llm/cross_attention.py):
later steps read them and ignore the encoder output optimum's class passes
again. The cost per step is in docs/speech.md.

optimum's own decoder wrapper builds transformers' StaticCache for the
encoder's layer count and reads positions from the cache; ours sizes the
cache by the decoder's layers and passes positions explicitly.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..aot.export import ExportResult, export_program
from ..errors import ExportError
from ..tensorrt.engine_builder import Progress, stderr_progress
from .cross_attention import add_cross_attention_state, cross_attention_cache
from .multimodal_inputs import AudioSpec


class WhisperDecoderStep(nn.Module):
    """`(decoder_input_ids, encoder_hidden_states, cache_position) -> logits`
    over a static self-attention cache and the cross-attention keys/values,
    both registered as buffers (what the partitioner hands to TensorRT to own)."""

    def __init__(self, model, max_cache_len: int):
        super().__init__()
        from transformers.cache_utils import StaticCache

        self.decoder = model.get_decoder()
        self.proj_out = model.proj_out
        # WhisperConfig's num_hidden_layers is the encoder's; the cache is the decoder's.
        config = copy.deepcopy(model.config)
        config.num_hidden_layers = config.decoder_layers
        heads = config.decoder_attention_heads
        add_cross_attention_state(self, config.decoder_layers, heads,
                                  int(config.max_source_positions), config.d_model // heads,
                                  model.dtype)
        self.cache = StaticCache(config=config, max_cache_len=max_cache_len)
        self.cache.early_initialization(1, heads, config.d_model // heads, model.dtype,
                                        model.device)
        for i, layer in enumerate(self.cache.layers):
            self.register_buffer(f"key_cache_{i}", layer.keys, persistent=False)
            self.register_buffer(f"value_cache_{i}", layer.values, persistent=False)
            self.register_buffer(f"cumulative_length_{i}", layer.cumulative_length,
                                 persistent=False)

    def forward(self, decoder_input_ids, encoder_hidden_states, cache_position):
        from transformers.cache_utils import EncoderDecoderCache

        for layer in self.cache.layers:  # writes start at this call's position
            layer.cumulative_length.copy_(cache_position[0])
        cache = EncoderDecoderCache(self.cache, cross_attention_cache(self, cache_position))
        out = self.decoder(input_ids=decoder_input_ids, encoder_hidden_states=encoder_hidden_states,
                           past_key_values=cache, position_ids=cache_position.unsqueeze(0),
                           use_cache=True)
        return self.proj_out(out.last_hidden_state)


class WhisperEncoder(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.encoder = model.get_encoder()

    def forward(self, input_features):
        return self.encoder(input_features).last_hidden_state


@dataclass(frozen=True)
class SpeechLimits:
    """What the program takes: `audio` (features [1, n_mels, frames]; the
    encoder-decoder takes no context positions for them), up to
    `max_cache_len` decoder positions."""

    audio: AudioSpec
    max_cache_len: int

    def constant_methods(self) -> dict:
        return {**self.audio.constant_methods(), "get_max_context_len": self.max_cache_len}


@dataclass
class SpeechExportResult:
    path: Path
    data_paths: list[Path]
    limits: SpeechLimits
    export: ExportResult


def whisper_limits(model, max_cache_len: int) -> SpeechLimits:
    config = model.config
    limit = int(config.max_target_positions)
    if not 1 <= max_cache_len <= limit:
        raise ValueError(f"max_cache_len={max_cache_len} is outside the decoder's 1..{limit} "
                         "positions (config max_target_positions); use at most "
                         f"{limit}")
    # Whisper's two convolutions (stride 1, then 2) map frames to positions.
    return SpeechLimits(AudioSpec(int(config.num_mel_bins), 2 * int(config.max_source_positions),
                                  model.dtype), max_cache_len)


def whisper_programs(model, limits: SpeechLimits) -> dict[str, torch.export.ExportedProgram]:
    """The encoder and the one-token decoder step, traced with torch.export."""
    features = torch.zeros(1, limits.audio.n_mels, limits.audio.frames, dtype=limits.audio.dtype)
    with torch.no_grad():
        encoder = torch.export.export(WhisperEncoder(model).eval(), (features,), strict=True)
        hidden = encoder.module()(features)
        step = WhisperDecoderStep(model, limits.max_cache_len).eval()
        start = int(model.config.decoder_start_token_id or 0)
        decoder = torch.export.export(
            step, (torch.tensor([[start]]), hidden, torch.tensor([0])), strict=True)
    return {"encoder": encoder, "text_decoder": decoder}


def export_whisper(model, *, max_cache_len: int, output: str | Path,
                   constant_methods: dict | None = None,
                   progress: Progress | None = stderr_progress,
                   **options) -> SpeechExportResult:
    """Exports a WhisperForConditionalGeneration (in eval mode, in its dtype)
    as the program `ExecuTorchModelForSpeechSeq2Seq` loads. Weights are in the
    .pte (optimum's class loads the .pte alone) unless external_weights=True.
    `constant_methods`: more name -> value methods (optimum's metadata); the
    limits (`get_audio_n_mels`, `get_audio_frames`, `get_max_context_len`) win.
    """
    from .exporter import refuse_kv_cache_dtype

    refuse_kv_cache_dtype(options, "export_whisper")
    from transformers import WhisperForConditionalGeneration

    if not isinstance(model, WhisperForConditionalGeneration):
        raise TypeError(f"export_whisper takes a transformers WhisperForConditionalGeneration, "
                        f"got {type(model).__name__}")
    model.eval()
    limits = whisper_limits(model, max_cache_len)
    if progress:
        progress(f"{type(model).__name__}: features [1, {limits.audio.n_mels}, "
                 f"{limits.audio.frames}], "
                 f"decoder cache of {max_cache_len} positions, dtype {model.dtype}")
        progress("torch.export of the encoder and the decoder step...")
    try:
        programs = whisper_programs(model, limits)
    except Exception as e:  # noqa: BLE001 - any tracing failure, with its model named
        raise ExportError(f"torch.export of {type(model).__name__}'s encoder or decoder step "
                          f"failed: {type(e).__name__}: {e}") from e
    result = export_program(programs, None, output, progress=progress,
                            constant_methods={**(constant_methods or {}),
                                              **limits.constant_methods()},
                            write_expected_file=False, **options)
    return SpeechExportResult(result.path, result.data_paths, limits, result)


__all__ = ["export_whisper", "whisper_programs", "whisper_limits", "SpeechLimits",
           "SpeechExportResult", "WhisperDecoderStep"]
