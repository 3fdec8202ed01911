"""optimum-executorch's `main_export(..., task="multimodal-text-to-text",
recipe="tensorrt")` on an audio-language model (tiny random Voxtral saved to a
local folder) writes, through `llm.audio.export_audio_llm`, a program that
optimum's own `ExecuTorchModelForMultiModalToText` loads and decodes with
eager's greedy tokens from random log-mel features (optimum runs in a child
interpreter with build/optimum-site on its path)."""
from __future__ import annotations

import json

import torch

from runner_helpers import write_char_tokenizer
from test_audio_llm import FRAMES, N_MELS, PROMPT, _eager_greedy, _voxtral
from test_optimum_recipe import _child

NEW = 10
RUN = """
import json, os, sys, torch
import executorch_tensorrt
from optimum.exporters.executorch import main_export
model_dir, out, tokenizer_file, prompt = sys.argv[1:5]
main_export(model_dir, task="multimodal-text-to-text", recipe="tensorrt", output_dir=out,
            local_files_only=True, max_length=48, recipe_kwargs={"progress": None})
from optimum.executorch import ExecuTorchModelForMultiModalToText
from transformers import PreTrainedTokenizerFast
model = ExecuTorchModelForMultiModalToText.from_pretrained(out)
model.tokenizer = PreTrainedTokenizerFast(tokenizer_file=tokenizer_file)  # it prints tokens
ids = torch.tensor([json.loads(prompt)])
torch.manual_seed(1)
features = torch.randn(1, %d, %d)
tokens = model.generate(ids, echo=True, max_seq_len=ids.shape[1] + %d,
                        multimodal_features=features)
print()
print(json.dumps({"files": sorted(os.listdir(out)), "tokens": tokens,
                  "modality": model.modality}))
""" % (N_MELS, FRAMES, NEW)


def test_optimum_decodes_the_recipes_voxtral_program_as_eager(tmp_path, allow_fallback):
    model = _voxtral()
    model.save_pretrained(tmp_path / "model")
    tokenizer = write_char_tokenizer(tmp_path)
    torch.manual_seed(1)
    features = torch.randn(1, N_MELS, FRAMES)
    with torch.no_grad():
        audio_tokens = model.get_audio_features(features).pooler_output.shape[0]
    prompt = [model.config.audio_token_id] * audio_tokens + PROMPT
    done = _child(RUN, str(tmp_path / "model"), str(tmp_path / "out"), str(tokenizer),
                  json.dumps(prompt))
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["files"] == ["model.pte", "model.report.json"]
    assert result["modality"] == "audio"
    want = _eager_greedy(model, features, PROMPT, NEW)
    got = result["tokens"]
    # optimum stops after its eos id: the tokens before it are eager's.
    assert got and got == want[:len(got)] and len(set(got)) > 1, (got, want)
