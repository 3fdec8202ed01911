"""An audio-language model (transformers' Voxtral from a tiny random config),
saved with its feature extractor and exported by `llm-export --task
audio-text-to-text --model FOLDER` (`llm.audio.export_audio_llm`), runs in ExecuTorch's own
MultimodalRunner: a `make_audio_input` of log-mel features and a token
prompt decode eager's greedy tokens; every method is on TensorRT. The
program records its feature extractor's parameters, so `generate` takes a
.wav and decodes what the extractor's own features give. Bad audio inputs
are refused with the input, the limit and the remedy named."""
from __future__ import annotations

import json
import wave

import numpy as np
import pytest
import torch
import transformers

from executorch_tensorrt.llm.mel_features import MelFeatureSpec
from executorch_tensorrt.llm.multimodal_inputs import AudioSpec, check_audio_features, read_audio_spec
from executorch_tensorrt.llm.runner_inputs import read_program_info
from executorch_tensorrt.aot.partition.report import read_report
from runner_helpers import BOS, CHARS, EOS, VOCAB, write_char_tokenizer
from tests.helpers import cli_main

N_MELS, FRAMES, AUDIO_TOKENS = 8, 32, 4  # 16 positions, 4 per token
PROMPT, NEW = [5, 6, 7], 10


def _voxtral():
    config = transformers.VoxtralConfig(
        audio_config={"hidden_size": 32, "intermediate_size": 128, "num_hidden_layers": 2,
                      "num_attention_heads": 4, "num_mel_bins": N_MELS,
                      "max_source_positions": FRAMES // 2},
        text_config={"model_type": "llama", "vocab_size": VOCAB, "hidden_size": 32,
                     "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 64,
                     "bos_token_id": BOS, "eos_token_id": EOS},
        audio_token_id=VOCAB - 3)
    torch.manual_seed(0)
    return transformers.VoxtralForConditionalGeneration(config).eval()


def _eager_greedy(model, features, prompt, n):
    """The model's own modules, no cache: audio embeddings, then the prompt's."""
    lm, embed = model.model.language_model, model.model.language_model.embed_tokens
    with torch.no_grad():
        embeds = torch.cat([model.get_audio_features(features).pooler_output[None],
                            embed(torch.tensor([prompt]))], 1)
        out = []
        for _ in range(n):
            logits = model.lm_head(lm(inputs_embeds=embeds, use_cache=False).last_hidden_state)
            out.append(int(logits[0, -1].argmax()))
            embeds = torch.cat([embeds, embed(torch.tensor([[out[-1]]]))], 1)
    return out


def feature_extractor():
    """A Whisper feature extractor making the tiny encoder's [8, 32] per chunk
    of 1 s at 1600 Hz (built here: nothing is downloaded)."""
    return transformers.WhisperFeatureExtractor(
        feature_size=N_MELS, sampling_rate=1600, hop_length=50, chunk_length=1, n_fft=100)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The command a user runs on a model folder; the folder's
    preprocessor_config.json gives the feature extractor's parameters."""
    folder = tmp_path_factory.mktemp("voxtral")
    model = _voxtral()
    model.save_pretrained(folder / "model")
    feature_extractor().save_pretrained(folder / "model")
    out = folder / "model.pte"
    # Two chunks: one text_decoder call of 8 holds 2 x 4 audio tokens.
    code, stdout, stderr = cli_main(
        "llm-export", out, "--task", "audio-text-to-text", "--model", folder / "model",
        "--max-seq-len", 8, "--max-context-len", 48, "--max-audio-chunks", 2)
    assert code == 0, stderr[-3000:]
    assert stdout.strip() == f"wrote {out}"
    assert f"get_audio_tokens={AUDIO_TOKENS}" in stderr and "get_max_context_len=48" in stderr
    return model, out, write_char_tokenizer(folder)


def test_multimodal_runner_decodes_eagers_greedy_tokens(exported, allow_fallback):
    from executorch.extension.llm.runner import (GenerationConfig, MultimodalRunner,
                                                 make_audio_input, make_token_input)

    model, result, tokenizer = exported
    torch.manual_seed(1)
    features = torch.randn(1, N_MELS, FRAMES)
    pieces: list[str] = []
    MultimodalRunner(str(result), str(tokenizer)).generate(
        [make_audio_input(features), make_token_input(PROMPT)],
        GenerationConfig(echo=False, max_new_tokens=NEW, temperature=0.0),
        token_callback=pieces.append)
    ids = {c: i for i, c in enumerate(CHARS)} | {"<s>": BOS, "</s>": EOS, "": EOS}
    got = [ids[p] for p in pieces]
    want = _eager_greedy(model, features, PROMPT, NEW)
    assert got and got == want[:len(got)] and len(set(want)) > 2, (got, want)


def test_every_method_is_one_tensorrt_partition_owning_the_caches(exported):
    reports = read_report(exported[1])["methods"]
    assert sorted(reports) == ["audio_encoder", "text_decoder", "token_embedding"]
    for method, report in reports.items():
        assert report["nodes"] == report["nodes_on_tensorrt"] > 0, method
        assert report["partitions"] == 1, method
    caches = {k: v for k, v in reports["text_decoder"]["state"].items() if "_cache_" in k}
    assert len(caches) == 4 and all(v.startswith("owned by TensorRT") for v in caches.values())


def test_the_program_records_its_audio_input(exported, allow_fallback):
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(str(exported[1]))
    assert read_audio_spec(program) == AudioSpec(N_MELS, FRAMES, torch.float32, AUDIO_TOKENS)
    info = read_program_info(exported[1])
    assert info.mel == MelFeatureSpec(1600, 100, 50, N_MELS, 1600)
    assert info.encoders["audio"].shape == (2, N_MELS, FRAMES)  # up to two chunks


def test_generate_turns_a_wav_into_the_feature_extractors_features(exported, allow_fallback,
                                                                   tmp_path):
    """`generate --audio x.wav` of 1.6 s (two chunks of 1 s): the tokens of the
    same audio's features from transformers' WhisperFeatureExtractor (as
    Voxtral's processor cuts them) given as .npy, and eager's on them."""
    from executorch_tensorrt import llm
    from test_mel_features import processor_features
    model, result, tokenizer = exported
    pcm = (np.random.default_rng(3).standard_normal(2560) * 6000).astype(np.int16)
    with wave.open(str(tmp_path / "speech.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(1600)
        w.writeframes(pcm.tobytes())
    features = processor_features(feature_extractor(), pcm.astype(np.float32) / 32768)
    assert features.shape == (2, N_MELS, FRAMES)
    np.save(tmp_path / "features.npy", features.astype(np.float32))
    prompt = "".join(CHARS[t] for t in PROMPT)
    code, out, err = cli_main("generate", result, "--tokenizer", tokenizer, "--prompt",
                              prompt, "--audio", tmp_path / "speech.wav",
                              "--max-new-tokens", NEW)
    assert code == 0, err
    assert f"prompt tokens: {2 * AUDIO_TOKENS + len(PROMPT)} " in err
    from_npy = llm.generate(result, tokenizer, prompt, audio=tmp_path / "features.npy",
                            max_new_tokens=NEW)
    assert out.rstrip("\n") == from_npy.text
    ids = {c: i for i, c in enumerate(CHARS)}
    got = [ids[p] for p in from_npy.pieces if p in ids]
    want = _eager_greedy(model, torch.from_numpy(features), PROMPT, NEW)
    assert got and got == want[:len(got)] and len(set(want)) > 2, (got, want)


@pytest.mark.parametrize("features, words", [
    (torch.zeros(1, N_MELS, FRAMES - 2), ["30 frames", f"exactly {FRAMES}", "pad"]),
    (torch.zeros(1, N_MELS, FRAMES + 8), ["40 frames", "chunks of 32"]),
    (torch.zeros(1, N_MELS + 1, FRAMES), ["9 mel bins", "feature_size=8"]),
    (torch.zeros(1, N_MELS, FRAMES, dtype=torch.float16), ["float16", "float32", ".to("]),
    (torch.zeros(N_MELS, FRAMES), ["[8, 32]", "batch"]),
])
def test_bad_audio_features_name_input_limit_and_remedy(features, words):
    spec = AudioSpec(N_MELS, FRAMES, torch.float32, AUDIO_TOKENS)
    with pytest.raises(ValueError) as e:
        check_audio_features(features, spec)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_more_audio_tokens_than_the_context_holds_is_refused():
    spec = AudioSpec(N_MELS, FRAMES, torch.float32, AUDIO_TOKENS)
    check_audio_features(torch.zeros(1, N_MELS, FRAMES), spec, context_left=AUDIO_TOKENS)
    with pytest.raises(ValueError, match="becomes 4 tokens, but only 3 positions"):
        check_audio_features(torch.zeros(1, N_MELS, FRAMES), spec, context_left=3)


def test_export_refuses_audio_that_does_not_fit_one_decoder_call(tmp_path):
    from executorch_tensorrt.llm.audio import export_audio_llm

    with pytest.raises(ValueError, match="becomes 4 tokens.*max_seq_len >= 4"):
        export_audio_llm(_voxtral(), max_seq_len=3, max_context_len=48,
                         output=tmp_path / "model.pte", progress=None)


def test_export_refuses_a_feature_extractor_that_does_not_make_the_encoders_input(tmp_path):
    from executorch_tensorrt.llm.audio import export_audio_llm

    other = transformers.WhisperFeatureExtractor(feature_size=N_MELS, sampling_rate=1600,
                                                 hop_length=25, chunk_length=1, n_fft=100)
    with pytest.raises(ValueError, match=r"makes \[8, 64\] features per chunk \(1600 "
                                         r"samples / hop_length 25\); the audio encoder takes "
                                         r"\[8, 32\]"):
        export_audio_llm(_voxtral(), max_seq_len=8, max_context_len=48,
                         output=tmp_path / "model.pte", feature_extractor=other, progress=None)


def test_export_refuses_more_chunks_than_one_decoder_call_holds(tmp_path):
    from executorch_tensorrt.llm.audio import export_audio_llm

    with pytest.raises(ValueError, match="3 chunks of audio become 12 tokens.*"
                                         "max_seq_len=8; use max_audio_chunks <= 2"):
        export_audio_llm(_voxtral(), max_seq_len=8, max_context_len=48, max_audio_chunks=3,
                         output=tmp_path / "model.pte", progress=None)


@pytest.mark.parametrize("task, extra, words", [
    ("audio-text-to-text", ["--quantize", "int8_weight_only"],
     "--quantize is not taken by --task audio-text-to-text"),
    ("audio-text-to-text", ["--image-size", "32"], "--image-size is for --task image-text-to-text"),
    ("text-generation", ["--max-audio-chunks", "2"],
     "--max-audio-chunks is for --task audio-text-to-text"),
])
def test_llm_export_refuses_options_the_task_does_not_take(tmp_path, task, extra, words):
    config = _voxtral().config.to_dict() if task == "audio-text-to-text" else \
        _voxtral().config.text_config.to_dict()
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, stdout, stderr = cli_main("llm-export", tmp_path / "m.pte", "--task", task,
                                    "--config", tmp_path / "config.json", "--max-seq-len", 8,
                                    "--max-context-len", 48, *extra)
    assert code == 2 and words in stderr, stderr[-2000:]
    assert not (tmp_path / "m.pte").exists()
