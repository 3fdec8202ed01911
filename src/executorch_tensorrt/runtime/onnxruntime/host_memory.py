"""The host memory the onnxruntime fallback adds, for one partition, beside
the program's own bytes (docs/llm.md, "Memory"): the memory report's
"on the onnxruntime fallback" line, read from a blob before anything runs.

It follows the executor's own decisions (executor.py, named_weights.py):
weights handed over in place cost nothing more (those onnxruntime re-lays
out are small: norms, biases, position embeddings); our upcast (fp16/bf16 ->
fp32) and FP4-decoded copies, and the packed copy of the MatMul/Gemm weights
of a prepacked partition do. A partition that computes in fp32 holds its state
(KV cache) in fp32; a weight cast where used makes its fp32 value on each
call, so the largest one is counted once. A partition that computes in
fp16 (an fp16 model exported at fp32 precision) is not upcast by us, but
onnxruntime's CPU provider has no fp16 kernels for most of its nodes: it
inserts Casts to fp32 and folds those of constant weights, so it holds an
fp32 copy of each fp16 weight (measured: tools/bench/ort_memory.py). Weights
of 127 bytes or less,
which onnxruntime copies into its model, are left out (a few KiB at most).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...blob.metadata import BlobMetadata
from .fp4 import FP4_DTYPE
from .named_weights import PREPACK_LIMIT, packable, prepacking_requested
from .upcast import has_bfloat16
from .where_used import REDUCED_WEIGHT_DTYPES, cast_where_used

__all__ = ["FallbackCopies", "fallback_copies"]

# onnxruntime keeps an external initializer this small inside its model.
_IN_MODEL = 127


@dataclass(frozen=True)
class FallbackCopies:
    """Bytes the fallback holds for one partition beyond its stored weights and state."""

    packed: int = 0        # prepacked MatMul/Gemm weights (fp32)
    copies: int = 0        # onnxruntime's and our own copies of weights
    cast_scratch: int = 0  # the largest fp32 value of a weight cast where used
    state_growth: int = 0  # the state held in fp32 instead of fp16/bf16

    @property
    def total(self) -> int:
        return self.packed + self.copies + self.cast_scratch + self.state_growth


def _runtime_bytes(dtype: str, numel: int, nbytes: int, upcast: bool) -> int:
    """A weight's bytes as the fallback computes with it."""
    if dtype == FP4_DTYPE:
        return 2 * numel                     # decoded to float16
    if dtype in REDUCED_WEIGHT_DTYPES:
        return 4 * numel                     # upcast by us or by onnxruntime's Casts
    return nbytes


def fallback_copies(meta: BlobMetadata, model: bytes) -> FallbackCopies:
    """What the onnxruntime executor would add for this blob (its ONNX `model`)."""
    upcast = meta.build.precision_or_default != "fp32" or has_bfloat16(model)
    entries = list(meta.weights or ())
    where_used = cast_where_used(entries) if upcast else frozenset()
    names = [w.name for w in entries]
    packed_names = packable(model, names)
    packable_bytes = sum(4 * math.prod(w.shape) for w in entries if w.name in packed_names)
    prepack = prepacking_requested()
    prepack = packable_bytes <= PREPACK_LIMIT if prepack is None else prepack
    copies = scratch = 0
    for w in entries:
        numel = math.prod(w.shape)
        if w.name in where_used:
            scratch = max(scratch, 4 * numel)
            continue
        held = _runtime_bytes(w.dtype, numel, w.nbytes, upcast)
        # A copy (upcast, FP4 decoded) unless held as stored.
        if held != w.nbytes and held > _IN_MODEL:
            copies += held
    growth = sum(s.nbytes for s in meta.state or () if upcast and s.dtype in REDUCED_WEIGHT_DTYPES)
    return FallbackCopies(packable_bytes if prepack else 0, copies, scratch, growth)
