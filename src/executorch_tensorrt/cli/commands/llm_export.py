"""`executorch-tensorrt llm-export`: the command form of
`executorch_tensorrt.llm.export` (a transformers causal LM -> a .pte that
ExecuTorch's LLM runner runs; docs/llm.md).

The model comes from a config (random weights: a config.json, or the JSON
text itself) or from a local transformers model folder; nothing is
downloaded. `--task image-text-to-text` exports a vision-language model
for ExecuTorch's MultimodalRunner instead (llm.export_multimodal,
docs/multimodal.md), `--task audio-text-to-text` an audio-language model
(Voxtral; llm.audio.export_audio_llm, docs/speech.md).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..exits import EXIT_EXPORT, EXIT_OK, EXIT_USAGE, Fail
from .common import add_command, add_quantize_options

TASKS = ("text-generation", "image-text-to-text", "audio-text-to-text")


def register(sub) -> None:
    p = add_command(
        sub, "llm-export",
        help="export a transformers causal LM for ExecuTorch's LLM runner (docs/llm.md)",
        description="Writes OUTPUT (.pte, + .ptd with --external-weights) with the method "
                    "forward(tokens[1, S], positions[S]) -> logits, its KV cache owned by "
                    "TensorRT, and the constant methods ExecuTorch's TextLLMRunner reads.")
    p.add_argument("output", help="the .pte to write")
    p.add_argument("--config", metavar="JSON",
                   help="a transformers config.json (or its JSON text): random weights")
    p.add_argument("--model", metavar="PATH",
                   help="a local transformers model folder, or a published quantized "
                        "checkpoint: a GPTQ / AWQ / compressed-tensors folder or a .gguf file "
                        "(weights kept packed; docs/checkpoints.md)")
    p.add_argument("--unsupported", choices=("refuse", "requantize"), default="refuse",
                   help="GGUF kinds TensorRT cannot run (Q5_K, Q6_K): refuse them, or "
                        "re-quantize them to int8 and report the worst weight error")
    p.add_argument("--max-seq-len", type=int, required=True,
                   help="most tokens per call (longer prompts go in chunks)")
    p.add_argument("--max-context-len", type=int,
                   help="the KV cache's positions: prompt plus generated tokens (with "
                        "--memory-budget: the most to choose)")
    p.add_argument("--memory-budget", metavar="SIZE",
                   help="GPU memory the program may take (8GB, 7.5GiB, 512MiB): the largest "
                        "--max-context-len that fits is chosen, or the export is refused "
                        "with each part's size (docs/llm.md, Memory)")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32")
    p.add_argument("--batch-size", type=int, default=1,
                   help="rows of the static KV cache (ExecuTorch's runner takes 1)")
    add_quantize_options(p, "; with a quantized checkpoint (--model), int8_weight_only only: "
                            "the layers it left float (embedding, lm_head), docs/checkpoints.md")
    p.add_argument("--kv-cache-dtype", choices=("fp8", "float8_e4m3fn"),
                   help="store the KV cache in fp8 e4m3 (scale 1.0; half of float16's bytes); "
                        "SM89+ targets only: give --compute-capability (docs/llm.md)")
    p.add_argument("--compute-capability", action="append", default=[], metavar="SM",
                   help="TensorRT-RTX target, e.g. SM89 (repeatable; default: all it supports)")
    p.add_argument("--external-weights", action="store_true",
                   help="store the weights in OUTPUT's .ptd beside it")
    p.add_argument("--no-run-check", action="store_true",
                   help="do not run the written program once and compare it with eager "
                        "(the check runs it in a child process: for a model that fits "
                        "memory once, not twice)")
    p.add_argument("--seed", type=int, default=0, help="random weights' seed (--config)")
    p.add_argument("--task", choices=TASKS, default="text-generation",
                   help="text-generation: a causal LM for TextLLMRunner (default); "
                        "image-text-to-text: a vision-language model for MultimodalRunner "
                        "(methods vision_encoder, token_embedding, text_decoder; "
                        "docs/multimodal.md); audio-text-to-text: an audio-language model "
                        "(Voxtral) for MultimodalRunner (audio_encoder, token_embedding, "
                        "text_decoder; docs/speech.md)")
    p.add_argument("--image-size", type=int, nargs="+", metavar="PIXELS",
                   help="image-text-to-text: the image's H W (or one size for both) that "
                        "vision_encoder takes (default: the vision config's image_size)")
    p.add_argument("--max-audio-chunks", type=int, metavar="N",
                   help="audio-text-to-text: the most chunks of audio (each the feature "
                        "extractor's chunk_length, 30 s for Voxtral) one audio_encoder call "
                        "takes (default 1)")
    p.set_defaults(func=run)


def _model(args):
    if (args.config is None) == (args.model is None):
        raise Fail(EXIT_USAGE, "give either --config (a config.json or its JSON text; random "
                                "weights) or --model (a local transformers model folder)")
    if args.model is not None:
        from ...llm.exporter import DTYPES
        from ...quantization.checkpoints import is_published_checkpoint

        if is_published_checkpoint(args.model):
            if args.task != "text-generation":
                raise Fail(EXIT_USAGE, f"--model {args.model} is a quantized checkpoint; "
                                        "those export as text-generation models only")
            from ...llm.checkpoint_model import FLOAT_LAYER_SCHEMES, from_checkpoint

            if args.quantize is not None and args.quantize not in FLOAT_LAYER_SCHEMES:
                raise Fail(EXIT_USAGE, f"--quantize {args.quantize} with the quantized "
                                        f"checkpoint {args.model}: its packed layers keep "
                                        "their own quantization; --quantize "
                                        f"{' or '.join(FLOAT_LAYER_SCHEMES)} stores the "
                                        "layers it left float (embedding, lm_head) in 8 bits")
            # The float layers are quantized as the checkpoint is read, not by export.
            scheme, args.quantize = args.quantize, None
            model, checkpoint = from_checkpoint(args.model, unsupported=args.unsupported,
                                                dtype=DTYPES.get(args.dtype),
                                                quantize_float=scheme)
            for note in checkpoint.notes:
                print(f"note: {note}", file=sys.stderr)
            return model
        if not Path(args.model).is_dir():
            raise Fail(EXIT_USAGE, f"--model {args.model}: not a folder (a local "
                                    "transformers model; nothing is downloaded) nor a .gguf "
                                    "file")
        import transformers

        auto = getattr(transformers, _AUTO[args.task])
        # Loaded in the export's dtype: a checkpoint stored in it is mapped,
        # not copied (nor converted after a float32 load).
        return auto.from_pretrained(args.model, local_files_only=True,
                                    dtype=DTYPES.get(args.dtype))
    text = args.config
    if not text.lstrip().startswith("{"):
        path = Path(text)
        if not path.is_file():
            raise Fail(EXIT_USAGE, f"--config {text}: no such file (give a config.json or "
                                    "the JSON text)")
        text = path.read_text()
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise Fail(EXIT_USAGE, f"--config: not JSON ({e})") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise Fail(EXIT_USAGE, "--config: a JSON object with a 'model_type' (e.g. "
                                '{"model_type": "llama", ...}) is needed')
    from ...llm.exporter import DTYPES, causal_lm

    return causal_lm(config, seed=args.seed, dtype=DTYPES[args.dtype],
                     auto_class=_AUTO[args.task])


_AUTO = {"text-generation": "AutoModelForCausalLM",
         "image-text-to-text": "AutoModelForImageTextToText",
         "audio-text-to-text": "AutoModelForMultimodalLM"}


def _check_task_options(args) -> None:
    """Options the task does not take, refused before the model is loaded."""
    task = args.task
    if task != "image-text-to-text" and args.image_size is not None:
        raise Fail(EXIT_USAGE, "--image-size is for --task image-text-to-text")
    if task != "audio-text-to-text" and args.max_audio_chunks is not None:
        raise Fail(EXIT_USAGE, "--max-audio-chunks is for --task audio-text-to-text")
    if task == "text-generation":
        return
    # a program for MultimodalRunner
    if args.memory_budget is not None or args.max_context_len is None:
        raise Fail(EXIT_USAGE, f"--task {task} takes --max-context-len (no --memory-budget)")
    if args.batch_size != 1:
        raise Fail(EXIT_USAGE, "--batch-size: MultimodalRunner runs batch 1 programs only")
    if args.kv_cache_dtype is not None:
        raise Fail(EXIT_USAGE, "--kv-cache-dtype is for --task text-generation (the "
                                "multimodal export keeps its cache in --dtype)")
    if args.image_size is not None and len(args.image_size) not in (1, 2):
        raise Fail(EXIT_USAGE, "--image-size: give H W, or one size for both")
    if task == "audio-text-to-text" and args.quantize is not None:
        raise Fail(EXIT_USAGE, "--quantize is not taken by --task audio-text-to-text: its "
                                "export keeps the weights in --dtype")


def _export(args, model, out: Path):
    common = dict(max_seq_len=args.max_seq_len, max_context_len=args.max_context_len,
                  dtype=args.dtype, quantize=args.quantize, group_size=args.group_size,
                  external_weights=args.external_weights, output=out)
    if args.compute_capability:
        common["compute_capabilities"] = tuple(args.compute_capability)
    if args.no_run_check:
        common["run_check"] = False
    if args.task == "audio-text-to-text":
        from ...llm.audio import export_audio_llm
        from ...llm.multimodal import folder_processor_config

        try:  # the feature extractor's parameters, for generate to take a .wav
            extractor = folder_processor_config(args.model) if args.model else None
        except ValueError as e:
            raise Fail(EXIT_USAGE, f"--model {args.model}: {e}") from None
        common.pop("quantize"), common.pop("group_size")
        return export_audio_llm(model, max_audio_chunks=args.max_audio_chunks or 1,
                                feature_extractor=extractor, **common)
    if args.task == "image-text-to-text":
        from ...llm.multimodal import (export_multimodal, folder_processor_config,
                                       processor_record)

        size = tuple(args.image_size) if args.image_size else None
        # the processor's steps, for generate to prepare a PNG/JPEG as it does
        try:
            recorded = processor_record(folder_processor_config(args.model)
                                        if args.model else None)
        except ValueError as e:
            raise Fail(EXIT_USAGE, f"--model {args.model}: {e}") from None
        for note in recorded.notes:
            print(f"note: {note}", file=sys.stderr)
        return export_multimodal(model, image_size=size[0] if size and len(size) == 1
                                 else size, constant_methods=recorded.constant_methods,
                                 **common)
    from ...llm.exporter import export

    return export(model, batch_size=args.batch_size, memory_budget=args.memory_budget,
                  kv_cache_dtype=args.kv_cache_dtype, **common)


def run(args) -> int:
    out = Path(args.output)
    if out.suffix != ".pte":
        raise Fail(EXIT_USAGE, f"the output {out} should end in .pte")
    if args.max_context_len is None and args.memory_budget is None:
        raise Fail(EXIT_USAGE, "give --max-context-len, or --memory-budget to choose the "
                                "largest context that fits")
    from ...llm.memory_budget import MemoryBudgetError, parse_size

    if args.memory_budget is not None:
        try:
            parse_size(args.memory_budget)
        except ValueError as e:
            raise Fail(EXIT_USAGE, f"--memory-budget: {e}") from None
    _check_task_options(args)
    model = _model(args)
    from ...program.memory_report import format_memory_report

    try:
        result = _export(args, model, out)
    except Fail:
        raise
    except ValueError as e:
        raise Fail(EXIT_USAGE, str(e)) from None
    except MemoryBudgetError as e:
        raise Fail(EXIT_EXPORT, f"--memory-budget {args.memory_budget}: {e}") from None
    except Exception as e:  # noqa: BLE001 - torch.export and lowering raise many kinds
        if os.environ.get("EXECUTORCH_TENSORRT_DEBUG"):
            raise
        raise Fail(EXIT_EXPORT, f"export failed: {type(e).__name__}: {e}") from None
    methods = ", ".join(f"{k}={v}" for k, v in result.metadata.constant_methods().items())
    print(f"wrote {result.path}" + "".join(f" + {p}" for p in result.data_paths))
    for spec in (getattr(result, "image", None), getattr(result, "audio", None)):
        if spec is not None:
            methods += "".join(f", {k}={v}" for k, v in spec.constant_methods().items())
    print(f"runner metadata: {methods}", file=sys.stderr)
    if getattr(result, "memory", None) is not None:
        print(format_memory_report(result.memory))
    return EXIT_OK
