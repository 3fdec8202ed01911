"""One-call LLM export: a transformers causal LM -> a .pte (+ .ptd) that
ExecuTorch's own LLM runner (`executorch.extension.llm.runner.TextLLMRunner`,
and its C++ `TextLLMRunner`) runs as it is.

What the runner needs from a program (ExecuTorch 1.5.1, extension/llm/runner):
- a method `forward(tokens int64[1, S], positions int64[S]) -> logits[1, S, V]`:
  it passes `positions` as `start_pos .. start_pos + S - 1` because the
  method's second input is planned for more than one element;
- constant methods `get_max_seq_len` (required), `get_max_context_len`,
  `use_kv_cache`, `enable_dynamic_shape` (true: the prompt goes in chunks of
  up to get_max_seq_len tokens; false: one token per call), `get_eos_ids`
  (overrides the tokenizer's EOS); `get_vocab_size` and `get_bos_id` are
  written for other readers (the runner takes both from its tokenizer).

The decoder is exported the one way this package has for LLMs
(hf_export.py: transformers' static-cache wrapper, dynamic S), and its KV
caches are owned by the TensorRT partition (aot/state/, docs/llm.md).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ..aot.export import ExportResult, export_program
from ..aot.partition.report import format_report
from ..aot.checks.run_check import tolerance_for
from ..aot.trace.moe_experts import traceable_experts
from ..aot.state.fp8_cache import check_kv_cache_dtype, fp8_refusal
from ..errors import ExportError
from ..tensorrt.engine_builder import Progress, stderr_progress
from .hf_export import export_hf, hf_decode_step, hf_example_inputs, hf_static_cache_wrapper
from ..program.memory_report import MemoryReport, format_memory_report, size_text
from .memory_budget import parse_size, plan_memory
from .memory_file import record_memory_report
from .metadata import LLMMetadata
from .reference import measure as measure_reference

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
PRECISIONS = {"float16": "fp16", "bfloat16": "bf16"}  # run_check.TOLERANCE's names
QUANTIZE = ("int8_weight_only", "int4_weight_only")  # quantization.quantize()'s schemes


@dataclass
class LLMExportResult:
    path: Path
    data_paths: list[Path]
    metadata: LLMMetadata
    export: ExportResult
    memory: MemoryReport | None = None   # the written program's (docs/llm.md, "Memory")


def causal_lm(model_or_config, seed: int = 0, dtype: torch.dtype | None = None,
              auto_class: str = "AutoModelForCausalLM") -> torch.nn.Module:
    """A transformers causal LM in eval mode: the model itself, or one built
    from a config (a PretrainedConfig, a dict, or a config.json path) with
    random weights from `seed`, made in `dtype` (default float32): no float32
    copy of a bf16 model ever exists, and the values equal float32's cast.
    `auto_class`: the transformers Auto class that builds it from a config.
    Nothing is downloaded."""
    import transformers

    if isinstance(model_or_config, transformers.PreTrainedModel):
        return model_or_config.eval()
    config = model_or_config
    if isinstance(config, (str, Path)):
        config = json.loads(Path(config).read_text())
    if isinstance(config, dict):
        config = dict(config)
        model_type = config.pop("model_type", None)
        if model_type is None:
            raise ValueError("a config dict needs a 'model_type' (e.g. 'llama'), as in a "
                             "transformers config.json")
        config = transformers.AutoConfig.for_model(model_type, **config)
    if not isinstance(config, transformers.PretrainedConfig):
        raise TypeError("expected a transformers PreTrainedModel, PretrainedConfig, config "
                        f"dict or config.json path, got {type(model_or_config).__name__}")
    config.use_cache = True
    config.get_text_config().use_cache = True  # a multimodal config's decoder
    torch.manual_seed(seed)
    return getattr(transformers, auto_class).from_config(config, dtype=dtype).eval()


def eager_decoder(model: torch.nn.Module, max_context_len: int, batch_size: int = 1,
                  kv_cache_dtype: str | None = None):
    """The eager `(tokens, positions) -> logits` step over the same static
    cache the export uses (`batch_size` rows): the reference for greedy_decode.
    `kv_cache_dtype` "float8_e4m3fn": keys and values rounded to fp8 as they
    are written, as export(kv_cache_dtype=...)'s cache holds them."""
    return hf_decode_step(causal_lm(model), max_context_len, batch_size,
                          kv_cache_dtype=check_kv_cache_dtype(kv_cache_dtype))


