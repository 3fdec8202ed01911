"""One-call export of a transformers vision-language model for ExecuTorch's
own `MultimodalRunner` (executorch.extension.llm.runner, C++ MultimodalRunner).

What the runner calls (ExecuTorch 1.5.1, extension/llm/runner/multimodal_*):
- `token_embedding(tokens int64[1, S]) -> embeds[1, S, D]` for each text part
  of the prompt (no chunking: the whole part in one call) and for every
  generated token;
- `vision_encoder(pixels float[1, 3, H, W]) -> embeds[1, N, D]` for an image
  (`make_image_input`): its N embeddings take the place of the image tokens,
  all in one call;
- `text_decoder(embeds[1, S, D], positions int64[S]) -> logits` after each
  of those, positions counting on from the previous call;
- the constant methods TextLLMRunner reads too (metadata.LLMMetadata).

The decoder is the text LLM export's (hf_export.py: transformers' static
cache wrapper, here fed embeddings), its KV cache owned by the TensorRT
partition (aot/state/); the three methods go through one export_program call,
so each is partitioned on its own and the weights are stored once.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..aot.checks.run_check import tolerance_for
from ..aot.export import ExportResult, export_program
from ..aot.partition.report import format_report
from ..errors import ExportError
from ..tensorrt.engine_builder import Progress, stderr_progress
from .exporter import (DTYPES, PRECISIONS, _check_arguments, causal_lm, in_dtype,
                       refuse_kv_cache_dtype)
from .hf_export import (TokenEmbedding, export_hf_embeds, export_token_embedding,
                        hf_static_cache_wrapper)
from .metadata import LLMMetadata
from .image_preprocessing import METHOD as PREPROCESSING_METHOD
from .image_preprocessing import PreprocessingConfigError, from_processor_config
from .multimodal_inputs import IMAGE_METHODS, ImageSpec
from .vision_families import ImageEncoder, check_family, image_geometry


@dataclass
class MultimodalExportResult:
    path: Path
    data_paths: list[Path]
    metadata: LLMMetadata
    image: ImageSpec
    export: ExportResult


def vision_language_model(model_or_config, seed: int = 0,
                          dtype: torch.dtype | None = None) -> torch.nn.Module:
    """A transformers image-text-to-text model in eval mode: the model, or
    one built from a config (PretrainedConfig, dict with 'model_type', or a
    config.json path) with random weights from `seed`. Nothing is downloaded."""
    return causal_lm(model_or_config, seed, dtype, auto_class="AutoModelForImageTextToText")


@dataclass(frozen=True)
class ProcessorRecord:
    """What a program records of the model's image processor, as constant
    methods: image_mean / image_std and image_preprocessing, which
    `generate` reads to prepare a PNG/JPEG as the processor does."""

    constant_methods: dict
    notes: tuple[str, ...] = ()


def processor_record(config: dict | None) -> ProcessorRecord:
    """The record of a preprocessor_config.json's contents (None: nothing)."""
    if not config:
        return ProcessorRecord({})
    record, notes = {}, []
    if config.get("do_normalize") is False:  # the processor only rescales
        record = {"image_mean": [0.0], "image_std": [1.0]}
    elif all(config.get(k) is not None for k in ("image_mean", "image_std")):
        values = {k: list(config[k]) if isinstance(config[k], (list, tuple)) else [config[k]]
                  for k in ("image_mean", "image_std")}
        if not all(isinstance(x, (int, float)) for v in values.values() for x in v):
            raise ValueError(f"image_mean / image_std should be numbers, got "
                             f"{config['image_mean']!r} / {config['image_std']!r}")
        record = {k: [float(x) for x in v] for k, v in values.items()}
    try:
        steps = from_processor_config(config)
    except PreprocessingConfigError as e:
        notes.append(f"the image processor's steps are not recorded ({e}): generate resizes a "
                     "picture whole to the encoder's size; pass a .npy prepared by the "
                     "processor for its exact pixels")
    else:
        record[PREPROCESSING_METHOD] = steps.constant()
        if steps.tiling:
            notes.append(f"the image processor cuts pictures into tiles ({steps.tiling}); "
                         "vision_encoder takes one image: generate prepares a picture as the "
                         f"processor does with {steps.tiling} off")
    return ProcessorRecord(record, tuple(notes))


def folder_processor_config(folder: str | Path) -> dict | None:
    """The model folder's preprocessor_config.json (None when it has none)."""
    import json

    path = Path(folder) / "preprocessor_config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is not JSON ({e}): fix or remove it") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} should hold a JSON object")
    return config


def _check_image_fits(spec: ImageSpec, max_seq_len: int, max_context_len: int) -> None:
    if spec.tokens > max_seq_len:
        raise ValueError(
            f"an image becomes {spec.tokens} embeddings, which MultimodalRunner prefills in "
            f"one text_decoder call, but max_seq_len={max_seq_len}; use max_seq_len >= "
            f"{spec.tokens}")
    if spec.tokens >= max_context_len:
        raise ValueError(
            f"an image takes {spec.tokens} cache positions, leaving no room in "
            f"max_context_len={max_context_len} for the prompt and the answer; use "
            f"max_context_len > {spec.tokens} (or a smaller image_size)")


