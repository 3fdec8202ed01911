"""`executorch-tensorrt generate`: text from an LLM program through
ExecuTorch's own runners (TextLLMRunner, or MultimodalRunner for a program
with vision/audio encoders), streamed to stdout as it is generated, then the
runner's stats on stderr (llm/generation.py; docs/generate.md)."""
from __future__ import annotations

import sys

from ..exits import EXIT_OK, EXIT_RUN, EXIT_USAGE, Fail
from .common import add_command, add_data_argument, data_path


def register(sub) -> None:
    p = add_command(
        sub, "generate",
        help="generate text with ExecuTorch's LLM runners (docs/generate.md)",
        description="Runs PROGRAM in ExecuTorch's TextLLMRunner (a decoder from llm-export) "
                    "or MultimodalRunner (methods vision_encoder / audio_encoder, "
                    "token_embedding, text_decoder), chosen by its methods. The text goes to "
                    "stdout as it is generated; the runner's stats ('stats: ...' lines) to "
                    "stderr.")
    p.add_argument("program", help="the .pte")
    p.add_argument("--tokenizer", metavar="FILE", required=True,
                   help="the model's tokenizer (HF tokenizer.json, tiktoken, SentencePiece "
                        ".model, llama2.c .bin)")
    p.add_argument("--prompt", metavar="TEXT", required=True,
                   help="the prompt, as the model takes it (write its chat template in)")
    p.add_argument("--image", metavar="FILE",
                   help="an image for vision_encoder: a PNG/JPEG (needs Pillow: "
                        "executorch-tensorrt[image]; resized and cropped as the processor the "
                        "program records, else whole to the encoder's size), a .npy "
                        "([H, W, C] or [C, H, W]) in its input size and dtype, or .raw/.bin "
                        "values in its layout")
    p.add_argument("--image-mean", type=float, nargs="+", metavar="M",
                   help="the processor's image_mean (per channel, or one) a PNG/JPEG is "
                        "normalized with for a float32 vision_encoder (default: the program's "
                        "recorded one)")
    p.add_argument("--image-std", type=float, nargs="+", metavar="S",
                   help="the processor's image_std, with --image-mean")
    p.add_argument("--audio", metavar="FILE",
                   help="audio for audio_encoder: a PCM .wav (made into the log-mel features "
                        "of the feature extractor the program records, at its sampling rate; "
                        "docs/generate.md), or .npy (or .raw/.bin) features")
    p.add_argument("--max-new-tokens", type=int, metavar="N",
                   help="stop after N tokens (default: at EOS or the end of the context)")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T",
                   help="sampling temperature (default 0: greedy)")
    add_data_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ...llm.generation import GenerateInputError, GenerateRunError, generate
    from ..runner import check_program_file

    path = check_program_file(args.program)
    data = data_path(path, args.data)

    def stream(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    try:
        result = generate(path, args.tokenizer, args.prompt, image=args.image, audio=args.audio,
                          image_mean=args.image_mean, image_std=args.image_std,
                          max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                          data=data, on_token=stream)
    except GenerateInputError as e:
        raise Fail(EXIT_USAGE, str(e)) from None
    except GenerateRunError as e:
        raise Fail(EXIT_RUN, str(e)) from None
    sys.stdout.write("\n")
    sys.stdout.flush()
    if args.max_new_tokens is not None and args.max_new_tokens > result.max_new_tokens:
        print(f"note: --max-new-tokens {args.max_new_tokens} was cut to "
              f"{result.max_new_tokens}, the room the program's context leaves after the "
              "prompt", file=sys.stderr)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"note: {result.runner} ran {path}", file=sys.stderr)
    for line in result.stats.lines():
        print(f"stats: {line}", file=sys.stderr)
    return EXIT_OK