def in_dtype(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """`model` (in place) as transformers loads it in `dtype`: its parameters
    and saved buffers in `dtype`, buffers it computes for itself (RoPE's
    inv_freq) as they were made. nn.Module.to would round inv_freq to bf16
    too: each attention angle then turns by the query-key distance times its
    frequency's rounding (up to 2^-9 of it; 0.09 rad at a distance of 512 for
    the frequency 0.316), which transformers' from_pretrained(dtype=) avoids."""
    for module in model.modules():
        for p in module.parameters(recurse=False):
            if p.is_floating_point() and p.dtype != dtype:
                p.data = p.data.to(dtype)  # the same Parameter: ties stay tied
        for name, b in module.named_buffers(recurse=False):
            if (b.is_floating_point() and b.dtype != dtype
                    and name not in module._non_persistent_buffers_set):
                setattr(module, name, b.to(dtype))
    return model


def _check_arguments(config, max_seq_len: int, max_context_len: int, dtype: str,
                     quantize: str | None, batch_size: int) -> None:
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    if quantize is not None and quantize not in QUANTIZE:
        raise ValueError(f"quantize={quantize!r} is not supported; supported: None (no "
                         f"quantization), {', '.join(repr(q) for q in QUANTIZE)}")
    if not 1 <= max_seq_len <= max_context_len:
        raise ValueError(f"need 1 <= max_seq_len <= max_context_len, got max_seq_len="
                         f"{max_seq_len}, max_context_len={max_context_len}")
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions",
                                                                         None)
    if limit is not None and max_context_len > limit:
        raise ValueError(f"max_context_len={max_context_len} is beyond the model's "
                         f"{limit} positions (config max_position_embeddings/n_positions); "
                         f"use at most {limit}")


def quantization_lines(model: torch.nn.Module, options: dict) -> dict[str, str]:
    """The report's quantization section for `quantized()`'s decoder: each
    layer and how it runs, checked against the TensorRT flavour and targets
    as export checks a quantized nn.Module (docs/quantization.md)."""
    from ..aot.export import target_flavor
    from ..quantization.workflow import check_plan, quantization_plan

    plan = quantization_plan(model)
    if plan is None:
        return {}
    return check_plan(plan, target_flavor(), options.get("compute_capabilities"),
                      options.get("allow_unquantized", False))


def quantized(model: torch.nn.Module, quantize: str | None,
              group_size: int = 128) -> torch.nn.Module:
    """The decoder `export(quantize=...)` exports, and so the eager reference:
    a structural copy (tensors shared) whose Linear weights (the head too)
    and token embedding tables are weight-only quantized by `quantize`, and
    whose checkpoint Linears (a `.packed` PackedWeight) run as the affine
    format."""
    from ..quantization.importers.packed import has_packed_linears, lower_packed

    if quantize is not None and has_packed_linears(model):
        raise ExportError(
            f"quantize={quantize!r} on a model from a quantized checkpoint: its packed layers "
            "keep the checkpoint's own quantization and are never quantized again. To store "
            "the layers it left float (embedding, lm_head) in 8 bits, build the model with "
            "llm.from_checkpoint(path, quantize_float='int8_weight_only') (llm-export --model "
            "CHECKPOINT --quantize int8_weight_only) and export it with quantize=None")
    if quantize is not None:
        from ..quantization import quantize as quantize_model
        from ..quantization.embedding import quantize_embeddings

        linears = quantize_model(model, scheme=quantize, group_size=group_size)
        model = quantize_embeddings(linears, quantize, group_size)
    # A checkpoint's packed Linears run as the affine format (formats/affine.py).
    return lower_packed(model) if has_packed_linears(model) else model


def refuse_kv_cache_dtype(options: dict, exporter: str) -> None:
    """An exporter whose reference does not round its cache refuses an fp8 one."""
    if options.get("kv_cache_dtype") is not None:
        raise ValueError(f"kv_cache_dtype is an option of llm.export (text generation) only; "
                         f"{exporter} keeps its caches in the model's dtype")


