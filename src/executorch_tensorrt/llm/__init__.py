"""Helpers for language models: the one-call export for ExecuTorch's LLM
runner (`executorch_tensorrt.llm.export`, llm/exporter.py), the runner's
metadata (metadata.py), transformers' static-cache wrapper and its export
(hf_export.py), greedy decoding over an exported program
(greedy_decode.py), and `export_multimodal` for ExecuTorch's
MultimodalRunner (multimodal.py). `export` is imported on first use: decoding needs no AOT
code."""


def __getattr__(name: str):
    if name in ("export", "causal_lm", "eager_decoder", "quantized", "in_dtype"):
        from . import exporter

        return getattr(exporter, name)
    if name in ("export_multimodal", "vision_language_model"):
        from . import multimodal

        return getattr(multimodal, name)
    raise AttributeError(f"module 'executorch_tensorrt.llm' has no attribute {name!r}")
