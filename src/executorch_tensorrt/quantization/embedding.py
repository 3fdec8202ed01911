"""Weight-only quantized token embeddings (issue #24): the embedding table of
an LLM stored int4 (per group of features) or int8 (per row), so that a
quantized decoder is not left with its largest float tensor.

An embedding lookup is a Gather over the table's rows. The table is
quantized row by row exactly as a Linear weight [out, in] is (int4.py,
quantize.quantize_int8): a row of the table is an "output channel", its
features the groups' axis. The module computes
`F.embedding(ids, dequantize(table))` with the same dequantize ops as the
quantized linears, so the ONNX graph holds DequantizeLinear over the stored
table feeding Gather's data input: TensorRT's parser takes that (a
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
import torch.nn.functional as F

from .errors import QuantizationError
from .int4 import quantize_int4
from .ops import DEQUANTIZE_INT4, DEQUANTIZE_WEIGHT
from .plan import QuantizationPlan, quantization_plan, with_plan
from .quantize import quantize_int8


class QuantizedEmbedding(torch.nn.Module):
    """ids -> rows of dequantize(table): int4 packed per group (`group_size`),
    or int8 per row (`group_size` None)."""

    def __init__(self, qweight: torch.Tensor, scale: torch.Tensor, group_size: int | None,
                 padding_idx: int | None) -> None:
        super().__init__()
        self.group_size = group_size
        self.padding_idx = padding_idx
        self.register_buffer("qweight", qweight)
        self.register_buffer("weight_scale", scale)

    @property
    def num_embeddings(self) -> int:
        return self.qweight.shape[0]

    def dequantized(self) -> torch.Tensor:
        if self.group_size is None:
            return DEQUANTIZE_WEIGHT(self.qweight, self.weight_scale, 0)
        return DEQUANTIZE_INT4(self.qweight, self.weight_scale, self.group_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.dequantized(), self.padding_idx)


def quantized_embedding(embedding: torch.nn.Embedding, scheme: str, group_size: int,
                        name: str = "") -> tuple[QuantizedEmbedding, str]:
    """The quantized module for `embedding` and the report's line for it."""
    if embedding.max_norm is not None or embedding.sparse:
        raise QuantizationError(
            f"embedding {name!r}: max_norm and sparse embeddings cannot be quantized (the "
            "lookup would change the stored table); quantize without embeddings")
    weight = embedding.weight.detach()
    if scheme == "int4_weight_only":
        packed, scale = quantize_int4(weight, group_size, name)
        module = QuantizedEmbedding(packed, scale.to(weight.dtype), group_size,
                                    embedding.padding_idx)
        return module, f"int4 weight-only embedding (group {group_size})"
    if scheme == "int8_weight_only":
        q, scale = quantize_int8(weight)
        module = QuantizedEmbedding(q, scale.to(weight.dtype), None, embedding.padding_idx)
        return module, "int8 weight-only embedding (per row)"
    raise QuantizationError(f"embedding {name!r}: scheme {scheme!r} has no embedding path; "
                            "embeddings are quantized int4_weight_only or int8_weight_only")


def quantize_embeddings(model: torch.nn.Module, scheme: str,
                        group_size: int = 128) -> torch.nn.Module:
    """A copy of `model` (tensors shared) with each torch.nn.Embedding
    replaced by a QuantizedEmbedding of `scheme`; the model's quantization
    plan (if any) gains one line per table."""
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
