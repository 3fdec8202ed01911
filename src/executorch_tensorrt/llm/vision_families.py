"""Which transformers vision-language families fit ExecuTorch's
MultimodalRunner, and each one's image -> embeddings step as one module
(`ImageEncoder`: pixels[1, 3, H, W] -> embeds[1, N, D], the embeddings that
replace the image's N placeholder tokens in the model's own forward).

The runner places an image as ONE run of embeddings at consecutive
positions, attended causally like text, and feeds the decoder nothing but
embeddings and 1-D positions. Families whose forward needs more than that
are refused with the reason (UNFIT)."""
from __future__ import annotations

import torch

from ..errors import ExportError

#: model_type -> why MultimodalRunner cannot run it as transformers does.
UNFIT = {
    **dict.fromkeys(
        ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "glm4v", "glm4v_moe"),
        "its decoder positions image tokens with 3-D rotary positions (M-RoPE) computed from "
        "the image grid, and MultimodalRunner passes text_decoder one 1-D position per "
        "embedding"),
    **dict.fromkeys(
        ("mistral3", "pixtral"),
        "its processor puts [IMG_BREAK] tokens between the rows of an image's tokens (text "
        "embeddings inside the image), and MultimodalRunner places an image as one run of "
        "vision_encoder's embeddings"),
    "paligemma": "its prefix (image and prompt) attends bidirectionally, and MultimodalRunner's "
                 "text_decoder calls are causal",
    **dict.fromkeys(
        ("llava_next", "llava_next_video", "llava_onevision"),
        "any-resolution tiling: the image's token count and a newline embedding per row "
        "depend on the image's size, computed outside the vision tower"),
}
#: Families checked token for token against transformers through MultimodalRunner
#: (tests/llm/test_multimodal_vlm.py).
VERIFIED = ("llava", "idefics3", "smolvlm", "internvl", "aya_vision", "gemma3")
#: Families whose get_image_features takes [batch, images, C, H, W] and drops
#: all-zero images by value (a data-dependent shape): ImageEncoder calls their
#: vision model and connector directly on the one image.
_NESTED_IMAGES = ("idefics3", "smolvlm")


def model_type(model) -> str:
    return getattr(model.config, "model_type", type(model).__name__)


def check_family(model) -> None:
    kind = model_type(model)
    if kind in UNFIT:
        raise ExportError(f"{type(model).__name__} ({kind}) cannot run in ExecuTorch's "
                          f"MultimodalRunner as transformers runs it: {UNFIT[kind]}. "
                          f"Families that do: {', '.join(VERIFIED)}")
    if not hasattr(model, "get_image_features"):
        raise ExportError(f"{type(model).__name__} ({kind}) has no get_image_features: not a "
                          "transformers image-text-to-text model (for a text-only model use "
                          "executorch_tensorrt.llm.export)")


def image_geometry(model, image_size) -> tuple[int, int]:
    """(H, W) of the image vision_encoder takes: `image_size` (an int or
    (H, W)), else the vision config's."""
    size = image_size
    if size is None:
        vision = getattr(model.config, "vision_config", None)
        size = getattr(vision, "image_size", None)
        if size is None:
            raise ValueError(f"{type(model).__name__}: its vision config names no image_size; "
                             "pass image_size=(H, W)")
    if isinstance(size, int):
        size = (size, size)
    size = tuple(int(s) for s in size)
    if len(size) != 2 or min(size) < 1:
        raise ValueError(f"image_size must be an int or (height, width) of positive ints, got "
                         f"{image_size!r}")
    return size


class ImageEncoder(torch.nn.Module):
    """pixels float32[1, 3, H, W] -> the model's image embeddings [1, N, D]
    (projected to the text model's width), as its forward merges them."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.nested = model_type(model) in _NESTED_IMAGES
        self.dtype = next(model.parameters()).dtype

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        pixels = pixels.to(self.dtype)  # float32 in, whatever the model computes in
        if self.nested:
            features = self._nested(pixels)
        else:
            features = self.model.get_image_features(pixel_values=pixels,
                                                     return_dict=True).pooler_output
        if isinstance(features, (list, tuple)):
            features = torch.cat(list(features), dim=0)
        return features.reshape(1, -1, features.shape[-1])

    def _nested(self, pixels: torch.Tensor) -> torch.Tensor:
        # The padding-image filter and the all-ones pixel mask of
        # get_image_features, for one real image: every patch attended.
        inner = self.model.model
        patch = inner.config.vision_config.patch_size
        mask = torch.ones(1, pixels.shape[2] // patch, pixels.shape[3] // patch,
                          dtype=torch.bool)
        hidden = inner.vision_model(pixel_values=pixels,
                                    patch_attention_mask=mask,
                                    return_dict=True).last_hidden_state
        return inner.connector(hidden)
