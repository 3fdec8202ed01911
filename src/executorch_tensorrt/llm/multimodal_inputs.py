"""The limits a program written by `llm.export_multimodal` records (its
constant methods) and the checks of a request against them, made before
ExecuTorch's MultimodalRunner sees it: the runner's own errors for these
cases are an error code and a log line (docs/multimodal.md lists them).

No AOT code here: a runner-side tool (the `generate` command) imports it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

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
