"""`executorch-tensorrt generate` and `llm.generate_text` / `generate_multimodal`:
text from ExecuTorch's own TextLLMRunner and MultimodalRunner.

A tiny Llama exported by `llm.export` (TensorRT partitions, run through the
onnxruntime fallback here) streams eager greedy's tokens through the command
(a child process, stdout as it comes) and the library call; each bad input is
refused before a runner starts, with exit code 2 (3 for a damaged program).

The multimodal cases are runner-plumbing tests: a toy program lowered with
ExecuTorch's plain to_edge_transform_and_lower (tests/llm/toy_multimodal.py,
no TensorRT) checks how images, audio and prompts reach MultimodalRunner.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import wave

import numpy as np
import pytest
import torch

from executorch_tensorrt import llm
from executorch_tensorrt.llm.greedy_decode import greedy_decode
from executorch_tensorrt.llm.mel_features import MelFeatureSpec
from executorch_tensorrt.runtime.executor import FALLBACK_ENV
from runner_helpers import (BOS, CHARS, CONFIGS, EOS, TINY_MAX_CONTEXT, TINY_MAX_SEQ, encode,
                            write_char_tokenizer)
from tests.helpers import cli_main
import toy_multimodal as toy

MAX_SEQ, MAX_CONTEXT, NEW = TINY_MAX_SEQ, TINY_MAX_CONTEXT, 12
PROMPT = "Hello,TensorRT!"
STATS = re.compile(r"^stats: (prompt|generated) tokens: (\d+) \((?:([\d.]+) tokens/s|under 1 ms)\)$"
                   r"|^stats: (time to first token|model load): ([\d.]+) s$", re.M)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return write_char_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="module")
def llama(tiny_llama_pte):
    return tiny_llama_pte


@pytest.fixture(scope="module")
def eager_text() -> str:
    model = llm.causal_lm(CONFIGS["llama"])
    tokens = greedy_decode(llm.eager_decoder(model, MAX_CONTEXT), encode(PROMPT), NEW).tokens
    assert EOS not in tokens and len(set(tokens)) > 1  # a real sequence of printable pieces
    return "".join(CHARS[t] for t in tokens)


@pytest.fixture(scope="module")
def toy_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("toy")
    toy.write_program(folder, audio=True)
    return folder


# The toy's audio_encoder takes [1, 8, 16]: log-mel features of 1 s at 800 Hz.
MEL = MelFeatureSpec(sampling_rate=800, n_fft=100, hop_length=50, n_mels=8, chunk_samples=800)


@pytest.fixture(scope="module")
def mel_toy(tmp_path_factory):
    """The toy program recording a Whisper-style feature extractor's parameters."""
    return toy.write_program(tmp_path_factory.mktemp("mel-toy"), audio=True, name="mel.pte",
                             constants=MEL.constant_methods())


