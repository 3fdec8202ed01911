"""The geometry and scaling steps of a transformers image processor, as one
typed record: read at export from the model's preprocessor_config.json (or
optimum's copy of it), written into the program as the constant method
`image_preprocessing`, read back by `generate` to prepare a picture file
the way the processor prepares it (image_files.py applies it).

The steps, in the processor's order: convert to RGB (an alpha channel laid
over white), resize (the shortest edge to N keeping the aspect ratio, as
CLIP-style processors; the longest edge to N, then to a fixed size, as
Idefics3/SmolVLM without image splitting; or straight to a fixed height x
width, as SigLIP, Gemma3, GOT-OCR2/InternVL), center-crop, rescale by
`rescale_factor`. Normalization (image_mean / image_std) is recorded beside
it, as optimum records it.

The record is a flat list of numbers (constant methods hold numbers);
`FIELDS` names each position, and the first is the layout's version, so a
reader refuses a layout it does not know instead of misreading it."""
from __future__ import annotations

from dataclasses import dataclass

METHOD = "image_preprocessing"
VERSION = 1
#: Pillow's (and transformers' PILImageResampling) filter codes.
RESAMPLE_NAMES = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box",
                  5: "hamming"}
#: Processor options that cut a picture into tiles besides the whole image.
#: The programs' vision_encoder takes one image: generate prepares the one
#: the processor gives with the option off.
TILING_OPTIONS = ("do_image_splitting", "crop_to_patches", "do_pan_and_scan")
FIELDS = ("version", "shortest_edge", "longest_edge", "height", "width", "resample",
          "crop_height", "crop_width", "rescale_factor", "convert_rgb", "tiling")


class PreprocessingConfigError(ValueError):
    """A processor config whose steps cannot be recorded; the message names
    the key and why."""


@dataclass(frozen=True)
class ImagePreprocessing:
    """A processor's steps before normalization. An edge or size of 0 is a
    step the processor does not take."""

    shortest_edge: int = 0        # resize: the shortest edge to this, aspect kept
    longest_edge: int = 0         # resize: the longest edge to this (Idefics3's rule) ...
    height: int = 0               # ... then (or alone) to height x width
    width: int = 0
    resample: int = 3             # Pillow's filter code (RESAMPLE_NAMES)
    crop_height: int = 0          # center crop, when not 0
    crop_width: int = 0
    rescale_factor: float = 1.0   # 0..255 values times this (1.0: do_rescale off)
    convert_rgb: bool = True
    tiling: str = ""              # the processor's tiling option that is on, if any

    def __post_init__(self):
        if self.resample not in RESAMPLE_NAMES:
            raise PreprocessingConfigError(
                f"resample={self.resample} is not a Pillow filter code "
                f"({', '.join(f'{k}: {v}' for k, v in RESAMPLE_NAMES.items())})")
        sizes = (self.shortest_edge, self.longest_edge, self.height, self.width,
                 self.crop_height, self.crop_width)
        if any(s < 0 for s in sizes) or (self.height > 0) != (self.width > 0) or \
                (self.crop_height > 0) != (self.crop_width > 0):
            raise PreprocessingConfigError(f"sizes {sizes} should be positive, and a height "
                                           "comes with a width")
        if self.shortest_edge and (self.longest_edge or self.height):
            raise PreprocessingConfigError("a shortest_edge resize comes alone")

    def describe(self) -> str:
        steps = ["convert to RGB"] if self.convert_rgb else []
        if self.longest_edge:
            steps.append(f"longest edge to {self.longest_edge}")
        if self.shortest_edge:
            steps.append(f"shortest edge to {self.shortest_edge}")
        if self.height:
            steps.append(f"resize to {self.height}x{self.width}")
        if self.crop_height:
            steps.append(f"center crop {self.crop_height}x{self.crop_width}")
        steps.append(f"{RESAMPLE_NAMES[self.resample]} filter")
        steps.append(f"times {self.rescale_factor:g}")
        return ", ".join(steps)

    def constant(self) -> list:
        """The constant method's value: numbers in FIELDS' order."""
        values = {**self.__dict__, "version": VERSION, "convert_rgb": int(self.convert_rgb),
                  "tiling": TILING_OPTIONS.index(self.tiling) + 1 if self.tiling else 0,
                  "rescale_factor": float(self.rescale_factor)}
        return [values[name] for name in FIELDS]

    @classmethod
    def from_constant(cls, values) -> ImagePreprocessing:
        values = list(values)
        if not values or int(values[0]) != VERSION or len(values) != len(FIELDS):
            raise PreprocessingConfigError(
                f"the program's {METHOD} constant {values} is not layout {VERSION} "
                f"({len(FIELDS)} values: {', '.join(FIELDS)}); a newer executorch-tensorrt "
                "wrote it: upgrade, or pass a .npy prepared by the model's processor")
        named = dict(zip(FIELDS, values))
        tiling = int(named.pop("tiling"))
        named.pop("version")
        factor = float(named.pop("rescale_factor"))
        convert_rgb = bool(named.pop("convert_rgb"))
        return cls(**{k: int(v) for k, v in named.items()}, rescale_factor=factor,
                   convert_rgb=convert_rgb,
                   tiling=TILING_OPTIONS[tiling - 1] if 0 < tiling <= len(TILING_OPTIONS)
                   else "")


