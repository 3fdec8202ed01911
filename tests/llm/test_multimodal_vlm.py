"""ExecuTorch's own `MultimodalRunner` (executorch wheel) runs vision-language
programs written by `executorch_tensorrt.llm.export_multimodal`: for tiny
random LLaVA (CLIP + Llama), Idefics3 (SigLIP-style + pixel shuffle + Llama,
weights in a .ptd, through the `llm-export --task image-text-to-text`
command from a saved model folder whose image processor's steps the program
records, so `generate` prepares a PNG as the processor does), InternVL
(InternViT + Qwen2, through the command from a config alone: random
weights) and Aya Vision (SigLIP + Cohere2
with sliding-window layers), an image between two text parts gives the
tokens transformers' own greedy `generate` gives on the same image and
prompt. Every method is one TensorRT partition (run here through the
onnxruntime fallback). Bad requests and exports are refused naming the
input, the limit and the remedy."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from executorch_tensorrt import llm
from executorch_tensorrt.errors import ExportError
from executorch_tensorrt.llm.multimodal_inputs import (check_image, check_prompt,
                                                       read_multimodal_limits)
from runner_helpers import BOS, CHARS, EOS, encode, write_char_tokenizer
from tests.helpers import cli_main

IMAGE, BOI, EOI = 96, 97, 98                  # special tokens after the 94 characters, <s>, </s>
SPECIAL = {"<image>": IMAGE, "<boi>": BOI, "<eoi>": EOI}
VOCAB = 99
MAX_SEQ, MAX_CONTEXT, NEW = 16, 64, 10
BEFORE, AFTER = "Look:", "What?"

_TEXT = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
             bos_token_id=BOS, eos_token_id=EOS, pad_token_id=0, use_cache=True,
             initializer_range=0.5)  # 0.02 gives one repeated token at this size
_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
               num_attention_heads=4, image_size=32, patch_size=8)
FAMILIES = {
    "llava": {"model_type": "llava", "image_token_id": IMAGE, "image_seq_length": 16,
              "vision_feature_layer": -1,
              "text_config": {"model_type": "llama", **_TEXT},
              "vision_config": {"model_type": "clip_vision_model", **_VISION,
                                "projection_dim": 32}},
    "idefics3": {"model_type": "idefics3", "image_token_id": IMAGE, "scale_factor": 2,
                 "tie_word_embeddings": True,  # token_embedding's table is text_decoder's head
                 "text_config": {"model_type": "llama", **_TEXT, "tie_word_embeddings": True},
                 "vision_config": _VISION},
    "internvl": {"model_type": "internvl", "image_token_id": IMAGE, "downsample_ratio": 0.5,
                 "text_config": {"model_type": "qwen2", **_TEXT},
                 "vision_config": {"model_type": "internvl_vision", **_VISION,
                                   "image_size": [32, 32], "patch_size": [8, 8]}},
    "aya_vision": {"model_type": "aya_vision", "image_token_id": IMAGE, "downsample_factor": 2,
                   "text_config": {"model_type": "cohere2", **_TEXT, "sliding_window": 16},
                   "vision_config": {"model_type": "siglip_vision_model", **_VISION}},
}
IMAGE_TOKENS = {"llava": 16, "idefics3": 4, "internvl": 4, "aya_vision": 4}
_NESTED = ("idefics3", "smolvlm")  # transformers takes its pixel_values as [batch, images, C, H, W]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return write_char_tokenizer(tmp_path_factory.mktemp("tokenizer"), SPECIAL)


def _export_in_process(name, folder: Path):
    result = llm.export_multimodal(FAMILIES[name], output=folder / f"{name}.pte",
                                   max_seq_len=MAX_SEQ, max_context_len=MAX_CONTEXT,
                                   progress=None)
    for method, report in result.export.reports.items():
        assert len(report.partitions) == 1 and not report.rejected, (method, report.rejected)
    assert result.image.tokens == IMAGE_TOKENS[name]
    return result.path, None


MEAN, STD = [0.5, 0.4, 0.3], [0.25, 0.25, 0.5]  # the folder's processor normalization


def _idefics3_processor():
    """The model folder's image processor: Idefics3's, at the tiny model's
    32 pixels (the longest edge to 64, then the 32x32 square), with its
    default image splitting on."""
    import transformers

    return transformers.Idefics3ImageProcessorPil(
        size={"longest_edge": 64}, max_image_size={"longest_edge": 32}, image_mean=MEAN,
        image_std=STD)


def _export_by_command(name, folder: Path):
    """`llm-export --model FOLDER`: a saved model with its processor."""
    out = folder / f"{name}.pte"
    llm.vision_language_model(FAMILIES[name]).save_pretrained(folder / "model")
    _idefics3_processor().save_pretrained(folder / "model")
    code, stdout, stderr = cli_main(
        "llm-export", out, "--task", "image-text-to-text", "--model", folder / "model",
        "--max-seq-len", MAX_SEQ, "--max-context-len", MAX_CONTEXT, "--external-weights")
    assert code == 0, stderr[-3000:]
    assert "partition report" in stderr and "text_decoder" in stderr
    assert f"get_image_tokens={IMAGE_TOKENS[name]}" in stderr
    assert "note: the image processor cuts pictures into tiles (do_image_splitting)" in stderr
    ptd = out.with_suffix(".ptd")
    assert f"wrote {out} + {ptd}" in stdout
    return out, ptd


def _export_by_config(name, folder: Path):
    """`llm-export --config CONFIG_JSON`: random weights from the config (the
    seed the eager reference uses), the image size given."""
    out = folder / f"{name}.pte"
    (folder / "config.json").write_text(json.dumps(FAMILIES[name]))
    code, stdout, stderr = cli_main(
        "llm-export", out, "--task", "image-text-to-text", "--config", folder / "config.json",
        "--max-seq-len", MAX_SEQ, "--max-context-len", MAX_CONTEXT, "--image-size", 32)
    assert code == 0, stderr[-3000:]
    assert f"get_image_tokens={IMAGE_TOKENS[name]}" in stderr
    assert "image 32x32 -> 4 embeddings" in stderr
    assert stdout.strip() == f"wrote {out}"
    return out, None


EXPORTS = {"idefics3": _export_by_command, "internvl": _export_by_config}


@pytest.fixture(scope="module", params=list(FAMILIES))
def program(request, tmp_path_factory):
    name = request.param
    folder = tmp_path_factory.mktemp(name)
    pte, ptd = EXPORTS.get(name, _export_in_process)(name, folder)
    return name, pte, ptd


def _image(seed: int) -> torch.Tensor:
    return torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(seed))


def _runner(pte, ptd, tokenizer):
    from executorch.extension.llm.runner import MultimodalRunner

    return MultimodalRunner(str(pte), str(tokenizer), str(ptd) if ptd else None)


def _runner_tokens(runner, image: torch.Tensor) -> list[int]:
    from executorch.extension.llm.runner import (GenerationConfig, make_image_input,
                                                 make_text_input)

    pieces: list[str] = []
    runner.generate([make_text_input(BEFORE), make_image_input(image), make_text_input(AFTER)],
                    GenerationConfig(echo=False, max_new_tokens=NEW, temperature=0.0),
                    pieces.append)
    ids = ({c: i for i, c in enumerate(CHARS)} | {"<s>": BOS, "</s>": EOS, "": EOS}
           | SPECIAL)
    return [ids[p] for p in pieces]


def _eager_tokens(name: str, image: torch.Tensor) -> list[int]:
    """transformers' own greedy `generate` (image placeholders in the prompt,
    pixel_values) on the same image and prompt."""
    model = llm.vision_language_model(FAMILIES[name])
    ids = torch.tensor([encode(BEFORE) + [IMAGE] * IMAGE_TOKENS[name] + encode(AFTER)])
    pixels = image[None, None] if name in _NESTED else image[None]
    model.generation_config.eos_token_id = None  # all NEW tokens: the runner goes past a first EOS
    with torch.no_grad():
        out = model.generate(input_ids=ids, pixel_values=pixels, attention_mask=torch.ones_like(ids),
                             max_new_tokens=NEW, do_sample=False)
    return out[0, ids.shape[1]:].tolist()


def test_runner_generates_transformers_greedy_tokens(program, tokenizer, allow_fallback):
    name, pte, ptd = program
    runner = _runner(pte, ptd, tokenizer)
    for seed in (1, 2):
        image = _image(seed)
        got = _runner_tokens(runner, image)
        want = _eager_tokens(name, image)
        # The runner stops after an EOS it generates (not after the prefill's token).
        assert got == want[:len(got)], (seed, got, want)
        assert len(got) == NEW or (got[-1] == EOS and len(got) > 1), (seed, got, want)
        assert len(set(got)) > 1  # a real sequence, not one repeated token
        runner.reset()


@pytest.mark.parametrize("program", ["idefics3"], indirect=True)  # exported with a .ptd
def test_weights_are_stored_once_across_methods(program):
    """Idefics3 with tied embeddings: the table token_embedding gathers from is
    the head text_decoder multiplies by; the .ptd holds it once (named data are
    keyed by content), so it holds no more than the model's own parameters
    plus less than that table again."""
    from executorch_tensorrt.program.named_data import read_ptd_index

    name, pte, ptd = program
    assert ptd is not None
    model = llm.vision_language_model(FAMILIES[name])
    table = model.get_input_embeddings().weight
    assert table is model.get_output_embeddings().weight
    params = sum(p.numel() * p.element_size() for p in model.parameters())  # tied: once
    stored = sum(read_ptd_index(ptd).values())
    assert params <= stored < params + table.numel() * table.element_size(), (stored, params)


def test_limits_are_read_back_and_bad_requests_are_refused(program, allow_fallback):
    from executorch.runtime import Runtime

    name, pte, ptd = program
    loaded = Runtime.get().load_program(pte, data_path=ptd) if ptd else \
        Runtime.get().load_program(pte)
    limits = read_multimodal_limits(loaded)
    assert (limits.image.channels, limits.image.height, limits.image.width,
            limits.image.tokens, limits.image.token_id) == (3, 32, 32, IMAGE_TOKENS[name], IMAGE)
    assert (limits.text.max_seq_len, limits.text.max_context_len) == (MAX_SEQ, MAX_CONTEXT)
    check_image(limits, _image(1))
    check_prompt(limits, [len(BEFORE), "image", len(AFTER)], NEW)
    bad_images = [
        (_image(1)[:, :16], "the image is 16x32 (HxW); the program's vision_encoder takes 32x32: "
                            "resize it"),
        (torch.rand(4, 32, 32), "the image has 4 channels; the program's vision_encoder takes 3 "
                                "(RGB)"),
        ((_image(1) * 255).to(torch.uint8), "the image is uint8; the program's vision_encoder "
                                            "takes float32 [3, 32, 32]"),
    ]
    for image, words in bad_images:
        with pytest.raises(ValueError) as e:
            check_image(limits, image)
        assert words in str(e.value)
    with pytest.raises(ValueError) as e:
        check_prompt(limits, [MAX_SEQ + 1, "image"], NEW)
    assert f"text part 0 is {MAX_SEQ + 1} tokens" in str(e.value)
    assert f"at most max_seq_len={MAX_SEQ}" in str(e.value)
    images = MAX_CONTEXT // IMAGE_TOKENS[name]
    with pytest.raises(ValueError) as e:
        check_prompt(limits, ["image"] * images, NEW)
    assert f"beyond max_context_len={MAX_CONTEXT}" in str(e.value)


@pytest.mark.parametrize("program", ["llava"], indirect=True)  # one family shows them
def test_what_the_runner_itself_says_to_a_wrong_image(program, tokenizer, allow_fallback):
    """Without check_image: ExecuTorch's runner raises a RuntimeError carrying
    only an error code (the cause goes to its log); docs/multimodal.md shows it."""
    name, pte, ptd = program
    from executorch.extension.llm.runner import (GenerationConfig, make_image_input,
                                                 make_text_input)

    config = GenerationConfig(echo=False, max_new_tokens=2, temperature=0.0)
    for image in (torch.rand(3, 16, 32), (_image(1) * 255).to(torch.uint8)):
        runner = _runner(pte, ptd, tokenizer)
        with pytest.raises(RuntimeError):
            runner.generate([make_text_input(BEFORE), make_image_input(image)], config)


@pytest.mark.parametrize("kwargs, words", [
    ({"max_seq_len": 8}, "an image becomes 16 embeddings, which MultimodalRunner prefills in "
                             "one text_decoder call, but max_seq_len=8; use max_seq_len >= 16"),
    ({"max_seq_len": 16, "max_context_len": 16},
     "an image takes 16 cache positions, leaving no room in max_context_len=16"),
    ({"max_context_len": 129}, "max_context_len=129 is beyond the model's 128 positions"),
    ({"image_size": (32, 32, 3)}, "image_size must be an int or (height, width)"),
])
def test_bad_exports_name_the_limit(kwargs, words, tmp_path):
    args = {"max_seq_len": MAX_SEQ, "max_context_len": MAX_CONTEXT, **kwargs}
    with pytest.raises(ValueError) as e:
        llm.export_multimodal(FAMILIES["llava"], output=tmp_path / "x.pte",
                              progress=None, **args)
    assert words in str(e.value)
    assert not (tmp_path / "x.pte").exists()


def test_a_family_the_runner_cannot_run_is_refused_with_the_reason(tmp_path):
    config = {"model_type": "qwen2_vl", "image_token_id": IMAGE,
              "text_config": {"model_type": "qwen2_vl_text", **_TEXT,
                              "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 2]}},
              "vision_config": {"depth": 1, "embed_dim": 32, "hidden_size": 32, "num_heads": 4,
                                "patch_size": 8, "spatial_merge_size": 2}}
    with pytest.raises(ExportError) as e:
        llm.export_multimodal(config, output=tmp_path / "x.pte", max_seq_len=MAX_SEQ,
                              max_context_len=MAX_CONTEXT, progress=None)
    assert "3-D rotary positions (M-RoPE)" in str(e.value)
    assert "llava" in str(e.value)  # the families that do run


@pytest.mark.parametrize("program", ["idefics3"], indirect=True)  # exported from a folder
def test_generate_prepares_a_png_as_the_recorded_processor(program, tokenizer, tmp_path,
                                                           allow_fallback):
    """A program exported from a model folder records its processor's steps;
    `generate` prepares a non-square PNG with them (the single image the
    processor gives without splitting, noted) and decodes the tokens of the
    processor's pixels passed as .npy, which are transformers' greedy tokens
    (image, then prompt)."""
    name, pte, ptd = program
    import numpy as np
    from PIL import Image

    values = np.random.default_rng(5).integers(0, 256, (24, 40, 3), dtype=np.uint8)
    Image.fromarray(values, "RGB").save(tmp_path / "photo.png")
    processor = _idefics3_processor()
    processor.do_image_splitting = False
    pixels = processor(Image.open(tmp_path / "photo.png"), return_tensors="pt")["pixel_values"]
    assert pixels.shape == (1, 1, 3, 32, 32)
    np.save(tmp_path / "pixels.npy", pixels[0, 0].numpy())
    result = llm.generate(pte, tokenizer, AFTER, image=tmp_path / "photo.png", data=ptd,
                          max_new_tokens=NEW)
    assert len(result.notes) == 1 and "with do_image_splitting off" in result.notes[0]
    from_npy = llm.generate(pte, tokenizer, AFTER, image=tmp_path / "pixels.npy", data=ptd,
                            max_new_tokens=NEW)
    assert result.pieces == from_npy.pieces
    model = llm.vision_language_model(FAMILIES[name])
    ids = torch.tensor([[IMAGE] * IMAGE_TOKENS[name] + encode(AFTER)])
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = model.generate(input_ids=ids, pixel_values=pixels,
                             attention_mask=torch.ones_like(ids), max_new_tokens=NEW,
                             do_sample=False)
    want = out[0, ids.shape[1]:].tolist()
    got = [({c: i for i, c in enumerate(CHARS)} | {"<s>": BOS, "</s>": EOS, "": EOS}
            | SPECIAL)[p] for p in result.pieces]
    assert got and got == want[:len(got)] and len(set(want)) > 1, (got, want)