def _write_wav(path, pcm: np.ndarray, rate: int) -> None:
    """int16 `pcm` [samples, channels] as a PCM .wav."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(pcm.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def _stats(stderr: str) -> dict[str, float]:
    found = {}
    for m in STATS.finditer(stderr):
        if m.group(1):
            found[f"{m.group(1)} tokens"] = int(m.group(2))
        else:
            found[m.group(4)] = float(m.group(5))
    return found


def test_command_streams_eager_greedy_text_and_the_runner_stats(llama, tokenizer, eager_text):
    """A child process: the text on stdout is eager greedy's, then the stats lines."""
    r = subprocess.run([sys.executable, "-m", "executorch_tensorrt", "generate", str(llama),
                        "--tokenizer", str(tokenizer), "--prompt", PROMPT,
                        "--max-new-tokens", str(NEW)],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, FALLBACK_ENV: "onnxruntime"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == eager_text + "\n"
    assert "note: TextLLMRunner ran" in r.stderr
    stats = _stats(r.stderr)
    assert stats["prompt tokens"] == len(PROMPT)
    assert stats["generated tokens"] == NEW - 1  # the runner counts those after prefill's
    assert {"time to first token", "model load"} <= stats.keys()


def test_generate_text_returns_the_text_pieces_and_stats(llama, tokenizer, eager_text,
                                                         allow_fallback):
    streamed: list[str] = []
    result = llm.generate_text(llama, tokenizer, PROMPT, max_new_tokens=NEW,
                               on_token=streamed.append)
    assert result.text == eager_text and streamed == result.pieces == list(eager_text)
    assert result.runner == "TextLLMRunner"
    assert (result.stats.prompt_tokens, result.stats.generated_tokens) == (len(PROMPT), NEW - 1)
    assert result.stats.time_to_first_token_s >= 0


def test_generation_stops_at_the_end_of_the_context(llama, tokenizer, allow_fallback):
    """Without a bound, or with one past the context, the runner is given the
    room left after the prompt (48 - 15 = 33): ExecuTorch's TextLLMRunner left
    to itself budgets the whole context for a program whose max_seq_len is
    below its max_context_len, and runs past the cache."""
    model = llm.causal_lm(CONFIGS["llama"])
    room = MAX_CONTEXT - len(PROMPT)
    want = greedy_decode(llm.eager_decoder(model, MAX_CONTEXT), encode(PROMPT), room).tokens
    want = want[:want.index(EOS) + 1] if EOS in want else want
    result = llm.generate_text(llama, tokenizer, PROMPT)
    assert result.max_new_tokens == room
    assert [CHARS.index(p) if p in CHARS else EOS for p in result.pieces] == want
    code, out, err = cli_main("generate", llama, "--tokenizer", tokenizer, "--prompt", PROMPT,
                              "--max-new-tokens", 100)
    assert code == 0, err
    assert out == result.text + "\n"
    assert f"--max-new-tokens 100 was cut to {room}" in err


def _other_tokenizer(folder):
    """The char tokenizer with 200 more special tokens than the program embeds."""
    path = write_char_tokenizer(folder)
    spec = json.loads(path.read_text())
    base = len(spec["model"]["vocab"])
    spec["added_tokens"] += [{"id": base + i, "content": f"<extra{i}>", "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False,
                              "special": True} for i in range(200)]
    path.write_text(json.dumps(spec))
    return path


def _damaged(folder, llama):
    path = folder / "damaged.pte"
    path.write_bytes(llama.read_bytes()[:4096])
    return path


@pytest.mark.parametrize("case, code, words", [
    ("long_prompt", 2, ["the prompt is 60 tokens", "48 positions (get_max_context_len)",
                        "at most 47", "max_context_len"]),
    ("other_tokenizer", 2, ["has 296 tokens", "embeds 96 (get_vocab_size)",
                            "tokenizer of the model"]),
    ("not_a_tokenizer", 2, ["is not one ExecuTorch's runners read", "tokenizer.json"]),
    ("image_on_text", 2, ["an image was given", "text-only decoder", "no vision_encoder",
                          "leave the image out"]),
    ("missing_program", 2, ["does not exist"]),
    ("damaged_program", 3, ["ExecuTorch cannot load the program", "export it again"]),
    ("empty_prompt", 2, ["the prompt is empty"]),
])
def test_text_program_bad_inputs(case, code, words, llama, tokenizer, tmp_path, allow_fallback):
    args = {"program": llama, "--tokenizer": tokenizer, "--prompt": PROMPT}
    if case == "long_prompt":
        args["--prompt"] = "x" * 60
    elif case == "other_tokenizer":
        args["--tokenizer"] = _other_tokenizer(tmp_path)
    elif case == "not_a_tokenizer":
        (tmp_path / "notes.txt").write_text("hello, not a tokenizer\n")
        args["--tokenizer"] = tmp_path / "notes.txt"
    elif case == "image_on_text":
        np.save(tmp_path / "image.npy", np.zeros(toy.IMAGE_SHAPE[1:], np.float32))
        args["--image"] = tmp_path / "image.npy"
    elif case == "missing_program":
        args["program"] = tmp_path / "none.pte"
    elif case == "damaged_program":
        args["program"] = _damaged(tmp_path, llama)
    elif case == "empty_prompt":
        args["--prompt"] = ""
    got, out, err = cli_main("generate", args.pop("program"),
                             *[a for kv in args.items() for a in kv])
    assert got == code, err
    assert out == ""  # refused before anything was generated
    for w in words:
        assert w in err, (w, err)


# ---- multimodal: runner plumbing over a toy program ---------------------------

def _image(seed: int) -> torch.Tensor:
    return torch.randn(toy.IMAGE_SHAPE[1:], generator=torch.Generator().manual_seed(seed))


def _audio(seed: int) -> torch.Tensor:
    return torch.randn(toy.AUDIO_SHAPE, generator=torch.Generator().manual_seed(seed))


def _ids(pieces: list[str]) -> list[int]:
    return [CHARS.index(p) if p in CHARS else BOS if p == "<s>" else EOS for p in pieces]


def test_multimodal_tokens_are_the_eager_models_for_each_image_and_audio(toy_dir, tokenizer,
                                                                        tmp_path):
    """Image then prompt, audio then prompt, both: MultimodalRunner's greedy
    tokens equal the eager module's on the same schedule, and another image
    gives other tokens (the image reaches the decoder)."""
    program = toy_dir / "toy_multimodal.pte"
    seen = []
    for image, audio in ((0, None), (1, None), (None, 2), (0, 2)):
        files = {}
        if image is not None:
            np.save(tmp_path / f"image{image}.npy", _image(image).numpy())
            files["image"] = tmp_path / f"image{image}.npy"
        if audio is not None:
            np.save(tmp_path / f"audio{audio}.npy", _audio(audio).numpy())
            files["audio"] = tmp_path / f"audio{audio}.npy"
        result = llm.generate_multimodal(program, tokenizer, "Hello", max_new_tokens=10, **files)
        want = toy.eager_tokens("Hello", 10, image=None if image is None else _image(image),
                                audio=None if audio is None else _audio(audio))
        assert _ids(result.pieces) == want, (image, audio)
        assert result.runner == "MultimodalRunner"
        assert result.stats.prompt_tokens == toy.MEDIA_TOKENS * len(files) + len("Hello")
        seen.append(tuple(want))
    assert len(set(seen)) == len(seen)


def test_multimodal_command_takes_an_hwc_image_and_a_wav(toy_dir, tokenizer, tmp_path):
    """An [H, W, C] .npy and a .wav of the encoder's [1, channels, samples]."""
    program = toy_dir / "toy_multimodal.pte"
    np.save(tmp_path / "hwc.npy", _image(3).permute(1, 2, 0).numpy())
    code, out, err = cli_main("generate", program, "--tokenizer", tokenizer, "--prompt", "Hi",
                              "--image", tmp_path / "hwc.npy", "--max-new-tokens", 8)
    assert code == 0, err
    assert _ids(list(out.rstrip("\n"))) == toy.eager_tokens("Hi", 8, image=_image(3))
    assert _stats(err)["prompt tokens"] == toy.MEDIA_TOKENS + 2

    samples = (_audio(4)[0].T.clamp(-1, 1) * 32767).to(torch.int16)  # [frames, channels]
    with wave.open(str(tmp_path / "sound.wav"), "wb") as w:
        w.setnchannels(toy.AUDIO_SHAPE[1])
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(samples.numpy().tobytes())
    code, out, err = cli_main("generate", program, "--tokenizer", tokenizer, "--prompt", "Hi",
                              "--audio", tmp_path / "sound.wav", "--max-new-tokens", 8)
    assert code == 0, err
    heard = samples.T[None].float() / 32768
    assert _ids(list(out.rstrip("\n"))) == toy.eager_tokens("Hi", 8, audio=heard)


def test_a_stereo_wav_is_mixed_to_mono_as_the_processor_does(mel_toy, tokenizer, tmp_path):
    """Two channels averaged, then the feature extractor's features (transformers'
    WhisperFeatureExtractor on the mean): the eager module's tokens on them."""
    import transformers
    from test_mel_features import processor_features

    tone = np.sin(2 * np.pi * 200 / MEL.sampling_rate * np.arange(700))  # left: a tone
    noise = np.random.default_rng(7).standard_normal(700)                 # right: noise
    pcm = (np.stack([tone, noise], 1) * 8000).astype(np.int16)
    _write_wav(tmp_path / "stereo.wav", pcm, MEL.sampling_rate)
    code, out, err = cli_main("generate", mel_toy, "--tokenizer", tokenizer, "--prompt", "Hi",
                              "--audio", tmp_path / "stereo.wav", "--image",
                              _save(tmp_path / "image.npy", _image(0)), "--max-new-tokens", 8)
    assert code == 0, err
    assert "note: stereo.wav: 2 channels mixed down to mono" in err
    extractor = transformers.WhisperFeatureExtractor(
        feature_size=MEL.n_mels, sampling_rate=MEL.sampling_rate, hop_length=MEL.hop_length,
        n_fft=MEL.n_fft, chunk_length=1)
    heard = processor_features(extractor, (pcm.astype(np.float32) / 32768).mean(axis=1))
    want = toy.eager_tokens("Hi", 8, image=_image(0), audio=torch.from_numpy(heard))
    assert _ids(list(out.rstrip("\n"))) == want
    mono = toy.eager_tokens("Hi", 8, image=_image(0), audio=torch.from_numpy(
        processor_features(extractor, pcm[:, 0].astype(np.float32) / 32768)))
    assert mono != want  # the mix reached the encoder, not one channel


def _save(path, tensor: torch.Tensor):
    np.save(path, tensor.numpy())
    return path


def test_raw_image_and_audio_files_in_the_encoders_layout(toy_dir, tokenizer, tmp_path):
    _image(5).numpy().tofile(tmp_path / "image.raw")
    _audio(6).numpy().tofile(tmp_path / "audio.bin")
    result = llm.generate(toy_dir / "toy_multimodal.pte", tokenizer, "Hi", max_new_tokens=6,
                          image=tmp_path / "image.raw", audio=tmp_path / "audio.bin")
    assert _ids(result.pieces) == toy.eager_tokens("Hi", 6, image=_image(5), audio=_audio(6))


def _picture(seed: int, size: tuple[int, int], mode: str = "RGB"):
    from PIL import Image

    values = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], len(mode)),
                                                  dtype=np.uint8)
    return Image.fromarray(values[..., 0] if mode == "L" else values, mode)


