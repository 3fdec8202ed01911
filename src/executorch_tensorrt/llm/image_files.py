"""Picture files (PNG, JPEG, ...) turned into the array a program's
`vision_encoder` takes, the way a transformers image processor prepares
them: converted to the encoder's channels; resized, center-cropped and
rescaled with the steps the program records (image_preprocessing.py), or,
without them, the whole picture resized to the encoder's height and width
and scaled to [0, 1]; for a float32 encoder normalized with the processor's
mean and standard deviation.

Decoding needs Pillow, an optional dependency (`executorch-tensorrt[image]`):
only this module imports it, when a picture file is given."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .image_preprocessing import ImagePreprocessing

PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
_MODES = {1: "L", 3: "RGB", 4: "RGBA"}  # channels -> Pillow's mode


class PictureError(ValueError):
    """A picture file that cannot become the encoder's input; the message
    names the file, the limit and the remedy."""


@dataclass(frozen=True)
class Normalization:
    """The processor's `image_mean` and `image_std` (one value per channel,
    or one for all), applied after scaling the 0..255 values to [0, 1]."""

    mean: tuple[float, ...]
    std: tuple[float, ...]

    @classmethod
    def of(cls, mean: Sequence[float], std: Sequence[float], channels: int) -> Normalization:
        for name, values in (("image_mean", mean), ("image_std", std)):
            if len(values) not in (1, channels):
                raise PictureError(f"{name} has {len(values)} values; the encoder takes "
                                   f"{channels} channels: give 1 or {channels}")
        if any(s == 0 for s in std):
            raise PictureError(f"image_std {list(std)} has a 0: each value divides a channel")
        return cls(tuple(float(m) for m in mean), tuple(float(s) for s in std))


@dataclass(frozen=True)
class Picture:
    array: np.ndarray        # [C, H, W] in the encoder's dtype
    notes: tuple[str, ...]   # what was done that the user should know


def _pillow():
    try:
        from PIL import Image
    except ImportError:
        raise PictureError(
            "reading PNG/JPEG files needs Pillow, which is not installed: pip install "
            "'executorch-tensorrt[image]' (or pillow), or pass the image as a .npy array "
            "prepared as the model's processor does") from None
    return Image


def _rgb(image, image_module):
    """transformers' convert_to_rgb: an alpha channel laid over white."""
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        white = image_module.new("RGBA", rgba.size, (255, 255, 255, 255))
        return image_module.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")


def _edge_size(height: int, width: int, steps: ImagePreprocessing) -> tuple[int, int]:
    """(H, W) after the processor's edge rule, rounded as transformers rounds."""
    if steps.shortest_edge:  # CLIP-style: the long edge truncated
        short, long = sorted((height, width))
        new_short, new_long = steps.shortest_edge, int(steps.shortest_edge * long / short)
        return (new_long, new_short) if width <= height else (new_short, new_long)
    # Idefics3: the long edge to N, the other truncated and rounded up to even,
    # then both kept under its 4096 limit
    ratio = width / height
    if width >= height:
        height, width = int(steps.longest_edge / ratio), steps.longest_edge
        height += height % 2
    else:
        height, width = steps.longest_edge, int(steps.longest_edge * ratio)
        width += width % 2
    height, width = max(height, 1), max(width, 1)
    if max(height, width) > _IDEFICS3_LIMIT:
        if width >= height:
            height, width = int(_IDEFICS3_LIMIT / ratio), _IDEFICS3_LIMIT
        else:
            height, width = _IDEFICS3_LIMIT, int(_IDEFICS3_LIMIT * ratio)
    return max(height, 1), max(width, 1)


_IDEFICS3_LIMIT = 4096


