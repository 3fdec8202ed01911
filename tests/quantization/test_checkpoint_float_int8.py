"""A checkpoint's float layers in 8 bits: `from_checkpoint(quantize_float=
"int8_weight_only")` (llm-export --model CHECKPOINT --quantize int8_weight_only)
stores the embedding and the unquantized lm_head the checkpoint left float in
int8, keeps its packed layers bit for bit, names what it quantized, and the
program decodes the tokens of eager over the so-quantized model. The other
combinations are refused."""
from __future__ import annotations

import pytest
import torch

from checkpoint_writers import write_gptq
from executorch_tensorrt import llm
from executorch_tensorrt.errors import CheckpointError, ExportError
from executorch_tensorrt.llm.greedy_decode import greedy_decode
from executorch_tensorrt.quantization.packed_linear import PackedLinear
from tests.helpers import cli_main

MAX_SEQ, MAX_CONTEXT, NEW = 4, 16, 6
PROMPT = [1, 5, 17, 9, 7, 3]


def _packed(model):
    return {n: m.packed for n, m in model.named_modules() if isinstance(m, PackedLinear)}


@pytest.fixture
def checkpoint(tmp_path):
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    write_gptq(folder, "llama-small", sym=True)  # no act-order: the reader's int4 fast path
    return folder


def test_float_layers_in_int8_packed_kept_and_eager_tokens(checkpoint, tmp_path,
                                                           allow_fallback):
    from executorch.runtime import Runtime

    plain, plain_ckpt = llm.from_checkpoint(checkpoint)
    model, ckpt = llm.from_checkpoint(checkpoint, quantize_float="int8_weight_only")
    # the checkpoint's own layers: the same codes, scales and zero points
    packed, plain_packed = _packed(model), _packed(plain)
    assert packed and packed.keys() == plain_packed.keys()
    for name, weight in packed.items():
        other = plain_packed[name]
        for part in ("codes", "scales", "zero_points"):
            a, b = getattr(weight, part), getattr(other, part)
            assert (a is None and b is None) or torch.equal(a, b), (name, part)
    # the float ones in int8, their float tensors no longer held
    embed, head = model.get_input_embeddings(), model.lm_head
    assert embed.qweight.dtype == torch.int8 and head.qweight.dtype == torch.int8
    assert {"model.embed_tokens.weight", "lm_head.weight"} <= plain_ckpt.tensors.keys()
    assert not {"model.embed_tokens.weight", "lm_head.weight"} & ckpt.tensors.keys()
    assert any("model.embed_tokens, lm_head" in note for note in ckpt.notes), ckpt.notes

    result = llm.export(model, max_seq_len=MAX_SEQ, max_context_len=MAX_CONTEXT,
                        output=tmp_path / "model.pte", progress=None)
    lines = result.export.report.quantization
    assert lines["model.embed_tokens"].startswith("int8 weight-only embedding"), lines
    assert lines["lm_head"].startswith("int8 weight-only"), lines
    assert lines["model.layers.0.mlp.down_proj"].startswith("int4 affine"), lines
    # stored in 8 bits: the program is smaller than the float tables' bytes allow
    table_bytes = sum(plain_ckpt.tensors[k].numel() for k in ("model.embed_tokens.weight",
                                                              "lm_head.weight"))
    floats = sum(t.numel() * t.element_size() for t in ckpt.tensors.values())
    stored = sum(p.stored_bytes for p in packed.values())
    assert result.path.stat().st_size < floats + stored + table_bytes * 1.5 + 400_000

    method = Runtime.get().load_program(str(result.path)).load_method("forward")
    got = greedy_decode(method, PROMPT, NEW, limits=result.metadata)
    want = greedy_decode(llm.eager_decoder(model, MAX_CONTEXT), PROMPT, NEW,
                         limits=result.metadata)
    assert got.tokens == want.tokens


def test_bad_combinations_refused(checkpoint, tmp_path):
    with pytest.raises(CheckpointError, match="int8_weight_only only"):
        llm.from_checkpoint(checkpoint, quantize_float="int4_weight_only")
    model, _ = llm.from_checkpoint(checkpoint)
    with pytest.raises(ExportError, match="never quantized again"):
        llm.export(model, max_seq_len=MAX_SEQ, max_context_len=MAX_CONTEXT,
                   quantize="int8_weight_only", output=tmp_path / "x.pte", progress=None)
    code, _, stderr = cli_main("llm-export", tmp_path / "y.pte", "--model", checkpoint,
                               "--max-seq-len", MAX_SEQ, "--max-context-len", MAX_CONTEXT,
                               "--quantize", "int4_weight_only")
    assert code != 0 and "keep their own quantization" in stderr, stderr
    assert not (tmp_path / "y.pte").exists()
