"""optimum-executorch's non-LLM tasks through the `tensorrt` recipe: each
exporter takes the exportable module optimum's task loader made and writes
the methods optimum's own `ExecuTorchModelFor*` class loads and runs.

| task | optimum's module | methods | class |
| --- | --- | --- | --- |
| fill-mask | MaskedLMExportableModule | forward(input_ids, attention_mask) | ExecuTorchModelForMaskedLM |
| image-classification | VisionEncoderExportableModule | forward(pixel_values) | ExecuTorchModelForImageClassification |
| text2text-generation (T5) | Seq2SeqLMExportableModule | encoder(input_ids), text_decoder(decoder_input_ids, encoder_hidden_states, cache_position), sampler(logits) | ExecuTorchModelForSeq2SeqLM |

optimum's classes load `model.pte` alone (`_load_for_executorch(path)`, no
data file), so the weights stay in the program unless `external_weights=True`
asks for a `.ptd` (then load it with `Runtime.load_program(pte, data_path=ptd)`).

optimum 1.1.0's own T5 decoder export keeps the cross-attention keys and
values in a static cache of the self-attention's length, which transformers
5.x masks at the encoder's length: torch.export fails on the broadcast. The
decoder here is transformers' own `Seq2SeqLMDecoderExportableModuleWithStaticCache`
with the same inputs: a static self-attention cache and the cross-attention
keys and values, projected from `encoder_hidden_states` at position 0 and kept
for the later steps (llm/cross_attention.py), both owned by the TensorRT
partition (aot/state/). The kept keys and values hold `max_hidden_seq_len`
encoder positions; a call reads the first `encoder_hidden_states.shape[1]`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import EncoderDecoderCache

from ..aot.checks.run_check import tolerance_for
from ..aot.export import ExportResult, export_program
from ..errors import ExportError
from .cross_attention import add_cross_attention_state, cross_attention_cache
from .exporter import DTYPES, PRECISIONS, QUANTIZE, in_dtype, quantization_lines, quantized

# recipe_kwargs fill-mask and image-classification take.
TASK_OPTIONS = ("dtype", "quantize", "group_size", "external_weights", "precision",
                "compute_capabilities", "progress")
# text2text-generation: the decoder's cache length too, and no quantize: T5's
# feed-forward reads its output Linear's `.weight` dtype, which a weight-only
# quantized Linear has not (torch.export fails on it).
SEQ2SEQ_OPTIONS = ("dtype", "max_seq_len", "external_weights", "precision",
                   "compute_capabilities", "progress")
SCALAR_TYPES = {"float16": 5, "float32": 6, "bfloat16": 15}  # ExecuTorch's ScalarType codes


@dataclass
class TaskExportResult:
    """What a task exporter wrote: the program, its .ptd files (external
    weights) and export_program's result (reports, timings, run check)."""
    task: str
    path: Path
    data_paths: list[Path]
    export: ExportResult


def _converted(model: torch.nn.Module, dtype: str | None, quantize: str | None,
               group_size: int) -> torch.nn.Module:
    """`model` in `dtype` (None: as loaded) and weight-only quantized: the
    module that is traced and the eager reference both."""
    if dtype is not None:
        if dtype not in DTYPES:
            raise ValueError(f"dtype={dtype!r} is not supported; use one of {', '.join(DTYPES)}")
        model = in_dtype(model, DTYPES[dtype])
    if quantize is not None and quantize not in QUANTIZE:
        raise ValueError(f"quantize={quantize!r} is not supported; supported: None (no "
                         f"quantization), {', '.join(repr(q) for q in QUANTIZE)}")
    return quantized(model, quantize, group_size)


def _dtype_name(model: torch.nn.Module) -> str:
    dtype = next(model.parameters()).dtype
    for name, value in DTYPES.items():
        if value == dtype:
            return name
    raise ValueError(f"the model's dtype {dtype} is not one the recipe exports "
                     f"({', '.join(DTYPES)})")


def _export(task: str, programs: dict, model: torch.nn.Module, output: Path, *,
            metadata: dict, reference=None, external_weights: bool = False,
            **options) -> TaskExportResult:
    """export_program over optimum's methods, with its constant methods and
    (for a one-method program) the eager reference the run check compares."""
    precision = PRECISIONS.get(_dtype_name(model))
    if precision is not None:  # weights and activations in that dtype: its rounding
        options.setdefault("run_check_tolerance", tolerance_for(precision))
    ref_model, ref_inputs = reference if reference is not None else (None, None)
    if "get_dtype" in metadata:  # optimum's code (ScalarType) of the dtype it was loaded in
        metadata = {**metadata, "get_dtype": SCALAR_TYPES[_dtype_name(model)]}
    result = export_program(programs, None, output, reference_model=ref_model,
                            reference_inputs=ref_inputs, write_expected_file=False,
                            external_weights=bool(external_weights),
                            quantization=quantization_lines(model, options),
                            constant_methods=metadata, **options)
    return TaskExportResult(task, result.path, result.data_paths, result)


def _traced(what: str, model: torch.nn.Module, trace):
    try:
        with torch.no_grad():
            return trace()
    except Exception as e:  # noqa: BLE001 - any tracing failure, with its model named
        raise ExportError(f"torch.export of {type(model).__name__}'s {what} failed: "
                          f"{type(e).__name__}: {e}") from e


def export_masked_lm(module, output: Path, *, dtype: str | None = None,
                     quantize: str | None = None, group_size: int = 128,
                     **options) -> TaskExportResult:
    """fill-mask: optimum's own trace (dynamic sequence length) of the masked
    LM as `forward(input_ids, attention_mask) -> logits`."""
    module.model = _converted(module.model, dtype, quantize, group_size)
    (program,) = _traced("masked LM", module.model, module.export).values()
    example = program.example_inputs
    inputs = (example[0][0], example[1]["attention_mask"])
    model = module.model
    return _export("fill-mask", {"forward": program}, model, output,
                   metadata=dict(module.metadata),
                   reference=(lambda ids, mask: model(ids, attention_mask=mask).logits, inputs),
                   **options)


