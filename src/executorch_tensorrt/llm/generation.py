"""Text generation through ExecuTorch's own LLM runners, one call per model
kind: `generate_text` (a decoder written by `llm.export`, run by
`TextLLMRunner`) and `generate_multimodal` (vision/audio-language programs
with `vision_encoder` / `audio_encoder`, `token_embedding` and
`text_decoder`, run by `MultimodalRunner`); `generate` picks by the program's
methods. The `executorch-tensorrt generate` command is this module.

Everything the runner would refuse mid-run (or abort on) is checked first
(llm/runner_inputs.py). Each piece of text goes to `on_token` as the runner
produces it; the result carries the whole text and the runner's own Stats.
The runners are run in their `warming` mode: the only switch that stops them
from printf-ing every piece and a report to the process's stdout, which a
library call must not do; their Stats are kept the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from .image_files import PICTURE_SUFFIXES, Normalization, PictureError
from .runner_inputs import (
    ENCODERS,
    GenerateInputError,
    GenerateRunError,
    ProgramInfo,
    check_tokenizer,
    load_tokenizer,
    prompt_tokens,
    read_audio,
    read_image,
    read_program_info,
)

__all__ = ["GenerateInputError", "GenerateRunError", "GeneratedText", "GenerationStats",
           "generate", "generate_multimodal", "generate_text"]

TokenCallback = Callable[[str], None]


@dataclass(frozen=True)
class GenerationStats:
    """The runner's Stats (its clock counts milliseconds): a rate is None when
    its span was under one tick."""

    prompt_tokens: int
    generated_tokens: int   # after the first, which prefill gives (the runner's count)
    model_load_s: float
    time_to_first_token_s: float
    prompt_tokens_per_s: float | None
    generated_tokens_per_s: float | None

    @classmethod
    def from_runner(cls, s) -> GenerationStats:
        unit = float(s.SCALING_FACTOR_UNITS_PER_SECOND)
        prompt_s = (s.prompt_eval_end_ms - s.inference_start_ms) / unit
        decode_s = (s.inference_end_ms - s.prompt_eval_end_ms) / unit
        return cls(
            prompt_tokens=int(s.num_prompt_tokens),
            generated_tokens=int(s.num_generated_tokens),
            model_load_s=(s.model_load_end_ms - s.model_load_start_ms) / unit,
            time_to_first_token_s=(s.first_token_ms - s.inference_start_ms) / unit,
            prompt_tokens_per_s=s.num_prompt_tokens / prompt_s if prompt_s > 0 else None,
            generated_tokens_per_s=s.num_generated_tokens / decode_s if decode_s > 0 else None)

    def lines(self) -> list[str]:
        def rate(r: float | None) -> str:
            return f"{r:.1f} tokens/s" if r is not None else "under 1 ms"

        return [f"prompt tokens: {self.prompt_tokens} ({rate(self.prompt_tokens_per_s)})",
                f"generated tokens: {self.generated_tokens} "
                f"({rate(self.generated_tokens_per_s)})",
                f"time to first token: {self.time_to_first_token_s:.3f} s",
                f"model load: {self.model_load_s:.3f} s"]


@dataclass(frozen=True)
class GeneratedText:
    text: str               # the generated text (without the prompt)
    pieces: list[str]       # the runner's pieces, one per token
    stats: GenerationStats
    runner: str             # "TextLLMRunner" or "MultimodalRunner"
    max_new_tokens: int     # the bound the runner was given (the context's room, at most)
    notes: tuple[str, ...] = ()  # what was done to the inputs (a picture resized, ...)


def _check_options(max_new_tokens: int | None, temperature: float) -> None:
    if max_new_tokens is not None and max_new_tokens < 1:
        raise GenerateInputError(f"max_new_tokens is {max_new_tokens}: give 1 or more "
                                 "(or None: until EOS or the end of the context)")
    if temperature < 0:
        raise GenerateInputError(f"temperature is {temperature}: give 0 (greedy) or more")


def _config(max_new_tokens: int | None, temperature: float, occupied: int,
            info: ProgramInfo):
    """The runner's GenerationConfig with max_new_tokens bounded by the room
    left in the context. Always explicit: with max_new_tokens=-1 and
    max_seq_len < max_context_len (chunked prefill, how llm.export writes
    programs) TextLLMRunner takes the program for a sliding-window one and
    budgets the whole context after the prompt, running past the cache."""
    from executorch.extension.llm.runner import GenerationConfig

    room = info.limits.max_context_len - occupied
    bound = room if max_new_tokens is None else min(max_new_tokens, room)
    return GenerationConfig(echo=False, warming=True, temperature=float(temperature),
                            max_new_tokens=bound)


def _prepare(program, tokenizer, data, multimodal: bool) -> tuple[ProgramInfo, object]:
    info = read_program_info(program, data)
    if info.multimodal != multimodal:
        raise GenerateInputError(
            f"program {info.path} is a {'multimodal' if info.multimodal else 'text-only'} "
            f"program (methods {', '.join(sorted(info.methods))}): use "
            f"{'generate_multimodal' if info.multimodal else 'generate_text'}")
    tok = load_tokenizer(tokenizer)
    check_tokenizer(tok, tokenizer, info)
    return info, tok


def _run(runner_class: str, info: ProgramInfo, tokenizer, inputs, config,
         on_token: TokenCallback | None, notes: tuple[str, ...] = ()) -> GeneratedText:
    import executorch_tensorrt
    from executorch.extension.llm import runner as llm_runner

    pieces: list[str] = []
    stats: list = []

    def piece(text: str) -> None:
        pieces.append(text)
        if on_token is not None:
            on_token(text)

    data = str(info.data_path) if info.data_path else None
    earlier = executorch_tensorrt.last_error()  # a cause recorded before this run is not its
    try:
        runner = getattr(llm_runner, runner_class)(str(info.path), str(tokenizer), data)
        runner.generate(inputs, config, token_callback=piece, stats_callback=stats.append)
    except RuntimeError as e:
        recorded = executorch_tensorrt.last_error()
        lines = recorded.strip().splitlines() if recorded != earlier else []
        cause = f". The backend says: {lines[0].rstrip('.')}" if lines else ""
        raise GenerateRunError(f"{runner_class} failed on {info.path}: {e}{cause}. "
                               "ExecuTorch's log above names the step.") from None
    if not stats:
        raise GenerateRunError(f"{runner_class} returned without its stats: the generation "
                               "did not finish")
    return GeneratedText("".join(pieces), pieces, GenerationStats.from_runner(stats[0]),
                         runner_class, config.max_new_tokens, notes)


def generate_text(program: str | Path, tokenizer: str | Path, prompt: str, *,
                  max_new_tokens: int | None = None, temperature: float = 0.0,
                  data: str | Path | None = None,
                  on_token: TokenCallback | None = None) -> GeneratedText:
    """Generate from `prompt` with a decoder program written by
    `executorch_tensorrt.llm.export`, through ExecuTorch's TextLLMRunner.

    program, data: the .pte and, when the weights are outside it, its .ptd.
    tokenizer: the model's tokenizer file (HF tokenizer.json, tiktoken,
        SentencePiece, llama2.c), read by the runner itself.
    max_new_tokens: at most this many tokens (None: until EOS or the end of
        the program's context; more than the context has room for is cut to
        that room, `GeneratedText.max_new_tokens`); temperature 0 is greedy.
    on_token: called with each piece of text as it is generated.

    Raises GenerateInputError (before anything runs) for a prompt longer than
    the program's context, a tokenizer of another model, a program without
    `forward`; GenerateRunError when ExecuTorch cannot load or run it."""
    _check_options(max_new_tokens, temperature)
    info, tok = _prepare(program, tokenizer, data, multimodal=False)
    tokens = prompt_tokens(tok, prompt, info)
    config = _config(max_new_tokens, temperature, len(tokens), info)
    return _run("TextLLMRunner", info, tokenizer, prompt, config, on_token)


def generate_multimodal(program: str | Path, tokenizer: str | Path, prompt: str, *,
                        image: str | Path | None = None, audio: str | Path | None = None,
                        max_new_tokens: int | None = None, temperature: float = 0.0,
                        data: str | Path | None = None,
                        image_mean: Sequence[float] | None = None,
                        image_std: Sequence[float] | None = None,
                        on_token: TokenCallback | None = None) -> GeneratedText:
    """Generate from an image and/or audio followed by `prompt` with a
    multimodal program (methods `vision_encoder` and/or `audio_encoder`,
    `token_embedding`, `text_decoder` and the runner's constant methods),
    through ExecuTorch's MultimodalRunner.

    image: a picture (PNG, JPEG, ...; needs Pillow) resized, cropped and
        rescaled as the model's processor does when the program records its
        steps (llm-export --model, optimum's recipe), else resized whole to
        the vision encoder's input and scaled to [0, 1]; for a float32
        encoder normalized with `image_mean` / `image_std` (default: the
        ones the program records, else required); or a .npy array in the encoder's
        input shape ([H, W, C] or [C, H, W]) and dtype, preprocessed as the
        model's processor does; or a .raw/.bin file of its values in the
        encoder's layout.
    audio: a PCM .wav: for a Whisper-style audio encoder (Voxtral) made into
        log-mel features with the feature extractor's parameters the program
        records (stereo mixed to mono, audio longer than one chunk split into
        up to the encoder's most chunks); for an encoder of the waveform
        passed as [1, channels, samples]. Or a .npy (or .raw/.bin) of the
        encoder's features, [chunks, n_mels, frames].
    The inputs go to the runner in the order image, audio, prompt; the
    prompt is passed as given (write the model's chat template into it).
    Other arguments and errors as `generate_text`; a program with an encoder
    needs its input, and a missing encoder refuses the input."""
    from executorch.extension.llm.runner import make_audio_input, make_image_input, \
        make_text_input
    import torch

    _check_options(max_new_tokens, temperature)
    info, tok = _prepare(program, tokenizer, data, multimodal=True)
    given = {"image": image, "audio": audio}
    for kind, method in ENCODERS.items():
        if given[kind] is not None and kind not in info.encoders:
            raise GenerateInputError(
                f"an {kind} was given but program {info.path} has no {method} method "
                f"(its methods: {', '.join(sorted(info.methods))}): leave the {kind} out")
    if info.encoders and all(given[k] is None for k in info.encoders):
        wanted = " or ".join(f"an {k} ({info.encoders[k].describe()})" for k in info.encoders)
        raise GenerateInputError(f"program {info.path} encodes {wanted}: pass it "
                                 f"({' / '.join('--' + k for k in info.encoders)})")
    inputs, positions, notes = [], 0, ()
    decoder_max = info.decoder_chunk
    for kind, make in (("image", make_image_input), ("audio", make_audio_input)):
        if given[kind] is None:
            continue
        if kind == "image":
            if image_mean is not None and Path(image).suffix.lower() not in PICTURE_SUFFIXES:
                raise GenerateInputError(
                    f"image_mean / image_std (--image-mean / --image-std) normalize picture "
                    f"files; {image} is taken as the processor's output, as it is: leave "
                    "them out, or pass the picture itself")
            picture = read_image(given[kind], info.encoders[kind],
                                 _normalization(info, image_mean, image_std),
                                 info.image_preprocessing)
            array, notes = picture.array, (*notes, *picture.notes)
        else:
            audio = read_audio(given[kind], info)
            array, notes = audio.array, (*notes, *audio.notes)
        inputs.append(make(torch.from_numpy(array)))
        tokens = info.media_tokens[kind]
        if kind == "audio":  # an encoder of up to K chunks gives its tokens per chunk given
            tokens = tokens * array.shape[0] // info.encoders[kind].shape[0]
        positions += tokens
        if decoder_max is not None and tokens > decoder_max:
            raise GenerateInputError(
                f"program {info.path}'s {ENCODERS[kind]} gives {tokens} "
                f"embeddings but its text_decoder takes at most {decoder_max} at once: export "
                "the decoder with a max_seq_len of at least that")
    tokens = prompt_tokens(tok, prompt, info)
    context = info.limits.max_context_len
    if positions + len(tokens) >= context:
        raise GenerateInputError(
            f"the inputs fill {positions + len(tokens)} positions ({positions} for the media, "
            f"{len(tokens)} for the prompt); program {info.path} holds {context} "
            "(get_max_context_len) and needs one free to generate. Shorten the prompt or "
            "export with a larger max_context_len.")
    inputs.append(make_text_input(prompt))
    config = _config(max_new_tokens, temperature, positions + len(tokens), info)
    return _run("MultimodalRunner", info, tokenizer, inputs, config, on_token, notes)


def _normalization(info: ProgramInfo, mean, std) -> Normalization | None:
    """The caller's image_mean / image_std, else the program's own."""
    if (mean is None) != (std is None):
        raise GenerateInputError("give image_mean and image_std together (--image-mean and "
                                 "--image-std): the processor's normalization needs both")
    if mean is None and info.image_normalization is None:
        return None
    mean, std = (mean, std) if mean is not None else info.image_normalization
    try:
        return Normalization.of(mean, std, info.encoders["image"].shape[-3])
    except PictureError as e:
        raise GenerateInputError(str(e)) from None


def generate(program: str | Path, tokenizer: str | Path, prompt: str, *,
             image: str | Path | None = None, audio: str | Path | None = None,
             image_mean: Sequence[float] | None = None,
             image_std: Sequence[float] | None = None, **kwargs) -> GeneratedText:
    """`generate_multimodal` for a program with multimodal methods, else
    `generate_text` (which refuses an image or audio by name)."""
    info = read_program_info(program, kwargs.get("data"))
    if info.multimodal:
        return generate_multimodal(program, tokenizer, prompt, image=image, audio=audio,
                                   image_mean=image_mean, image_std=image_std, **kwargs)
    for kind, value in (("image", image), ("audio", audio)):
        if value is not None:
            raise GenerateInputError(
                f"an {kind} was given but program {info.path} is a text-only decoder (no "
                f"{ENCODERS[kind]} method; its methods: {', '.join(sorted(info.methods))}): "
                f"leave the {kind} out, or export the model's {ENCODERS[kind]} with it")
    return generate_text(program, tokenizer, prompt, **kwargs)