def _center_crop(hwc: np.ndarray, height: int, width: int) -> np.ndarray:
    """transformers' center_crop: offsets floored; an image smaller than the
    crop padded with zeros around it first."""
    h, w = hwc.shape[:2]
    if h < height or w < width:
        big_h, big_w = max(h, height), max(w, width)
        top, left = -(-(big_h - h) // 2), -(-(big_w - w) // 2)
        padded = np.zeros((big_h, big_w, hwc.shape[2]), hwc.dtype)
        padded[top:top + h, left:left + w] = hwc
        hwc = padded
        h, w = big_h, big_w
    top, left = (h - height) // 2, (w - width) // 2
    return hwc[top:top + height, left:left + width]


def _processor_steps(image, steps: ImagePreprocessing, image_module) -> np.ndarray:
    """The picture resized and cropped as the processor does, as [H, W, C] uint8."""
    filter_ = image_module.Resampling(steps.resample)
    if steps.shortest_edge or steps.longest_edge:
        height, width = _edge_size(image.size[1], image.size[0], steps)
        image = image.resize((width, height), filter_)
    if steps.height:
        image = image.resize((steps.width, steps.height), filter_)
    hwc = np.asarray(image, dtype=np.uint8)
    hwc = hwc.reshape(*hwc.shape[:2], -1)
    if steps.crop_height:
        hwc = _center_crop(hwc, steps.crop_height, steps.crop_width)
    return hwc


def read_picture(path: Path, channels: int, height: int, width: int, dtype: str,
                 normalization: Normalization | None,
                 steps: ImagePreprocessing | None = None) -> Picture:
    """`path` decoded and converted to `channels`; then, with the processor's
    recorded `steps`, resized, cropped and rescaled as it does; without them
    the whole picture resized (bicubic) to `height` x `width`, x / 255. Then
    uint8 as it is, or float32 normalized (x - mean) / std."""
    image_module = _pillow()
    if channels not in _MODES:
        raise PictureError(f"the vision_encoder takes {channels} channels; a picture file "
                           "gives 1 (grey), 3 (RGB) or 4 (RGBA): pass a .npy array instead")
    if dtype == "float32" and normalization is None:
        raise PictureError(
            f"image {path}: the program's vision_encoder takes float32 pixels normalized as "
            "the model's processor does, and the program does not record that normalization: "
            "pass --image-mean and --image-std (image_mean=, image_std= from Python) with the "
            "values of the model's preprocessor_config.json, or a .npy array prepared by the "
            "processor")
    try:
        with image_module.open(path) as image:
            image.load()
            size = image.size
            if steps is not None and steps.convert_rgb and channels == 3:
                converted = _rgb(image, image_module)
            else:
                converted = image.convert(_MODES[channels])
    except (OSError, SyntaxError, ValueError) as e:  # Pillow's errors for a damaged file
        raise PictureError(f"image {path} cannot be read as a picture: {e}") from None
    notes = []
    if steps is not None:
        hwc = _processor_steps(converted, steps, image_module)
        if steps.tiling:
            notes.append(f"the model's processor also cuts pictures into tiles "
                         f"({steps.tiling}); the program's vision_encoder takes one image: "
                         f"{path} was prepared as the processor prepares it with {steps.tiling} "
                         "off (write one image's tokens in the prompt)")
        if hwc.shape[:2] != (height, width):
            notes.append(f"the processor's steps ({steps.describe()}) give {path} as "
                         f"{hwc.shape[0]}x{hwc.shape[1]} (HxW); the vision_encoder takes "
                         f"{height}x{width}: resized to it (bicubic, whole picture)")
            converted = image_module.fromarray(hwc.squeeze(2) if channels == 1 else hwc)
            hwc = np.asarray(converted.resize((width, height),
                                              image_module.Resampling.BICUBIC), np.uint8)
    else:
        if size != (width, height):
            converted = converted.resize((width, height), image_module.Resampling.BICUBIC)
            notes.append(f"image {path} ({size[1]}x{size[0]}, HxW) was resized to the "
                         f"vision_encoder's {height}x{width} (bicubic, whole picture): the "
                         "program records no processor resize or crop (llm-export --model "
                         "FOLDER records them); a processor that crops gives other pixels: "
                         "pass a .npy for its exact input")
        hwc = np.asarray(converted, dtype=np.uint8)
    chw = hwc.reshape(height, width, channels).transpose(2, 0, 1)
    if dtype == "uint8":
        return Picture(np.ascontiguousarray(chw), tuple(notes))
    mean = np.asarray(normalization.mean, np.float32).reshape(-1, 1, 1)
    std = np.asarray(normalization.std, np.float32).reshape(-1, 1, 1)
    if steps is None:
        scaled = chw.astype(np.float32) / np.float32(255)
    else:  # in float64, as transformers' rescale, then float32
        scaled = (chw.astype(np.float64) * steps.rescale_factor).astype(np.float32)
    pixels = (scaled - mean) / std
    return Picture(np.ascontiguousarray(pixels, dtype=np.float32), tuple(notes))


__all__ = ["PICTURE_SUFFIXES", "Normalization", "Picture", "PictureError", "read_picture"]
