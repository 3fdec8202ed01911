"""Audio-language models (transformers' Voxtral: a Whisper-style audio tower,
a projector, a causal LM) as one program for ExecuTorch's MultimodalRunner
(`executorch.extension.llm.runner.MultimodalRunner`, C++ `MultimodalRunner`).

What the runner calls (ExecuTorch 1.5.1, extension/llm/runner):
- `audio_encoder(features float[1, n_mels, frames]) -> embeddings[1, N, D]`
  for a `make_audio_input` (its dtype must be the method's, or float32 to a
  bfloat16 method); the N embeddings then go to `text_decoder` in ONE call, so
  N <= max_seq_len (with `max_audio_chunks`, [chunks, n_mels, frames] ->
  [1, chunks * N, D], as optimum's class passes a processor's chunks);
- `token_embedding(tokens int64[1, S]) -> embeddings[1, S, D]`;
- `text_decoder(embeddings[1, S, D], positions int64[S]) -> logits[1, S, V]`;
- the constant methods TextLLMRunner reads too (llm/metadata.py).

The audio encoder is this module's; token_embedding and text_decoder are the
causal LM's own export (llm/hf_export.py, the decoder's KV caches owned by
TensorRT), shared with other multimodal programs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import torch
from torch import nn

from ..aot.export import ExportResult, export_program
from ..errors import ExportError
from ..tensorrt.engine_builder import Progress, stderr_progress
from .mel_features import MelFeatureSpec
from .multimodal_inputs import AudioSpec
from .exporter import DTYPES, _check_arguments, in_dtype, refuse_kv_cache_dtype
from .hf_export import (export_hf_embeds, export_token_embedding, hf_example_inputs,
                        hf_static_cache_wrapper)
from .metadata import LLMMetadata


class AudioEncoder(nn.Module):
    """`features[1, n_mels, frames] -> embeddings[1, N, D]`: the model's own
    `get_audio_features` (audio tower + projector) with the runner's batch."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_features):
        return self.model.get_audio_features(input_features).pooler_output.unsqueeze(0)