def _check_kv_cache_dtype(kv_cache_dtype: str | None, options: dict) -> str | None:
    """The canonical kv_cache_dtype, refused (ExportError) where the targets
    cannot run fp8; recorded in `options` for the TensorRT compile spec."""
    from ..aot.export import target_flavor
    from ..quantization.registry import RTX_DEFAULT_CAPABILITIES

    kv_cache_dtype = check_kv_cache_dtype(kv_cache_dtype)
    if kv_cache_dtype is None:
        return None
    if options.get("precision", "fp32") != "fp32":
        raise ExportError(f"kv_cache_dtype={kv_cache_dtype!r} with precision="
                          f"{options['precision']!r}: the fp8 cache is written in the model's "
                          "own dtype; use dtype='float16' (or 'bfloat16') without precision")
    targets = options.get("compute_capabilities")
    if isinstance(targets, str):
        targets = (targets,)
    # TensorRT-RTX's default targets reach SM75; standard TensorRT builds for
    # the GPU present, unknown here (its builder decides).
    if targets is None and target_flavor() == "tensorrt_rtx":
        targets = RTX_DEFAULT_CAPABILITIES
    why = fp8_refusal(targets)
    if why is not None:
        raise ExportError(why + ". Nothing was exported")
    options["kv_cache_dtype"] = kv_cache_dtype
    return kv_cache_dtype


