"""The run check's reference for an LLM exported in float16 or bfloat16.

Eager PyTorch computing in bf16 is not the model's exact function: its own
rounding grows with depth. On an 8B-shaped random bf16 decoder it is 0.12 off
eager computing in fp32 at 8 layers and 0.25 at 32, more than bf16's check
tolerance (docs/llm.md), while the CPU fallback, which computes in fp32 over
the bf16 weights, is 0.018 off fp32 at 32 layers. Comparing with eager bf16
failed the better program.

So the reference is eager computing in fp32 over the same reduced-precision
weights (and cache), rounded to the output's dtype: what an exact program
returns. A program may compute in the dtype itself (a TensorRT bf16 engine on
a GPU), so the check also allows twice eager's own rounding measured on the
same inputs (`DecoderReference.rounding`): no further from the exact function
than PyTorch's own bf16, with room for another summation order.

No fp32 copy of the model is made: a Linear's weight is cast in blocks of
rows as it multiplies, an embedding gathers its rows in the dtype (exact) and
casts only those, other modules' floating tensors are cast while they run.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import ExportError
from .hf_export import hf_decode_step

#: fp32 bytes of a Linear weight cast at once (the 8B head is 2.1 GB in fp32).
CAST_BLOCK_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class DecoderReference:
    outputs: tuple[torch.Tensor, ...]  # eager in fp32, rounded to the model's dtype
    rounding: float                    # largest |eager in the dtype - the fp32 logits|
    dtype: torch.dtype

    def tolerance(self, base: float) -> float:
        """The run check's relative tolerance (times max(1, largest |logit|),
        run_check._compare): `base` plus twice eager's own rounding."""
        scale = max(1.0, float(self.outputs[0].float().abs().max()))
        return base + 2 * self.rounding / scale

    def recorded(self, *inputs) -> tuple[torch.Tensor, ...]:
        """The reference model export's run check calls: the outputs measured
        on the inputs llm.export hands both (measure's)."""
        return self.outputs

    def describe(self) -> str:
        name = str(self.dtype).removeprefix("torch.")
        return (f"run check reference: eager computing in float32 over the {name} weights; "
                f"eager computing in {name} is {self.rounding:.3g} from it on these inputs, "
                f"which the check allows twice over")


def measure(model: torch.nn.Module, max_context_len: int, batch_size: int,
            inputs: tuple, kv_cache_dtype: str | None = None) -> DecoderReference:
    """The reference for `model` (a causal LM in float16/bfloat16) on `inputs`."""
    in_dtype, exact = eager_logits(model, max_context_len, batch_size, inputs, kv_cache_dtype)
    name = str(in_dtype.dtype).removeprefix("torch.")
    if not bool(torch.isfinite(exact).all()):
        raise ExportError("the run check's reference, eager PyTorch computing in float32 over "
                          f"the {name} weights, gives non-finite logits: the model's own "
                          "weights or inputs overflow; check the checkpoint")
    if not bool(torch.isfinite(in_dtype).all()):
        raise ExportError(f"eager PyTorch computing in {name} gives non-finite logits where "
                          f"float32 gives finite ones: the model's activations overflow {name}"
                          "; export it with dtype bfloat16 (--dtype bfloat16) or float32")
    rounding = float((in_dtype.float() - exact).abs().max())
    return DecoderReference((exact.to(in_dtype.dtype),), rounding, in_dtype.dtype)


def eager_logits(model: torch.nn.Module, max_context_len: int, batch_size: int,
                 inputs: tuple, kv_cache_dtype: str | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """`model`'s logits on `inputs` (tokens, positions), each over a fresh
    static cache: computing in its dtype, and in fp32 (float32_compute, an
    fp32 cache); with the cache's writes rounded to `kv_cache_dtype` if given."""
    with torch.no_grad():
        in_dtype = hf_decode_step(model, max_context_len, batch_size,
                                  kv_cache_dtype=kv_cache_dtype)(*inputs)
        step = hf_decode_step(model, max_context_len, batch_size, cache_dtype=torch.float32,
                              kv_cache_dtype=kv_cache_dtype)
        with float32_compute(model):
            exact = step(*inputs)
    return in_dtype, exact


@contextmanager
def float32_compute(model: torch.nn.Module):
    """Inside: `model` computes in fp32 over its own reduced-precision
    tensors, holding at most one module's cast at a time (a Linear's, one
    block of rows). Everything is as it was after."""
    undo = []
    try:
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.forward = _blocked_linear(module)
                undo.append(lambda m=module: delattr(m, "forward"))
            elif isinstance(module, torch.nn.Embedding):
                handle = module.register_forward_hook(lambda m, args, out: out.float())
                undo.append(handle.remove)
            elif any(t.is_floating_point() for t in _own_tensors(module)):
                handles = (module.register_forward_pre_hook(_cast_own),
                           module.register_forward_hook(_restore_own))
                undo.extend(h.remove for h in handles)
        yield model
    finally:
        for step in reversed(undo):
            step()
        for module in model.modules():  # a forward that raised left its cast
            _restore_own(module, None, None)


def _own_tensors(module):
    yield from module.parameters(recurse=False)
    yield from module.buffers(recurse=False)


def _cast_own(module, args):
    saved = []
    for t in _own_tensors(module):
        if t.is_floating_point() and t.dtype != torch.float32:
            saved.append((t, t.data))
            t.data = t.data.float()
    module._etrt_fp32_saved = saved


def _restore_own(module, args, output):
    for t, data in module.__dict__.pop("_etrt_fp32_saved", ()):
        t.data = data


def _blocked_linear(module: torch.nn.Linear):
    def forward(x: torch.Tensor) -> torch.Tensor:
        weight, bias = module.weight, module.bias
        rows = max(1, CAST_BLOCK_BYTES // (4 * weight.shape[1]))
        x = x.float()
        return torch.cat([
            F.linear(x, weight[i:i + rows].float(),
                     None if bias is None else bias[i:i + rows].float())
            for i in range(0, weight.shape[0], rows)], dim=-1)
    return forward
