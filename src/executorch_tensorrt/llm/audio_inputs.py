"""What an audio program takes, written into it as constant methods, and the
check of audio features against it before anything runs. Runtime side: no
AOT imports, so runners' callers can check inputs without export code.

An audio encoder's input is fixed: `float[1, n_mels, frames]` (Whisper-style
encoders add one learned position per two frames, so the length is part of
the weights). ExecuTorch's runners and optimum's class pass the tensor
straight to the method, where a wrong shape or dtype fails with a bare error
code; `check_audio_features` names the input, the limit and the remedy.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


@dataclass(frozen=True)
class AudioSpec:
    """The audio encoder's input `[1, n_mels, frames]` in `dtype` and the
    tokens (decoder positions) one such input becomes (0: a separate
    encoder-decoder, nothing of the context is taken)."""

    n_mels: int
    frames: int
    dtype: torch.dtype
    tokens: int = 0

    def constant_methods(self) -> dict:
        return {"get_audio_n_mels": self.n_mels, "get_audio_frames": self.frames,
                "get_audio_tokens": self.tokens}


def read_audio_spec(program, dtype: torch.dtype = torch.float32) -> AudioSpec:
    """AudioSpec from a program loaded with executorch.runtime (its constant
    methods); one without them is refused by name."""
    names = set(program.method_names)
    missing = [n for n in ("get_audio_n_mels", "get_audio_frames") if n not in names]
    if missing:
        raise ValueError(f"the program has no {', '.join(missing)} method: not written by "
                         "executorch_tensorrt's speech or audio export; check the input shape "
                         "yourself")

    def one(name: str) -> int:
        (v,) = program.load_method(name).execute([])
        return int(v.item() if hasattr(v, "item") else v)

    tokens = one("get_audio_tokens") if "get_audio_tokens" in names else 0
    return AudioSpec(one("get_audio_n_mels"), one("get_audio_frames"), dtype, tokens)


def check_audio_features(features, spec: AudioSpec, *, context_left: int | None = None) -> None:
    """Raises ValueError naming what is wrong with `features` for `spec`:
    not a tensor, wrong dtype, wrong mel-bin count or frame count, or (with
    `context_left`, the decoder positions still free) more audio tokens than
    the context holds."""
    if not isinstance(features, torch.Tensor):
        raise ValueError(f"audio features must be a torch.Tensor [1, {spec.n_mels}, "
                         f"{spec.frames}], got {type(features).__name__}")
    want = DTYPE_NAMES.get(spec.dtype, str(spec.dtype))
    if features.dtype != spec.dtype:
        raise ValueError(
            f"audio features are {DTYPE_NAMES.get(features.dtype, features.dtype)}; the "
            f"program's audio encoder takes {want}. Convert them (features.to(torch.{want})) "
            "or export the model in that dtype")
    shape = list(features.shape)
    if len(shape) != 3 or shape[0] != 1:
        raise ValueError(f"audio features of shape {shape}: the audio encoder takes one "
                         f"utterance, [1, {spec.n_mels}, {spec.frames}] (batch, mel bins, "
                         "frames); add or remove the batch dimension")
    if shape[1] != spec.n_mels:
        raise ValueError(
            f"audio features have {shape[1]} mel bins; the model was trained on "
            f"{spec.n_mels} (input_features [1, {spec.n_mels}, {spec.frames}]). Compute "
            f"them with the model's own feature extractor (feature_size={spec.n_mels})")
    if shape[2] != spec.frames:
        remedy = ("pad it with the feature extractor (padding='max_length') or split it into "
                  f"chunks of {spec.frames} frames" if shape[2] < spec.frames else
                  f"split it into chunks of {spec.frames} frames and run each")
        raise ValueError(
            f"audio features have {shape[2]} frames; the audio encoder takes exactly "
            f"{spec.frames} (its position embeddings cover that many); {remedy}")
    if context_left is not None and spec.tokens > context_left:
        raise ValueError(
            f"this audio becomes {spec.tokens} tokens, but only {context_left} positions of "
            "the context are left; start a new conversation (reset), shorten the prompt, or "
            "export with a larger max_context_len")