def audio_spec(model) -> AudioSpec:
    """The encoder's fixed input and the tokens it makes, from the model's
    configs (Whisper-style: two frames per position, then the projector
    groups `intermediate_size / hidden_size` positions into one token)."""
    audio = model.config.audio_config
    positions = int(audio.max_source_positions)
    group = int(audio.intermediate_size) // int(audio.hidden_size)
    return AudioSpec(int(audio.num_mel_bins), 2 * positions, model.dtype, positions // group)


def causal_lm_of(model) -> nn.Module:
    """The audio model's language model with its head as one transformers
    causal LM (built on the meta device, then given the model's own modules:
    no weight is copied), for hf_export's static-cache wrapper."""
    import transformers

    text_config = model.config.get_text_config()
    with torch.device("meta"):
        lm = transformers.AutoModelForCausalLM.from_config(text_config)
    lm.model = model.model.language_model
    lm.lm_head = model.lm_head
    return lm.eval()


@dataclass
class AudioLLMExportResult:
    path: Path
    data_paths: list[Path]
    metadata: LLMMetadata
    audio: AudioSpec
    export: ExportResult


def feature_spec(spec: AudioSpec, feature_extractor=None) -> MelFeatureSpec:
    """The log-mel parameters `generate` turns a .wav into features with:
    the model's feature extractor (a WhisperFeatureExtractor, or its
    preprocessor_config.json as a dict), else WhisperFeatureExtractor's
    defaults (16 kHz, n_fft 400, hop 160) with the encoder's mel bins and a
    chunk of its frames. Refused when they do not make the encoder's input."""
    if feature_extractor is None:
        hop = 160
        return MelFeatureSpec(16000, 400, hop, spec.n_mels, spec.frames * hop)
    config = feature_extractor if isinstance(feature_extractor, Mapping) else \
        feature_extractor.to_dict()
    mel = MelFeatureSpec.from_config(config)
    if (mel.n_mels, mel.chunk_frames) != (spec.n_mels, spec.frames):
        raise ValueError(
            f"the feature extractor makes [{mel.n_mels}, {mel.chunk_frames}] features per "
            f"chunk ({mel.chunk_samples} samples / hop_length {mel.hop_length}); the audio "
            f"encoder takes [{spec.n_mels}, {spec.frames}]: give the model's own feature "
            "extractor (feature_size, hop_length and chunk_length to match)")
    return mel


def audio_llm_programs(model, spec: AudioSpec, max_seq_len: int, max_context_len: int,
                       max_audio_chunks: int = 1) -> dict[str, torch.export.ExportedProgram]:
    lm = causal_lm_of(model)
    hidden = int(model.config.get_text_config().hidden_size)
    # Several chunks (a processor's [chunks, n_mels, frames] for audio longer
    # than one window) become one run of chunks * tokens embeddings.
    chunks = min(2, max_audio_chunks)
    features = torch.zeros(chunks, spec.n_mels, spec.frames, dtype=spec.dtype)
    dynamic = ({0: torch.export.Dim("audio_chunks", min=1, max=max_audio_chunks)},) \
        if max_audio_chunks > 1 else None
    with torch.no_grad():
        encoder = torch.export.export(AudioEncoder(model).eval(), (features,),
                                      dynamic_shapes=dynamic, strict=True)
        embedding = export_token_embedding(lm.get_input_embeddings(), max_seq_len)
        decoder = export_hf_embeds(hf_static_cache_wrapper(lm, max_context_len), max_seq_len,
                                   hidden, spec.dtype)
    return {"audio_encoder": encoder, "token_embedding": embedding, "text_decoder": decoder}


def export_audio_llm(model, *, max_seq_len: int, max_context_len: int, output: str | Path,
                     dtype: str = "float32", bos_id: int | None = None, eos_ids=None,
                     constant_methods: dict | None = None, max_audio_chunks: int = 1,
                     feature_extractor=None, progress: Progress | None = stderr_progress,
                     **options) -> AudioLLMExportResult:
    """Exports a transformers audio-language model (VoxtralForConditionalGeneration)
    for MultimodalRunner. `max_seq_len`: most embeddings per text_decoder call,
    at least the tokens one audio input becomes (the runner prefills them in
    one call); `max_context_len`: the KV cache's positions. `constant_methods`:
    more name -> value methods (optimum's metadata); the limits written here win.
    `max_audio_chunks`: audio_encoder takes [1..max_audio_chunks, n_mels,
    frames] (optimum's class passes a processor's chunks of longer audio at
    once, MultimodalRunner `generate`'s chunks of a .wav). `feature_extractor`:
    the model's WhisperFeatureExtractor (or its preprocessor_config.json as a
    dict); its parameters are recorded (mel_features.MEL_METHODS) so that
    `generate --audio x.wav` computes the features (default: Whisper's)."""
    refuse_kv_cache_dtype(options, "export_audio_llm")
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    if not hasattr(model, "get_audio_features") or not hasattr(model.config, "audio_config"):
        raise TypeError(f"export_audio_llm takes a transformers audio-language model with "
                        f"get_audio_features (Voxtral), got {type(model).__name__}")
    model = in_dtype(model.eval(), DTYPES[dtype])
    config = model.config.get_text_config()
    _check_arguments(config, max_seq_len, max_context_len, dtype, None, 1)
    spec = audio_spec(model)
    if max_audio_chunks < 1:
        raise ValueError(f"max_audio_chunks={max_audio_chunks}: give 1 or more")
    if spec.tokens > max_seq_len:
        raise ValueError(
            f"one audio input becomes {spec.tokens} tokens, which MultimodalRunner feeds to "
            f"text_decoder in one call, but max_seq_len={max_seq_len}; export with "
            f"max_seq_len >= {spec.tokens}")
    if spec.tokens * max_audio_chunks > max_seq_len:
        raise ValueError(
            f"{max_audio_chunks} chunks of audio become {spec.tokens * max_audio_chunks} "
            f"tokens, fed to text_decoder in one call, but max_seq_len={max_seq_len}; use "
            f"max_audio_chunks <= {max_seq_len // spec.tokens} or a larger max_seq_len")
    mel = feature_spec(spec, feature_extractor)
    meta = LLMMetadata.for_config(config, max_seq_len, max_context_len, bos_id, eos_ids)
    if progress:
        progress(f"{type(model).__name__}: audio [1, {spec.n_mels}, {spec.frames}] -> "
                 f"{spec.tokens} tokens, cache of {max_context_len} positions, up to "
                 f"{max_seq_len} per call, dtype {dtype}; a .wav becomes features at "
                 f"{mel.sampling_rate} Hz, n_fft {mel.n_fft}, hop {mel.hop_length}, chunks of "
                 f"{mel.chunk_seconds:g} s")
        progress("torch.export of audio_encoder, token_embedding and text_decoder...")
    try:
        programs = audio_llm_programs(model, spec, max_seq_len, max_context_len,
                                      max_audio_chunks)
    except Exception as e:  # noqa: BLE001 - any tracing failure, with its model named
        raise ExportError(f"torch.export of {type(model).__name__} failed: "
                          f"{type(e).__name__}: {e}") from e
    # The run check's reference: the text decoder over a fresh cache of its own,
    # on contiguous positions (generated ones would not be).
    lm = causal_lm_of(model)
    step = hf_static_cache_wrapper(lm, max_context_len).model
    _, positions = hf_example_inputs(max_seq_len)
    embeds = torch.randn(1, positions.shape[0], int(config.hidden_size),
                         generator=torch.Generator().manual_seed(0)).to(DTYPES[dtype])
    decoder = (lambda e, p: step(inputs_embeds=e, cache_position=p), (embeds, positions))
    result = export_program(programs, None, output, progress=progress,
                            method_references={"text_decoder": decoder},
                            constant_methods={**(constant_methods or {}),
                                              **meta.constant_methods(),
                                              **spec.constant_methods(),
                                              **mel.constant_methods()},
                            write_expected_file=False, **options)
    return AudioLLMExportResult(result.path, result.data_paths, meta, spec, result)


__all__ = ["export_audio_llm", "audio_llm_programs", "audio_spec", "causal_lm_of", "feature_spec",
           "AudioEncoder", "AudioLLMExportResult"]