def _normalized(image, mean: float, std: float) -> torch.Tensor:
    """What the model's processor gives for a picture already at the encoder's
    size: RGB channels first, scaled to [0, 1], then (x - mean) / std."""
    chw = torch.from_numpy(np.asarray(image.convert("RGB"), np.float32)).permute(2, 0, 1)
    return (chw / 255 - mean) / std


def test_png_and_jpeg_pictures_are_resized_and_normalized(toy_dir, tokenizer, tmp_path):
    """A PNG of another size (resized with a note), a grey JPEG of the
    encoder's size: the tokens are the eager module's on the processor's
    pixels, and two pictures give different tokens."""
    from PIL import Image

    program = toy_dir / "toy_multimodal.pte"
    _picture(1, (16, 12)).save(tmp_path / "photo.png")
    code, out, err = cli_main("generate", program, "--tokenizer", tokenizer, "--prompt", "Hi",
                              "--image", tmp_path / "photo.png", "--image-mean", "0.5",
                              "0.4", "0.3", "--image-std", "0.25", "--max-new-tokens", 8)
    assert code == 0, err
    assert "photo.png (12x16, HxW) was resized to the vision_encoder's 8x8" in err
    with Image.open(tmp_path / "photo.png") as png:
        small = png.resize((8, 8), Image.Resampling.BICUBIC)
    mean = torch.tensor([0.5, 0.4, 0.3])[:, None, None]
    pixels = (_normalized(small, 0, 1) - mean) / 0.25
    png_tokens = toy.eager_tokens("Hi", 8, image=pixels)
    result = llm.generate(program, tokenizer, "Hi", image=tmp_path / "photo.png",
                          image_mean=[0.5, 0.4, 0.3], image_std=[0.25], max_new_tokens=8)
    assert _ids(result.pieces) == png_tokens and out.rstrip("\n") == result.text
    assert len(result.notes) == 1 and "resized" in result.notes[0]

    _picture(2, (8, 8), "L").save(tmp_path / "grey.jpg", quality=95)
    result = llm.generate(program, tokenizer, "Hi", image=tmp_path / "grey.jpg",
                          image_mean=[0.5], image_std=[0.5], max_new_tokens=8)
    assert result.notes == ()
    with Image.open(tmp_path / "grey.jpg") as jpg:  # lossy: the decoded values
        want = toy.eager_tokens("Hi", 8, image=_normalized(jpg, 0.5, 0.5))
    assert _ids(result.pieces) == want and want != png_tokens