def export(model, *, max_seq_len: int, max_context_len: int | None = None,
           dtype: str = "float32", memory_budget: int | str | None = None,
           quantize: str | None = None, group_size: int = 128, batch_size: int = 1,
           kv_cache_dtype: str | None = None, external_weights: bool | None = None,
           output: str | Path, bos_id: int | None = None, eos_ids=None,
           constant_methods: dict | None = None,
           progress: Progress | None = stderr_progress, **options) -> LLMExportResult:
    """Exports a transformers causal LM (or a config: random weights) for
    ExecuTorch's LLM runner and returns where it went and what it recorded.

    `max_seq_len`: most tokens per call (prompt chunks); `max_context_len`:
    the KV cache's positions (prompt + generated). `dtype`: "float32",
    "float16" or "bfloat16": the model is converted (in place, in_dtype),
    so weights, KV cache and logits are in that dtype.
    `quantize`: None, "int8_weight_only" (symmetric, per output channel) or
    "int4_weight_only" (symmetric, one scale per `group_size` input features):
    quantization.quantize() on the decoder's Linear layers (the head too) and
    the token embedding table (`quantized()`, the eager reference).
    `kv_cache_dtype`: None (the cache in `dtype`) or "float8_e4m3fn" ("fp8"):
    the cache stored in fp8 e4m3, scale 1.0, each key and value rounded as it
    is written (half of float16's bytes; SM89+ targets only: pass
    compute_capabilities; docs/llm.md "An fp8 KV cache").
    `batch_size`: rows of the static cache; the method then takes tokens
    [batch_size, S] (one position per step for all rows; ExecuTorch's runner
    feeds [1, S], so it runs batch 1 programs only).
    `external_weights=True`: the weights go to `<output stem>.ptd` beside the
    .pte. `bos_id`/`eos_ids`: default from the model's config.
    `constant_methods`: more name -> value methods to write (e.g. optimum's
    `get_n_layers`); the runner's own (LLMMetadata) win where both name one.
    `memory_budget` ("8GB", "7.5GiB", bytes): choose the largest
    max_context_len (at most the one given, else the model's positions)
    whose weights + KV cache + activation estimate fit, or raise
    MemoryBudgetError before exporting (llm/memory_budget.py). The result's
    `memory` is the written program's report (docs/llm.md, "Memory").
    Other options go to export_program (`record_memory` defaults to True:
    TensorRT's activation memory is recorded even where no engine ships).
    """
    if dtype not in DTYPES:  # before a model is made in it
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    if max_context_len is None and memory_budget is None:
        raise ValueError("give max_context_len (the KV cache's positions), or memory_budget "
                         "to choose the largest that fits")
    if memory_budget is not None:
        parse_size(memory_budget)  # a bad size is refused before a model is made
    kv_cache_dtype = _check_kv_cache_dtype(kv_cache_dtype, options)
    model = causal_lm(model, dtype=DTYPES[dtype])
    config = model.config.get_text_config()
    _check_arguments(config, max_seq_len, max_context_len or max_seq_len, dtype, quantize,
                     batch_size)
    parameters = sum(p.numel() for p in model.parameters())
    # The model (and so its KV cache, weights and logits) in `dtype`: the cache
    # then takes dtype's bytes per element in the delegate, not float32's.
    model = quantized(in_dtype(model, DTYPES[dtype]), quantize, group_size)
    plan = None
    if memory_budget is not None:  # weights counted as stored: quantized, in `dtype`
        plan = plan_memory(model, config, memory_budget, max_seq_len=max_seq_len,
                           max_context_len=max_context_len, batch_size=batch_size,
                           dtype=DTYPES[dtype], quantize=quantize,
                           kv_cache_dtype=kv_cache_dtype)
        max_context_len = plan.max_context_len
        if progress:
            progress(plan.describe())
        _check_arguments(config, max_seq_len, max_context_len, dtype, quantize, batch_size)
    meta = LLMMetadata.for_config(config, max_seq_len, max_context_len, bos_id, eos_ids)
    if progress:
        progress(f"{type(model).__name__}: {parameters:,} parameters, cache of "
                 f"{max_context_len} positions, up to {max_seq_len} tokens per call, dtype "
                 f"{dtype}, quantize {quantize}"
                 + (f", KV cache {kv_cache_dtype} (scale 1.0)" if kv_cache_dtype else ""))
    if progress:
        progress("torch.export of the decoder with its static cache...")
    try:
        # MoE experts traced in a form TensorRT takes; the reference keeps the default.
        with traceable_experts(model) as switched:
            program = export_hf(hf_static_cache_wrapper(model, max_context_len, batch_size),
                                max_seq_len, batch_size)
        if switched and progress:
            progress(f"experts traced as batched_mm (the model's own: {', '.join(switched)})")
    except Exception as e:  # noqa: BLE001 - any tracing failure, with its model named
        raise ExportError(f"torch.export of {type(model).__name__} with transformers' static "
                          f"cache failed: {type(e).__name__}: {e}") from e
    # The run check's reference: the eager decoder with a fresh cache of its
    # own, on the inputs the export traced with. In float16/bfloat16, eager
    # computing in float32 over the same weights, allowing eager's own
    # rounding in the dtype twice over (reference.py says why).
    inputs = hf_example_inputs(max_seq_len, batch_size)
    if dtype not in PRECISIONS:
        reference_model = eager_decoder(model, max_context_len, batch_size, kv_cache_dtype)
        options.setdefault("run_check_tolerance", tolerance_for(None))
    else:
        if progress:
            progress(f"eager reference in {dtype} and computing in float32...")
        exact = measure_reference(model, max_context_len, batch_size, inputs, kv_cache_dtype)
        options.setdefault("run_check_tolerance",
                           exact.tolerance(tolerance_for(PRECISIONS[dtype])))
        reference_model = exact.recorded
        if progress:
            progress(exact.describe())
    options.setdefault("record_memory", True)
    result = export_program({"forward": program}, None, output, progress=progress,
                            quantization=quantization_lines(model, options),
                            reference_model=reference_model, reference_inputs=inputs,
                            external_weights=bool(external_weights),
                            constant_methods={**(constant_methods or {}),
                                              **meta.constant_methods()},
                            write_expected_file=False, **options)
    if progress and result.reports:
        progress("partition report:\n" + format_report(result.reports))
    memory = record_memory_report(result.path)
    if progress:
        progress(format_memory_report(memory))
    if plan is not None and memory.total_bytes > plan.budget:
        progress and progress(f"note: the program's memory {size_text(memory.total_bytes)} is "
                              f"over the budget {size_text(plan.budget)}: the activation "
                              "estimate was low; export with a smaller memory_budget")
    return LLMExportResult(result.path, result.data_paths, meta, result, memory)


__all__ = ["export", "causal_lm", "in_dtype", "eager_decoder", "quantized", "LLMMetadata",
           "LLMExportResult", "DTYPES", "QUANTIZE"]
