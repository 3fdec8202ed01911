"""Published quantized checkpoints end to end, two architectures per format: GPTQ
(act-order), AWQ, compressed-tensors (zero points; act-order groups) folders and
GGUF files (Q4_0, Q4_1, Q4_K, Q8_0), written here from tiny configs, go through
llm.from_checkpoint and llm.export with every Linear on TensorRT and its codes
stored packed (no float copy), and the program decodes the tokens of eager over
the checkpoint's own dequantized weights. TensorRT partitions run through the
onnxruntime fallback."""
from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as K

from checkpoint_writers import write_awq, write_compressed_tensors, write_gguf, write_gptq
from executorch_tensorrt import llm
from executorch_tensorrt.llm.greedy_decode import greedy_decode
from executorch_tensorrt.quantization.packed_linear import PackedLinear

MAX_SEQ, MAX_CONTEXT, NEW = 4, 16, 6
PROMPT = [1, 5, 17, 9, 7, 3]
GGUF_KINDS = {"default": K.Q4_K, "attn_q": K.Q4_0, "attn_k": K.Q4_1, "ffn_down": K.Q8_0}


# Two architectures per format: llama, and qwen3 (q/k norms, head_dim from the config)
# or phi3 (fused qkv_proj and gate_up_proj).
WRITERS = {
    ("gptq", "llama"): lambda d: write_gptq(d, "llama-small", act_order=True),
    ("gptq", "qwen3"): lambda d: write_gptq(d, "qwen3-small", act_order=True, sym=True),
    ("awq", "llama"): lambda d: write_awq(d, "llama-small"),
    ("awq", "phi3"): lambda d: write_awq(d, "phi3-small"),
    ("compressed-tensors", "llama"): lambda d: write_compressed_tensors(d, "llama-small",
                                                                        symmetric=False),
    ("compressed-tensors", "qwen3"): lambda d: write_compressed_tensors(d, "qwen3-small",
                                                                        act_order=True),
    ("gguf", "llama"): lambda d: write_gguf(d / "model.gguf", "llama-k", GGUF_KINDS,
                                            embed_kind=K.Q8_0),
    ("gguf", "phi3"): lambda d: write_gguf(d / "model.gguf", "phi3-k",
                                           {"default": K.Q4_K, "attn_qkv": K.Q4_0,
                                            "ffn_up": K.Q4_1, "ffn_down": K.Q8_0}),
}


@pytest.mark.parametrize("fmt, arch", sorted(WRITERS))
def test_checkpoint_exports_packed_and_decodes_eager_tokens(fmt, arch, tmp_path,
                                                            allow_fallback):
    from executorch.runtime import Runtime

    source = tmp_path / "checkpoint"
    source.mkdir()
    WRITERS[fmt, arch](source)
    path = source / "model.gguf" if fmt == "gguf" else source
    model, checkpoint = llm.from_checkpoint(path)
    assert checkpoint.format == fmt and checkpoint.config["model_type"] == arch
    packed = [m.packed for m in model.modules() if isinstance(m, PackedLinear)]
    assert packed and all(p.bits in (4, 8) for p in packed)
    result = llm.export(model, max_seq_len=MAX_SEQ, max_context_len=MAX_CONTEXT,
                        output=tmp_path / "model.pte", progress=None)
    report = result.export.report
    assert result.export.backends["forward"] == ["TensorRTBackend"]
    assert not report.rejected, report.main_reasons()
    # Stored packed: the program is the codes and scales plus the float tensors
    # and the graph, never a float copy of a quantized weight (4 bytes a weight).
    floats = sum(t.numel() * t.element_size() for t in checkpoint.tensors.values())
    quantized = sum(p.stored_bytes for p in packed)
    float_copy = sum(p.out_features * p.in_features * 4 for p in packed)
    size = result.path.stat().st_size
    assert floats + quantized < size < floats + quantized + float_copy / 2, (size, quantized)

    method = Runtime.get().load_program(str(result.path)).load_method("forward")
    got = greedy_decode(method, PROMPT, NEW, limits=result.metadata)
    want = greedy_decode(llm.eager_decoder(model, MAX_CONTEXT), PROMPT, NEW,
                         limits=result.metadata)
    assert got.tokens == want.tokens
    for a, b in zip(got.logits, want.logits):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3)