def _size(config: dict, key: str) -> dict:
    value = config.get(key)
    if isinstance(value, int):
        return {"shortest_edge": value}
    if not isinstance(value, dict) or not all(isinstance(v, int) for v in value.values()):
        raise PreprocessingConfigError(f"{key}={value!r} should be an int or a dict of ints")
    return value


def from_processor_config(config: dict) -> ImagePreprocessing:
    """The steps of a preprocessor_config.json's image processor. Raises
    PreprocessingConfigError for a resize rule it does not reproduce (the
    caller records none: generate then resizes the whole picture, noting it)."""
    crop = {}
    if config.get("do_center_crop"):
        crop = _size(config, "crop_size")
        if "shortest_edge" in crop:  # an int crop_size is a square
            crop = {"height": crop["shortest_edge"], "width": crop["shortest_edge"]}
    steps = {}
    if config.get("do_resize", True):
        size = _size(config, "size")
        if isinstance(config.get("size"), int) and not crop:
            size = {"height": size["shortest_edge"], "width": size["shortest_edge"]}
        if set(size) == {"shortest_edge"}:
            steps = {"shortest_edge": size["shortest_edge"]}
        elif set(size) == {"height", "width"}:
            steps = dict(size)
        elif set(size) == {"longest_edge"} and "max_image_size" in config:
            # Idefics3/SmolVLM: the longest edge to N, then the whole image to the
            # square max_image_size (its path without image splitting).
            square = _size(config, "max_image_size").get("longest_edge")
            if not square:
                raise PreprocessingConfigError(
                    f"max_image_size={config['max_image_size']!r} has no longest_edge")
            steps = {"longest_edge": size["longest_edge"], "height": square, "width": square}
        else:
            raise PreprocessingConfigError(
                f"size={config.get('size')!r}: generate reproduces a shortest_edge, a height "
                "and width, or Idefics3's longest_edge with max_image_size")
    tiling = next((k for k in TILING_OPTIONS if config.get(k)), "")
    resample = config.get("resample", 3)
    if not isinstance(resample, int):
        raise PreprocessingConfigError(f"resample={resample!r} should be a Pillow filter code")
    factor = config.get("rescale_factor", 1 / 255) if config.get("do_rescale", True) else 1.0
    if not isinstance(factor, (int, float)) or isinstance(factor, bool):
        raise PreprocessingConfigError(f"rescale_factor={factor!r} should be a number")
    return ImagePreprocessing(**steps, resample=resample,
                              crop_height=crop.get("height", 0), crop_width=crop.get("width", 0),
                              rescale_factor=float(factor),
                              convert_rgb=config.get("do_convert_rgb") is True,
                              tiling=tiling)


__all__ = ["FIELDS", "METHOD", "ImagePreprocessing", "PreprocessingConfigError",
           "RESAMPLE_NAMES", "TILING_OPTIONS", "from_processor_config"]