def test_a_program_recording_its_processor_normalization_needs_no_options(tokenizer,
                                                                           tmp_path):
    """optimum writes preprocessor_config.json's image_mean / image_std as
    constant methods: a PNG is normalized with them."""
    program = toy.write_program(tmp_path, name="recorded.pte",
                                constants={"image_mean": [0.5, 0.5, 0.5],
                                           "image_std": [0.2, 0.2, 0.2]})
    _picture(3, (8, 8)).save(tmp_path / "photo.png")
    result = llm.generate(program, tokenizer, "Hi", image=tmp_path / "photo.png",
                          max_new_tokens=8)
    from PIL import Image

    with Image.open(tmp_path / "photo.png") as png:
        want = toy.eager_tokens("Hi", 8, image=_normalized(png, 0.5, 0.2))
    assert _ids(result.pieces) == want


def test_a_picture_without_pillow_names_the_extra(toy_dir, tokenizer, tmp_path, monkeypatch):
    _picture(4, (8, 8)).save(tmp_path / "photo.png")
    monkeypatch.setitem(sys.modules, "PIL", None)  # what an environment without it raises
    code, out, err = cli_main("generate", toy_dir / "toy_multimodal.pte", "--tokenizer",
                              tokenizer, "--prompt", "Hi", "--image", tmp_path / "photo.png",
                              "--image-mean", "0.5", "--image-std", "0.5")
    assert code == 2 and out == ""
    for w in ("needs Pillow", "pip install 'executorch-tensorrt[image]'", ".npy"):
        assert w in err, (w, err)


