"""optimum-executorch's `main_export(..., task="image-text-to-text",
recipe="tensorrt")` writes, through `llm.export_multimodal`, a program that
optimum's own `ExecuTorchModelForMultiModalToText` loads and decodes with the
tokens transformers' greedy `generate` gives on the same image and prompt
(tiny random LLaVA saved to a local folder with a CLIP image processor,
whose steps the program records for `generate`; optimum runs in a child
interpreter with build/optimum-site on its path)."""
from __future__ import annotations

import json

from executorch_tensorrt import llm
from runner_helpers import write_char_tokenizer
from test_multimodal_vlm import (AFTER, BEFORE, FAMILIES, IMAGE, IMAGE_TOKENS, SPECIAL,
                                 _eager_tokens, _image, encode)
from test_optimum_recipe import _child

NEW = 10
RUN = """
import json, os, sys, torch
import executorch_tensorrt
from optimum.exporters.executorch import main_export
model_dir, out, tokenizer_file, prompt = sys.argv[1:5]
main_export(model_dir, task="image-text-to-text", recipe="tensorrt", output_dir=out,
            local_files_only=True, max_length=48, recipe_kwargs={"progress": None})
from optimum.executorch import ExecuTorchModelForMultiModalToText
from transformers import PreTrainedTokenizerFast
model = ExecuTorchModelForMultiModalToText.from_pretrained(out)
model.tokenizer = PreTrainedTokenizerFast(tokenizer_file=tokenizer_file)  # it prints tokens
ids = torch.tensor([json.loads(prompt)])
pixels = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))  # _image(1)
tokens = model.generate(ids, echo=True, max_seq_len=ids.shape[1] + %d,
                        multimodal_features=pixels)
print()
print(json.dumps({"files": sorted(os.listdir(out)), "tokens": tokens}))
""" % NEW


def test_optimum_runs_the_recipes_program_as_transformers(tmp_path, allow_fallback):
    import transformers

    from executorch_tensorrt.llm.image_preprocessing import ImagePreprocessing
    from executorch_tensorrt.llm.runner_inputs import read_program_info

    model = llm.vision_language_model(FAMILIES["llava"])
    model.save_pretrained(tmp_path / "model")
    # LLaVA's CLIP processor at the tiny model's 32 pixels: optimum reads its
    # preprocessor_config.json, the recipe records its steps for generate.
    transformers.CLIPImageProcessorPil(
        size={"shortest_edge": 36}, crop_size={"height": 32, "width": 32},
        image_mean=[0.5, 0.4, 0.3], image_std=[0.25, 0.25, 0.5]).save_pretrained(
            tmp_path / "model")
    tokenizer = write_char_tokenizer(tmp_path, SPECIAL)
    prompt = encode(BEFORE) + [IMAGE] * IMAGE_TOKENS["llava"] + encode(AFTER)
    done = _child(RUN, str(tmp_path / "model"), str(tmp_path / "out"), str(tokenizer),
                  json.dumps(prompt))
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["files"] == ["model.pte", "model.report.json"]
    want = _eager_tokens("llava", _image(1))
    got = result["tokens"]
    # optimum stops after its eos id; the tokens before it are eager's.
    assert got and got == want[:len(got)], (got, want)
    assert len(set(got)) > 1
    info = read_program_info(tmp_path / "out" / "model.pte")
    assert info.image_preprocessing == ImagePreprocessing(
        shortest_edge=36, crop_height=32, crop_width=32, rescale_factor=1 / 255,
        convert_rgb=True)
    assert info.image_normalization == ((0.5, 0.4, 0.3), (0.25, 0.25, 0.5))