def export_image_classifier(module, output: Path, *, dtype: str | None = None,
                            quantize: str | None = None, group_size: int = 128,
                            **options) -> TaskExportResult:
    """image-classification: optimum's own trace (the config's image size)
    as `forward(pixel_values) -> logits`."""
    module.model = _converted(module.model, dtype, quantize, group_size)
    (program,) = _traced("image classifier", module.model, module.export).values()
    model = module.model
    pixels = program.example_inputs[1]["pixel_values"]
    return _export("image-classification", {"forward": program}, model, output,
                   metadata=dict(module.metadata),
                   reference=(lambda p: model(pixel_values=p).logits, (pixels,)), **options)


def _kept_cross_attention_decoder():
    """transformers' static-cache seq2seq decoder whose cross-attention keys
    and values are kept between calls (llm/cross_attention.py). Defined on
    first use: transformers' executorch module imports lazily."""
    from transformers.integrations.executorch import (
        Seq2SeqLMDecoderExportableModuleWithStaticCache as StaticCacheDecoder,
    )

    class KeptCrossAttentionDecoder(StaticCacheDecoder):
        def __init__(self, model, max_seq_len: int, max_hidden_seq_len: int):
            super().__init__(model, max_static_cache_length=max_seq_len, batch_size=1)
            config = model.config
            add_cross_attention_state(self, config.num_decoder_layers, config.num_heads,
                                      max_hidden_seq_len, config.d_kv, torch.float32)

        def forward(self, decoder_input_ids, encoder_hidden_states, cache_position):
            for layer in self.static_cache.layers:  # writes start at this call's position
                layer.cumulative_length.copy_(cache_position[0])
            cache = EncoderDecoderCache(self.static_cache,
                                        cross_attention_cache(self, cache_position))
            out = self.decoder(input_ids=decoder_input_ids,
                               encoder_hidden_states=encoder_hidden_states,
                               past_key_values=cache, use_cache=True)
            return self.lm_head(out[0])

    return KeptCrossAttentionDecoder


def _seq2seq_programs(model, max_seq_len: int, max_hidden_seq_len: int) -> dict:
    """encoder, text_decoder and sampler as optimum's class calls them."""
    from optimum.exporters.executorch.integrations import (
        ArgmaxExportableModule,
        Seq2SeqLMEncoderExportableModule,
    )

    dtype = next(model.parameters()).dtype
    hidden = torch.export.Dim("encoder_hidden_seq_length", max=max_hidden_seq_len)
    encoder = Seq2SeqLMEncoderExportableModule(model.get_encoder()).eval()
    example_ids = torch.ones((1, 10), dtype=torch.long)
    programs = {"encoder": _traced("encoder", model, lambda: torch.export.export(
        encoder, (example_ids,), dynamic_shapes={"input_ids": {1: hidden}}, strict=True))}
    decoder = _kept_cross_attention_decoder()(model, max_seq_len, max_hidden_seq_len).eval()
    for buffer in decoder.buffers(recurse=False):  # transformers makes the cache float32
        if buffer.is_floating_point():
            buffer.data = buffer.data.to(dtype)
    with torch.no_grad():
        states = encoder(example_ids)
    programs["text_decoder"] = _traced("decoder", model, lambda: torch.export.export(
        decoder, (torch.tensor([[0]]), states, torch.tensor([0])),
        dynamic_shapes={"decoder_input_ids": None, "encoder_hidden_states": {1: hidden},
                        "cache_position": None}, strict=True))
    logits = torch.zeros((1, 1, model.config.vocab_size), dtype=dtype)
    programs["sampler"] = _traced("sampler", model, lambda: torch.export.export(
        ArgmaxExportableModule(model).eval(), (logits,), strict=True))
    return programs


def export_seq2seq_lm(module, output: Path, *, dtype: str | None = None,
                      max_seq_len: int | None = None, **options) -> TaskExportResult:
    """text2text-generation (T5): `encoder(input_ids[1, S]) -> hidden`,
    `text_decoder(token[1, 1], hidden, position[1]) -> logits[1, 1, V]` over a
    static self-attention cache of `max_seq_len` positions (default optimum's
    max_seq_len), and `sampler(logits) -> argmax`, with optimum's constant
    methods (`decoder_start_token_id`, `get_eos_id`, `get_max_seq_len`)."""
    config = module.model.config
    if config.num_decoder_layers != config.num_layers:
        raise ValueError(
            f"this T5 has {config.num_decoder_layers} decoder layers and {config.num_layers} "
            "encoder layers; transformers' static-cache decoder sizes its cache by the "
            "encoder's depth, so only T5 models of equal depths export with the 'tensorrt' "
            "recipe")
    cache = int(max_seq_len if max_seq_len is not None else module.max_seq_len)
    if cache < 2:
        raise ValueError(f"max_seq_len={cache}: the decoder's cache needs at least 2 positions")
    model = _converted(module.model, dtype, None, 128)
    programs = _seq2seq_programs(model, cache, int(module.max_hidden_seq_len))
    metadata = {**module.metadata, "get_max_seq_len": cache,
                "max_hidden_seq_length": int(module.max_hidden_seq_len)}
    return _export("text2text-generation", programs, model, output, metadata=metadata,
                   **options)


__all__ = ["TaskExportResult", "TASK_OPTIONS", "SEQ2SEQ_OPTIONS", "export_masked_lm",
           "export_image_classifier", "export_seq2seq_lm"]
