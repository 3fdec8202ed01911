"""The limits a multimodal program records (its constant methods) and the
checks of a request against them, made before ExecuTorch's MultimodalRunner
(or optimum's class) sees it: the runner's own errors for these cases are an
error code and a log line (docs/multimodal.md lists them). Images: what
`llm.export_multimodal` writes (ImageSpec, check_image, check_prompt). Audio:
what the audio-language and Whisper exports write (AudioSpec,
check_audio_features): an audio encoder's input is fixed, `float[1, n_mels,
frames]` (Whisper-style encoders add one learned position per two frames, so
the length is part of the weights).

No AOT code here: a runner-side tool (the `generate` command) imports it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .metadata import LLMMetadata, read_metadata


@dataclass(frozen=True)
class ImageSpec:
    """The image `vision_encoder` takes and what it becomes: written into the
    program as constant methods (IMAGE_METHODS)."""
    channels: int
    height: int
    width: int
    tokens: int            # N: embeddings per image, prefilled in one call
    token_id: int | None   # the model's image placeholder token

    def constant_methods(self) -> dict[str, int]:
        methods = {"get_image_channels": self.channels, "get_image_height": self.height,
                   "get_image_width": self.width, "get_image_tokens": self.tokens}
        if self.token_id is not None:
            methods["get_image_token_id"] = self.token_id
        return methods


IMAGE_METHODS = ("get_image_channels", "get_image_height", "get_image_width",
                 "get_image_tokens")


@dataclass(frozen=True)
class MultimodalLimits:
    text: LLMMetadata
    image: ImageSpec


def read_multimodal_limits(program) -> MultimodalLimits:
    """The limits of a program loaded with executorch.runtime; a program
    without the image methods is refused by name."""
    names = set(program.method_names)
    missing = [n for n in IMAGE_METHODS if n not in names]
    if missing:
        raise ValueError(f"the program has no {', '.join(missing)} method: not written by "
                         "executorch_tensorrt.llm.export_multimodal")

    def one(name: str) -> int:
        (value,) = program.load_method(name).execute([])
        return int(value.item() if hasattr(value, "item") else value)

    image = ImageSpec(one("get_image_channels"), one("get_image_height"),
                      one("get_image_width"), one("get_image_tokens"),
                      one("get_image_token_id") if "get_image_token_id" in names else None)
    return MultimodalLimits(read_metadata(program), image)


def check_image(limits: MultimodalLimits, image) -> None:
    """Refuses an image (a torch tensor as make_image_input takes it: [C, H, W],
    [1, C, H, W] or [H, W, C]) that vision_encoder cannot take, naming what
    differs and what to do."""
    import torch

    spec = limits.image
    want = f"float32 [{spec.channels}, {spec.height}, {spec.width}] (C, H, W; or [1, C, H, W])"
    if not isinstance(image, torch.Tensor):
        raise TypeError(f"the image must be a torch tensor, {want}; got {type(image).__name__}")
    if image.dtype != torch.float32:
        raise ValueError(f"the image is {str(image.dtype).removeprefix('torch.')}; the program's "
                         f"vision_encoder takes {want}: convert it (e.g. "
                         "image.float() / 255 and the model's normalization, as its processor "
                         "does)")
    shape = list(image.shape)
    if len(shape) == 4 and shape[0] == 1:
        shape = shape[1:]
    if len(shape) != 3:
        raise ValueError(f"the image has shape {list(image.shape)}; the program's vision_encoder "
                         f"takes {want}")
    chw = shape if shape[0] in (1, 3, 4) else [shape[2], shape[0], shape[1]]
    if chw[0] != spec.channels:
        raise ValueError(f"the image has {chw[0]} channels; the program's vision_encoder takes "
                         f"{spec.channels} (RGB): drop the alpha channel or convert it to RGB")
    if (chw[1], chw[2]) != (spec.height, spec.width):
        raise ValueError(f"the image is {chw[1]}x{chw[2]} (HxW); the program's vision_encoder "
                         f"takes {spec.height}x{spec.width}: resize it (the model's processor "
                         "does), or export again with image_size=(H, W)")


def check_prompt(limits: MultimodalLimits, parts: Sequence[int | str],
                 max_new_tokens: int) -> None:
    """`parts`: the request in order, a text part as its token count and an
    image as "image". Each text part must fit one text_decoder call
    (MultimodalRunner feeds a part whole), and everything with the answer
    must fit the cache."""
    text = limits.text
    used = 0
    for i, part in enumerate(parts):
        if part == "image":
            used += limits.image.tokens
            continue
        if part > text.max_seq_len:
            raise ValueError(
                f"text part {i} is {part} tokens; MultimodalRunner feeds each text part to "
                f"text_decoder in one call, which takes at most max_seq_len={text.max_seq_len}: "
                f"split it into parts of at most {text.max_seq_len} tokens, or export with a "
                "larger max_seq_len")
        used += part
    if used + max_new_tokens > text.max_context_len:
        images = sum(1 for p in parts if p == "image")
        raise ValueError(
            f"the request takes {used} cache positions ({images} image(s) of "
            f"{limits.image.tokens} each and the text) plus {max_new_tokens} new tokens = "
            f"{used + max_new_tokens}, beyond max_context_len={text.max_context_len}: shorten "
            "the prompt, use fewer images, or generate fewer tokens")


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
