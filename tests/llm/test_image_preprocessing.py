"""`generate` prepares a picture file as the model's transformers image
processor does, from the steps the program records (llm/image_preprocessing.py):
for a CLIP-style processor (shortest edge, center crop, another
rescale_factor), fixed-size ones (SigLIP bicubic, Gemma3 bilinear) and
Idefics3's (longest edge, then its square, splitting off), the pixels
`generate` feeds for non-square and transparent PNGs are the processor's own
`pixel_values`, and the toy program decodes the eager module's tokens on
them. Processors are built locally (transformers' Pillow backend; nothing is
downloaded); the program is the toy of tests/llm/toy_multimodal.py (vision
encoder of 8x8 pixels, no TensorRT)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

from executorch_tensorrt import llm
from executorch_tensorrt.llm.generation import _normalization
from executorch_tensorrt.llm.image_preprocessing import (ImagePreprocessing,
                                                         PreprocessingConfigError,
                                                         from_processor_config)
from executorch_tensorrt.llm.multimodal import processor_record
from executorch_tensorrt.llm.runner_inputs import (GenerateInputError, read_image,
                                                   read_program_info)
from runner_helpers import BOS, CHARS, EOS, write_char_tokenizer
import toy_multimodal as toy

MEAN, STD = [0.5, 0.4, 0.3], [0.25, 0.25, 0.5]
# Each processor gives the toy encoder's 8x8 from a picture of another shape.
PROCESSORS = {
    "clip": lambda: transformers.CLIPImageProcessorPil(
        size={"shortest_edge": 11}, crop_size={"height": 8, "width": 8},
        rescale_factor=1 / 127.5, image_mean=MEAN, image_std=STD),
    "siglip": lambda: transformers.SiglipImageProcessorPil(size={"height": 8, "width": 8}),
    "gemma3": lambda: transformers.Gemma3ImageProcessorPil(size={"height": 8, "width": 8}),
    "idefics3": lambda: transformers.Idefics3ImageProcessorPil(
        size={"longest_edge": 16}, max_image_size={"longest_edge": 8},
        do_image_splitting=False, image_mean=MEAN, image_std=STD),
}
# Pillow's filters in both: the pixels are the same (measured 0.0 here);
# the bound leaves room for float32 rounding only.
PIXEL_BOUND = 1e-5


def _pictures(folder):
    """A wide RGB, a tall RGB and a wide RGBA picture (alpha over white)."""
    from PIL import Image

    rng = np.random.default_rng(3)
    y, x = np.mgrid[0:21, 0:34]
    smooth = np.stack([x * 7 % 256, y * 11 % 256, (x + y) * 5 % 256], -1)
    wide = np.clip(smooth + rng.integers(-40, 40, smooth.shape), 0, 255).astype(np.uint8)
    paths = {"wide.png": wide, "tall.png": np.ascontiguousarray(wide.transpose(1, 0, 2)),
             "rgba.png": np.concatenate(
                 [wide, rng.integers(0, 256, (*wide.shape[:2], 1), dtype=np.uint8)], -1)}
    for name, values in paths.items():
        Image.fromarray(values, "RGBA" if values.shape[-1] == 4 else "RGB").save(folder / name)
    return [folder / name for name in paths]


def _program(name: str, folder):
    """The toy program with what llm-export records of the processor's
    saved preprocessor_config.json; and the processor."""
    processor = PROCESSORS[name]()
    processor.save_pretrained(folder)
    config = json.loads((folder / "preprocessor_config.json").read_text())
    record = processor_record(config)
    assert record.notes == ()
    return toy.write_program(folder, name=f"{name}.pte",
                             constants=record.constant_methods), processor


def _processor_pixels(processor, path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as image:
        pixels = processor(image, return_tensors="np")["pixel_values"]
    return pixels.reshape(-1, *pixels.shape[-3:])[0]


@pytest.mark.parametrize("name", list(PROCESSORS))
def test_generates_pixels_are_the_processors(name, tmp_path):
    program, processor = _program(name, tmp_path)
    info = read_program_info(program)
    assert info.image_preprocessing == from_processor_config(processor.to_dict())
    for path in _pictures(tmp_path):
        picture = read_image(path, info.encoders["image"], _normalization(info, None, None),
                             info.image_preprocessing)
        want = _processor_pixels(processor, path)
        assert picture.array.shape == want.shape == (3, 8, 8)
        assert np.abs(picture.array - want).max() <= PIXEL_BOUND, (name, path.name)
        assert picture.notes == ()


def test_generate_decodes_the_eager_tokens_on_the_processors_pixels(tmp_path):
    """A CLIP-style crop reaches the runner: the PNG's tokens are those of
    the processor's pixels saved as .npy, and the eager module's on them."""
    program, processor = _program("clip", tmp_path)
    tokenizer = write_char_tokenizer(tmp_path)
    png = _pictures(tmp_path)[0]
    np.save(tmp_path / "pixels.npy", _processor_pixels(processor, png))
    result = llm.generate(program, tokenizer, "Hi", image=png, max_new_tokens=8)
    from_npy = llm.generate(program, tokenizer, "Hi", image=tmp_path / "pixels.npy",
                            max_new_tokens=8)
    ids = [CHARS.index(p) if p in CHARS else BOS if p == "<s>" else EOS for p in result.pieces]
    assert result.pieces == from_npy.pieces and result.notes == ()
    want = toy.eager_tokens("Hi", 8, image=torch.from_numpy(_processor_pixels(processor, png)))
    assert ids == want and len(set(want)) > 1


def test_a_tiling_processor_is_noted_at_export_and_generate(tmp_path):
    processor = transformers.Idefics3ImageProcessorPil(
        size={"longest_edge": 16}, max_image_size={"longest_edge": 8})  # splitting on
    record = processor_record(processor.to_dict())
    assert len(record.notes) == 1 and "do_image_splitting off" in record.notes[0]
    program = toy.write_program(tmp_path, name="tiles.pte", constants=record.constant_methods)
    info = read_program_info(program)
    path = _pictures(tmp_path)[0]
    picture = read_image(path, info.encoders["image"], _normalization(info, None, None),
                         info.image_preprocessing)
    processor.do_image_splitting = False
    assert np.abs(picture.array - _processor_pixels(processor, path)).max() <= PIXEL_BOUND
    assert len(picture.notes) == 1 and "with do_image_splitting off" in picture.notes[0]


@pytest.mark.parametrize("config, want", [
    (None, {}),
    ({"image_mean": [0.5, 0.4, 0.3], "image_std": 0.5, "size": {"height": 8, "width": 8}},
     {"image_mean": [0.5, 0.4, 0.3], "image_std": [0.5]}),
    ({"do_normalize": False, "image_mean": [0.5], "image_std": [0.5],
      "size": {"height": 8, "width": 8}}, {"image_mean": [0.0], "image_std": [1.0]}),
    ({"image_mean": "clip", "image_std": [1]}, "should be numbers, got 'clip'"),
])
def test_the_recorded_normalization_is_the_processors(config, want):
    if isinstance(want, str):
        with pytest.raises(ValueError, match=want):
            processor_record(config)
    else:
        recorded = processor_record(config).constant_methods
        assert {k: v for k, v in recorded.items() if k.startswith("image_m")
                or k.startswith("image_s")} == want


@pytest.mark.parametrize("config, words", [
    ({"size": {"shortest_edge": 8, "longest_edge": 16}}, "generate reproduces a shortest_edge"),
    ({"size": {"max_height": 8, "max_width": 8}}, "generate reproduces a shortest_edge"),
    ({"size": 8, "resample": "bicubic"}, "should be a Pillow filter code"),
    ({"size": 8, "resample": 9}, "resample=9 is not a Pillow filter code"),
])
def test_steps_generate_cannot_reproduce_are_not_recorded_and_say_why(config, words):
    with pytest.raises(PreprocessingConfigError, match=words):
        from_processor_config(config)
    record = processor_record(config)
    assert "image_preprocessing" not in record.constant_methods
    assert len(record.notes) == 1 and words in record.notes[0]
    assert "resizes a picture whole" in record.notes[0]


def test_a_record_of_another_layout_is_refused(tmp_path):
    steps = ImagePreprocessing(shortest_edge=11, crop_height=8, crop_width=8)
    assert ImagePreprocessing.from_constant(steps.constant()) == steps
    program = toy.write_program(tmp_path, name="future.pte",
                                constants={"image_mean": [0.5], "image_std": [0.5],
                                           "image_preprocessing": [2, 1, 2]})
    with pytest.raises(GenerateInputError, match="is not layout 1 .* upgrade, or pass a .npy"):
        read_program_info(program)
