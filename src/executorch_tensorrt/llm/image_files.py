"""Picture files (PNG, JPEG, ...) turned into the array a program's
`vision_encoder` takes, the way a transformers image processor prepares
them: converted to the encoder's channels, resized to its height and width,
and for a float32 encoder scaled to [0, 1] and normalized with the
processor's mean and standard deviation.

Decoding needs Pillow, an optional dependency (`executorch-tensorrt[image]`):
only this module imports it, when a picture file is given."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

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


def read_picture(path: Path, channels: int, height: int, width: int, dtype: str,
                 normalization: Normalization | None) -> Picture:
    """`path` decoded, converted to `channels`, resized (bicubic, the whole
    picture, as most processors' `resize`) to `height` x `width` when it
    differs, then uint8 as decoded or float32 (x / 255 - mean) / std."""
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
            converted = image.convert(_MODES[channels])
    except (OSError, SyntaxError, ValueError) as e:  # Pillow's errors for a damaged file
        raise PictureError(f"image {path} cannot be read as a picture: {e}") from None
    notes = []
    if size != (width, height):
        converted = converted.resize((width, height), image_module.Resampling.BICUBIC)
        notes.append(f"image {path} ({size[1]}x{size[0]}, HxW) was resized to the "
                     f"vision_encoder's {height}x{width} (bicubic, whole picture); a processor "
                     "that crops would give other pixels: pass a .npy for its exact input")
    hwc = np.asarray(converted, dtype=np.uint8).reshape(height, width, channels)
    chw = hwc.transpose(2, 0, 1)
    if dtype == "uint8":
        return Picture(np.ascontiguousarray(chw), tuple(notes))
    mean = np.asarray(normalization.mean, np.float32).reshape(-1, 1, 1)
    std = np.asarray(normalization.std, np.float32).reshape(-1, 1, 1)
    pixels = (chw.astype(np.float32) / np.float32(255) - mean) / std
    return Picture(np.ascontiguousarray(pixels, dtype=np.float32), tuple(notes))


__all__ = ["PICTURE_SUFFIXES", "Normalization", "Picture", "PictureError", "read_picture"]