def _check_references(model, encoder, spec: ImageSpec, max_context_len: int,
                      max_seq_len: int, dtype: torch.dtype) -> dict:
    """method -> (eager, inputs) for the run check: a random image, a few
    tokens, and those tokens' embeddings prefilled into a fresh cache."""
    generator = torch.Generator().manual_seed(0)
    pixels = torch.rand(1, spec.channels, spec.height, spec.width, generator=generator)
    vocab = int(model.config.get_text_config().vocab_size)
    tokens = torch.randint(0, vocab, (1, min(5, max_seq_len)), generator=generator)
    embedding = TokenEmbedding(model.get_input_embeddings())  # Gemma's scaled one too
    with torch.no_grad():
        embeds = embedding(tokens)
    cached = hf_static_cache_wrapper(model, max_context_len).model
    return {"vision_encoder": (encoder, (pixels,)),
            "token_embedding": (embedding, (tokens,)),
            "text_decoder": (lambda e, p: cached(inputs_embeds=e, cache_position=p),
                             (embeds, torch.arange(tokens.shape[1])))}


def _export(name: str, module: torch.nn.Module, args: tuple, dynamic_shapes=None):
    try:
        return torch.export.export(module, args, dynamic_shapes=dynamic_shapes, strict=True)
    except Exception as e:  # noqa: BLE001 - any tracing failure, with its method named
        raise ExportError(f"torch.export of {name} failed: {type(e).__name__}: {e}") from e


def export_multimodal(model_or_config, *, output: str | Path, max_seq_len: int,
                      max_context_len: int, dtype: str = "float32",
                      image_size: int | tuple[int, int] | None = None,
                      quantize: str | None = None, group_size: int = 128,
                      external_weights: bool | None = None, bos_id: int | None = None,
                      eos_ids=None, seed: int = 0, constant_methods: dict | None = None,
                      progress: Progress | None = stderr_progress,
                      **options) -> MultimodalExportResult:
    """Exports a transformers vision-language model (or a config: random
    weights) as one .pte with `vision_encoder`, `token_embedding` and
    `text_decoder` for ExecuTorch's MultimodalRunner (docs/multimodal.md).

    `max_seq_len`: most embeddings per text_decoder call: the runner feeds a
    whole text part, or a whole image, in one call, so it must hold the
    image's tokens and the longest text part. `max_context_len`: the KV
    cache's positions (image + prompt + answer). `image_size`: the pixels
    (H, W, or one int for both) vision_encoder takes; default the vision
    config's. `dtype`, `quantize`, `group_size`, `external_weights`,
    `bos_id`, `eos_ids`, `constant_methods`: as llm.export's. Other options go
    to export_program.
    """
    refuse_kv_cache_dtype(options, "export_multimodal")
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    model = vision_language_model(model_or_config, seed, DTYPES[dtype])
    check_family(model)
    text_config = model.config.get_text_config()
    _check_arguments(text_config, max_seq_len, max_context_len, dtype, quantize, 1)
    model = in_dtype(model, DTYPES[dtype])
    height, width = image_geometry(model, image_size)
    encoder = ImageEncoder(model)
    # float32 pixels whatever the model's dtype: the runner hands images over as
    # float32 (bf16 it converts, fp16 it refuses); the encoder casts them.
    pixels = torch.zeros(1, 3, height, width)
    with torch.no_grad():
        embeds = encoder(pixels)
    spec = ImageSpec(3, height, width, int(embeds.shape[1]),
                     getattr(model.config, "image_token_id", None))
    _check_image_fits(spec, max_seq_len, max_context_len)
    meta = LLMMetadata.for_config(text_config, max_seq_len, max_context_len, bos_id, eos_ids)
    if progress:
        progress(f"{type(model).__name__}: {sum(p.numel() for p in model.parameters()):,} "
                 f"parameters; image {height}x{width} -> {spec.tokens} embeddings of "
                 f"{embeds.shape[2]}; cache of {max_context_len} positions, up to "
                 f"{max_seq_len} per call, dtype {dtype}, quantize {quantize}")
    if quantize is not None:
        from .exporter import quantized

        model = quantized(model, quantize, group_size)
        encoder = ImageEncoder(model)
    hidden = int(text_config.hidden_size)
    programs = {}
    if progress:
        progress("torch.export of vision_encoder, token_embedding, text_decoder...")
    programs["vision_encoder"] = _export("vision_encoder", encoder, (pixels,))
    programs["token_embedding"] = export_token_embedding(model.get_input_embeddings(),
                                                         max_seq_len)
    try:
        programs["text_decoder"] = export_hf_embeds(
            hf_static_cache_wrapper(model, max_context_len), max_seq_len, hidden,
            DTYPES[dtype])
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"torch.export of text_decoder ({type(model).__name__} with "
                          f"transformers' static cache) failed: {type(e).__name__}: {e}") from e
    references = _check_references(model, encoder, spec, max_context_len, max_seq_len,
                                   DTYPES[dtype])
    options.setdefault("run_check_tolerance", tolerance_for(PRECISIONS.get(dtype)))
    result = export_program(programs, None, output, progress=progress,
                            external_weights=bool(external_weights),
                            constant_methods={**(constant_methods or {}),
                                              **spec.constant_methods(),
                                              **meta.constant_methods()},
                            method_references=references, write_expected_file=False,
                            **options)
    if progress and result.reports:
        progress("partition report:\n" + format_report(result.reports))
    return MultimodalExportResult(result.path, result.data_paths, meta, spec, result)


__all__ = ["export_multimodal", "vision_language_model", "folder_processor_config",
           "processor_record", "ProcessorRecord", "ImageSpec", "IMAGE_METHODS",
           "MultimodalExportResult"]
