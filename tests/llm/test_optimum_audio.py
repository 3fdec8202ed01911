"""optimum-executorch's `main_export(..., task="multimodal-text-to-text",
recipe="tensorrt")` of a Voxtral writes, through `llm.audio.export_audio_llm`,
a program that optimum's own `ExecuTorchModelForMultiModalToText` loads and
decodes with the tokens transformers' greedy `generate` gives on the same
log-mel features and prompt, every method on TensorRT, and the feature
extractor's parameters recorded for `generate --audio x.wav` (tiny random Voxtral
and a WhisperFeatureExtractor saved to a local folder; optimum runs in a
child interpreter with build/optimum-site on its path)."""
from __future__ import annotations

import json

import torch
import transformers

from executorch_tensorrt.llm.mel_features import MelFeatureSpec
from runner_helpers import BOS, write_char_tokenizer
from test_audio_llm import AUDIO_TOKENS, FRAMES, N_MELS, _voxtral
from test_optimum_recipe import _child

NEW = 10
RUN = """
import json, os, sys, torch
import executorch_tensorrt
from optimum.exporters.executorch import main_export
model_dir, out, tokenizer_file, prompts = sys.argv[1:5]
main_export(model_dir, task="multimodal-text-to-text", recipe="tensorrt", output_dir=out,
            local_files_only=True, max_length=48, recipe_kwargs={"progress": None})
from optimum.executorch import ExecuTorchModelForMultiModalToText
from transformers import PreTrainedTokenizerFast
model = ExecuTorchModelForMultiModalToText.from_pretrained(out)
model.tokenizer = PreTrainedTokenizerFast(tokenizer_file=tokenizer_file)  # it prints tokens
tokens = []
for chunks, prompt in enumerate(json.loads(prompts), 1):  # one chunk of audio, then two
    ids = torch.tensor([prompt])
    features = torch.randn(chunks, %d, %d, generator=torch.Generator().manual_seed(chunks))
    tokens.append(model.generate(ids, echo=True, max_seq_len=ids.shape[1] + %d,
                                 multimodal_features=features))
print()
report = json.load(open(os.path.join(out, "model.report.json")))
from executorch_tensorrt.llm.runner_inputs import read_program_info
mel = read_program_info(os.path.join(out, "model.pte")).mel  # what generate makes a .wav into
try:  # an option of the image export: refused before any export
    main_export(model_dir, task="multimodal-text-to-text", recipe="tensorrt",
                output_dir=out + "-q", local_files_only=True, max_length=48,
                recipe_kwargs={"image_size": 16})
    refusal = None
except TypeError as e:
    refusal = str(e)
print(json.dumps({"files": sorted(os.listdir(out)), "tokens": tokens, "modality": model.modality,
                  "report": report, "refusal": refusal, "mel": mel and mel.constant_methods()}))
""" % (N_MELS, FRAMES, NEW)


def _eager_tokens(model, ids: list[int], chunks: int) -> list[int]:
    """transformers' own greedy `generate` (audio placeholders in the prompt,
    input_features) on the features the child makes."""
    features = torch.randn(chunks, N_MELS, FRAMES,
                           generator=torch.Generator().manual_seed(chunks))
    ids = torch.tensor([ids])
    model.generation_config.eos_token_id = None  # all NEW tokens
    with torch.no_grad():
        out = model.generate(input_ids=ids, input_features=features,
                             attention_mask=torch.ones_like(ids), max_new_tokens=NEW,
                             do_sample=False)
    return out[0, ids.shape[1]:].tolist()


def test_optimum_runs_the_recipes_voxtral_program_as_transformers(tmp_path, allow_fallback):
    model = _voxtral()
    model.save_pretrained(tmp_path / "model")
    # A Whisper feature extractor of the tiny model's mel bins and frames: its
    # preprocessor_config.json becomes optimum's metadata, as a real Voxtral's does.
    transformers.WhisperFeatureExtractor(
        feature_size=N_MELS, sampling_rate=1600, hop_length=50, chunk_length=1,
        n_fft=100).save_pretrained(tmp_path / "model")
    tokenizer = write_char_tokenizer(tmp_path)
    audio = model.config.audio_token_id
    # A processor's longer audio comes as several chunks, their tokens in one run.
    prompts = [[BOS, 5] + [audio] * (AUDIO_TOKENS * chunks) + [6, 7, 8] for chunks in (1, 2)]
    done = _child(RUN, str(tmp_path / "model"), str(tmp_path / "out"), str(tokenizer),
                  json.dumps(prompts))
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["files"] == ["model.pte", "model.report.json"]
    assert result["modality"] == "audio"
    # The folder's preprocessor_config.json, recorded for `generate --audio x.wav`.
    assert result["mel"] == MelFeatureSpec(1600, 100, 50, N_MELS, 1600).constant_methods()
    for chunks, (prompt, got) in enumerate(zip(prompts, result["tokens"]), 1):
        want = _eager_tokens(model, prompt, chunks)
        # optimum stops after its eos id; the tokens before it are eager's.
        assert got and got == want[:len(got)] and len(set(want)) > 2, (chunks, got, want)
    assert "multimodal-text-to-text takes recipe_kwargs max_seq_len" in result["refusal"]
    assert "image_size do not apply" in result["refusal"]
    methods = result["report"]["methods"]
    assert sorted(methods) == ["audio_encoder", "text_decoder", "token_embedding"]
    for method, entry in methods.items():  # every node on TensorRT, one engine each
        assert entry["partitions"] == 1 and entry["nodes_on_tensorrt"] == entry["nodes"], method