@pytest.mark.parametrize("case, words", [
    ("no_image", ["encodes an image (float32 [1, 3, 8, 8])", "--image"]),
    ("small_image", ["has shape [3, 4, 8]", "vision_encoder takes float32 [1, 3, 8, 8]",
                     "Resize it to 8x8 with 3 channels"]),
    ("four_channels", ["has shape [8, 8, 4]", "with 3 channels"]),
    ("uint8_image", ["is uint8", "vision_encoder takes float32", "Save the array as float32"]),
    ("png_image", ["does not record that normalization", "--image-mean and --image-std",
                   "preprocessor_config.json"]),
    ("damaged_png", ["image.png cannot be read as a picture"]),
    ("text_image", ["reads pictures (.png, .jpg", ".npy arrays", "raw .raw/.bin"]),
    ("mean_without_std", ["give image_mean and image_std together"]),
    ("mean_for_npy", ["normalize picture files", "image.npy is taken as the processor's "
                      "output", "leave them out"]),
    ("two_means", ["image_mean has 2 values", "3 channels: give 1 or 3"]),
    ("short_raw_image", ["holds 700 bytes",
                         "takes float32 [1, 3, 8, 8], 768 bytes of raw float32"]),
    ("mono_wav", ["1 channel(s) of 16 samples (0.001 s at 16000 Hz)",
                  "audio_encoder takes float32 [1, 8, 16]", "pad or trim it to 16 samples",
                  "WhisperFeatureExtractor", "numpy.save"]),
    ("wav_rate", ["sampled at 16000 Hz", "feature extractor takes 8000 Hz", "resample"]),
    ("mel_wav_rate", ["sampled at 16000 Hz", "feature extractor takes 800 Hz",
                      "sox speech.wav -r 800 out.wav"]),
    ("empty_wav", ["speech.wav holds no samples"]),
    ("short_wav", ["is 50 samples (62.5 ms at 800 Hz)", "n_fft=100 samples (125.0 ms)",
                   "give at least that much"]),
    ("long_wav", ["is 2.12 s (1700 samples at 800 Hz), 3 chunks of 1 s",
                  "takes at most 1 chunk(s) (1 s)", "pieces of at most 1 s",
                  "larger max_audio_chunks"]),
    ("old_log_mel_wav", ["takes float32 [1, 8, 16], log-mel features",
                         "does not record its feature extractor's parameters",
                         "get_audio_sampling_rate", "Export it again", "as a .npy"]),
    ("audio_without_encoder", ["an audio was given", "no audio_encoder", "leave the audio out"]),
    ("no_token_embedding", ["no method 'token_embedding'", "MultimodalRunner needs"]),
    ("no_forward", ["no method 'forward'", "TextLLMRunner"]),
    ("no_limits", ["no method 'get_max_context_len'", "constant methods"]),
    ("long_prompt", ["the prompt is 41 tokens", "take at most 40 at once", "max_seq_len"]),
    ("context_full", ["fill 48 positions (8 for the media, 40 for the prompt)",
                      "holds 48 (get_max_context_len)", "needs one free"]),
])
def test_multimodal_bad_inputs(case, words, toy_dir, mel_toy, tokenizer, tmp_path):
    program = toy_dir / "toy_multimodal.pte"  # vision and audio
    np.save(tmp_path / "image.npy", _image(0).numpy())
    args = ["--image", tmp_path / "image.npy"]
    prompt = "Hello"
    if case == "no_image":
        args = []
    elif case == "small_image":
        np.save(tmp_path / "image.npy", np.zeros((3, 4, 8), np.float32))
    elif case == "four_channels":
        np.save(tmp_path / "image.npy", np.zeros((8, 8, 4), np.float32))
    elif case == "uint8_image":
        np.save(tmp_path / "image.npy", np.zeros((3, 8, 8), np.uint8))
    elif case == "short_raw_image":
        (tmp_path / "image.raw").write_bytes(bytes(700))
        args = ["--image", tmp_path / "image.raw"]
    elif case in ("png_image", "damaged_png"):
        (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n")
        args = ["--image", tmp_path / "image.png"]
        if case == "damaged_png":
            args += ["--image-mean", "0.5", "--image-std", "0.5"]
    elif case == "text_image":
        (tmp_path / "image.txt").write_text("a cat")
        args = ["--image", tmp_path / "image.txt"]
    elif case in ("mean_without_std", "two_means"):
        _picture(0, (8, 8)).save(tmp_path / "image.png")
        args = ["--image", tmp_path / "image.png", "--image-mean", "0.5", "0.5"] + (
            ["--image-std", "1"] if case == "two_means" else [])
    elif case == "mean_for_npy":
        args += ["--image-mean", "0.5", "--image-std", "0.5"]
    elif case in ("mono_wav", "wav_rate"):
        with wave.open(str(tmp_path / "mono.wav"), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes(bytes(32))
        args += ["--audio", tmp_path / "mono.wav"]
        if case == "wav_rate":  # a program recording its feature extractor's rate
            program = toy.write_program(tmp_path, audio=True, name="rate.pte",
                                        constants={"sampling_rate": 8000})
    elif case in ("mel_wav_rate", "empty_wav", "short_wav", "long_wav"):
        program = mel_toy
        count = {"empty_wav": 0, "short_wav": 50, "long_wav": 1700}.get(case, 16000)
        _write_wav(tmp_path / "speech.wav", np.ones((count, 1), np.int16),
                   16000 if case == "mel_wav_rate" else MEL.sampling_rate)
        args += ["--audio", tmp_path / "speech.wav"]
    elif case == "old_log_mel_wav":  # a log-mel encoder, no extractor's parameters
        program = toy.write_program(tmp_path, audio=True, name="old.pte",
                                    constants={"get_audio_n_mels": 8, "get_audio_frames": 16})
        _write_wav(tmp_path / "speech.wav", np.ones((800, 1), np.int16), MEL.sampling_rate)
        args += ["--audio", tmp_path / "speech.wav"]
    elif case == "audio_without_encoder":
        np.save(tmp_path / "audio.npy", _audio(0).numpy())
        program = toy.write_program(tmp_path, name="vision_only.pte")
        args += ["--audio", tmp_path / "audio.npy"]
    elif case == "no_token_embedding":
        program = toy.write_program(tmp_path, vision=False, drop=("token_embedding",),
                                    name="broken.pte")
    elif case == "no_forward":
        program = toy.write_program(tmp_path, vision=False, name="renamed.pte",
                                    rename={"token_embedding": "embed",
                                            "text_decoder": "decoder"})
        args = []
    elif case == "no_limits":
        program = toy.write_program(tmp_path, vision=False, name="no_limits.pte",
                                    drop=("get_max_context_len",))
    elif case == "long_prompt":
        prompt = "x" * 41
    elif case == "context_full":
        prompt = "x" * 40
        np.save(tmp_path / "audio.npy", _audio(0).numpy())
        args += ["--audio", tmp_path / "audio.npy"]
    code, out, err = cli_main("generate", program, "--tokenizer", tokenizer, "--prompt", prompt,
                              *args)
    assert code == 2, err
    assert out == ""
    for w in words:
        assert w in err, (w, err)


def test_each_call_refuses_the_other_kind_of_program(toy_dir, llama, tokenizer):
    with pytest.raises(llm.GenerateInputError, match="is a multimodal program .* use "
                                                     "generate_multimodal"):
        llm.generate_text(toy_dir / "toy_multimodal.pte", tokenizer, "Hi")
    with pytest.raises(llm.GenerateInputError, match="is a text-only program .* use "
                                                     "generate_text"):
        llm.generate_multimodal(llama, tokenizer, "Hi")
