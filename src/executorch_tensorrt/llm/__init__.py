"""Helpers for language models: the one-call export for ExecuTorch's LLM
runner (`executorch_tensorrt.llm.export`, llm/exporter.py), the runner's
metadata (metadata.py), transformers' static-cache wrapper and its export
(hf_export.py), greedy decoding over an exported program
(greedy_decode.py), `export_multimodal` for ExecuTorch's MultimodalRunner
(multimodal.py), generation through ExecuTorch's own runners
(`generate_text`, `generate_multimodal`, `generate`; generation.py), and a
model built from a published quantized checkpoint (`from_checkpoint`,
checkpoint_model.py). `export` is imported on first use: decoding and
generating need no AOT code."""

_GENERATE = ("generate", "generate_text", "generate_multimodal", "GeneratedText",
             "GenerationStats", "GenerateInputError", "GenerateRunError")


def __getattr__(name: str):
    if name in ("export", "causal_lm", "eager_decoder", "quantized", "in_dtype"):
        from . import exporter

        return getattr(exporter, name)
    if name in _GENERATE:
        from . import generation

        return getattr(generation, name)
    if name == "from_checkpoint":
        from .checkpoint_model import from_checkpoint

        return from_checkpoint
    if name in ("export_multimodal", "vision_language_model"):
        from . import multimodal

        return getattr(multimodal, name)
    raise AttributeError(f"module 'executorch_tensorrt.llm' has no attribute {name!r}")
