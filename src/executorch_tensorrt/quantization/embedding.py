"""Weight-only quantized token embeddings: the embedding table of an LLM stored
int4 (per group of features) or int8 (per row), so that a quantized decoder is
not left with its largest float tensor.

An embedding lookup is a Gather over the table's rows. The table is
quantized row by row exactly as a Linear weight [out, in] is: a row of the
table is an "output channel", its features the groups' axis. Each format that
has an embedding form (registry.FormatSteps.quantize_embedding: int8, int4)
computes `F.embedding(ids, dequantize(table))` with the same dequantize op as
its quantized linears, so the ONNX graph holds DequantizeLinear over the
stored table feeding Gather's data input: TensorRT's parser takes that (a
weight-only quantized Gather), and onnxruntime runs it. The eager module is
the reference: it dequantizes in torch with the same values.

`quantize_embeddings(model, scheme, group_size)` replaces every
torch.nn.Embedding of a copy of `model` (its other tensors shared) and adds
the tables to the model's quantization plan, so the partition report lists
them with the quantized linears.
"""
from __future__ import annotations

import copy
import dataclasses

import torch

from ..errors import QuantizationError
from .registry import FORMATS, QuantizationPlan, format_of, quantization_plan, with_plan


def embedding_schemes() -> tuple[str, ...]:
    """The weight-only schemes whose format has an embedding form."""
    return tuple(sorted(s.name for f in FORMATS.values() for s in f.schemes
                 if not s.activations and s.implemented
                 and f.steps().quantize_embedding is not None))


def quantized_embedding(embedding: torch.nn.Embedding, scheme: str, group_size: int,
                        name: str = "") -> tuple[torch.nn.Module, str]:
    """The quantized module for `embedding` and the report's line for it."""
    if embedding.max_norm is not None or embedding.sparse:
        raise QuantizationError(
            f"embedding {name!r}: max_norm and sparse embeddings cannot be quantized (the "
            "lookup would change the stored table); quantize without embeddings")
    if scheme not in embedding_schemes():
        raise QuantizationError(f"embedding {name!r}: scheme {scheme!r} has no embedding path; "
                                f"embeddings are quantized {' or '.join(embedding_schemes())}")
    return format_of(scheme).steps().quantize_embedding(embedding, name, group_size)


def quantize_embeddings(model: torch.nn.Module, scheme: str,
                        group_size: int = 128) -> torch.nn.Module:
    """A copy of `model` (tensors shared) with each torch.nn.Embedding
    replaced by its format's quantized embedding of `scheme`; the model's
    quantization plan (if any) gains one line per table."""
    shared = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    result = copy.deepcopy(model, memo=shared)
    replacements, lines = [], {}
    for parent_name, parent in result.named_modules():
        for child_name, child in parent.named_children():
            if isinstance(child, torch.nn.Embedding):
                full = f"{parent_name}.{child_name}" if parent_name else child_name
                module, line = quantized_embedding(child, scheme, group_size, full)
                replacements.append((parent, child_name, module))
                lines[full] = line
    for parent, child_name, module in replacements:  # after every table was quantized
        setattr(parent, child_name, module)
    plan = quantization_plan(model) or QuantizationPlan(scheme)
    return with_plan(result, dataclasses.replace(plan, layers={**plan.layers, **lines}))
