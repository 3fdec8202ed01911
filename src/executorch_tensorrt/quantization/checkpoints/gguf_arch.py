"""GGUF architectures as transformers models: the config from `{arch}.*` metadata
and each GGUF tensor name's transformers state-dict key.

llama.cpp's converter permutes the rows of llama's Q and K projections (its
rotary embedding pairs adjacent features, transformers' pairs the two halves
of each head); `unpermute_rows` gives the row order that undoes it. qwen2 is
stored unpermuted.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from .common import require


@dataclass(frozen=True)
class Architecture:
    model_type: str
    model_class: str
    permuted_qk: bool  # llama.cpp reorders Q/K rows for this architecture
    attention_bias: bool


ARCHITECTURES = {
    "llama": Architecture("llama", "LlamaForCausalLM", permuted_qk=True, attention_bias=False),
    "qwen2": Architecture("qwen2", "Qwen2ForCausalLM", permuted_qk=False, attention_bias=True),
}
GLOBAL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
PER_LAYER = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
LINEARS = {"output", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
           "ffn_down"}
# Tensors llama.cpp writes that transformers recomputes (rope scaling factors).
DERIVED = {"rope_freqs.weight"}
_NAME = re.compile(r"(?:blk\.(\d+)\.)?([a-z_]+)\.(weight|bias)")


def architecture(metadata: dict, source: str) -> Architecture:
    arch = metadata.get("general.architecture")
    require(arch in ARCHITECTURES, source, "general.architecture", repr(arch),
            f"one of {sorted(ARCHITECTURES)}", "other architectures have no name map yet")
    return ARCHITECTURES[arch]


@dataclass(frozen=True)
class MappedName:
    key: str  # transformers state-dict key, e.g. "model.layers.0.self_attn.q_proj.weight"
    module: str  # the module path, e.g. "model.layers.0.self_attn.q_proj"
    role: str  # the GGUF role, e.g. "attn_q"
    is_linear_weight: bool


def map_name(name: str, layers: int, source: str) -> MappedName:
    m = _NAME.fullmatch(name)
    role = m.group(2) if m else None
    if m and m.group(1) is None and role in GLOBAL:
        module = GLOBAL[role]
    elif m and m.group(1) is not None and role in PER_LAYER and int(m.group(1)) < layers:
        module = f"model.layers.{int(m.group(1))}.{PER_LAYER[role]}"
    else:
        require(False, source, "tensor name", repr(name),
                      "a llama/qwen2 tensor (token_embd, output_norm, output, blk.N.attn_q, ...)",
                      "this architecture's extra tensors have no transformers mapping")
    return MappedName(f"{module}.{m.group(3)}", module, role,
                      role in LINEARS and m.group(3) == "weight")


def _get(metadata: dict, key: str, source: str, kind=int, default=None):
    value = metadata.get(key, default)
    ok = isinstance(value, kind) and not isinstance(value, bool) and value > 0
    require(ok, source, f"metadata {key!r}", repr(value)[:40], f"a positive {kind.__name__}")
    return value


def transformers_config(metadata: dict, arch: Architecture, vocab_size: int, tied: bool,
                        source: str) -> dict:
    a = metadata["general.architecture"]
    heads = _get(metadata, f"{a}.attention.head_count", source)
    hidden = _get(metadata, f"{a}.embedding_length", source)
    kv_heads = _get(metadata, f"{a}.attention.head_count_kv", source, default=heads)
    head_dim = _get(metadata, f"{a}.attention.key_length", source, default=hidden // heads)
    require(heads % kv_heads == 0, source, f"metadata '{a}.attention.head_count_kv'", kv_heads,
            f"a divisor of head_count {heads}")
    config = {
        "model_type": arch.model_type, "architectures": [arch.model_class],
        "vocab_size": vocab_size, "hidden_size": hidden,
        "intermediate_size": _get(metadata, f"{a}.feed_forward_length", source),
        "num_hidden_layers": _get(metadata, f"{a}.block_count", source),
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
        "max_position_embeddings": _get(metadata, f"{a}.context_length", source),
        "rms_norm_eps": _get(metadata, f"{a}.attention.layer_norm_rms_epsilon", source, float),
        "rope_theta": _get(metadata, f"{a}.rope.freq_base", source, float, 10000.0),
        "tie_word_embeddings": tied,
    }
    for ours, theirs in (("bos_token_id", "tokenizer.ggml.bos_token_id"),
                         ("eos_token_id", "tokenizer.ggml.eos_token_id")):
        if isinstance(metadata.get(theirs), int):
            config[ours] = metadata[theirs]
    if arch.model_type == "llama":
        config["attention_bias"] = False
        config["mlp_bias"] = False
    return config


def unpermute_rows(role: str, config: dict, rows: int, name: str) -> torch.Tensor | None:
    """The row order that undoes llama.cpp's Q/K permutation (None: rows as stored),
    for a tensor of `rows` rows, checked against the metadata's heads before any
    index is made. Stored row h*D + 2i + half is transformers' row h*D + half*D/2 + i."""
    if role not in ("attn_q", "attn_k"):
        return None
    heads = config["num_attention_heads"] if role == "attn_q" else config["num_key_value_heads"]
    head_dim = config["head_dim"]
    require(heads * head_dim == rows, name, "rows", rows,
            f"{heads * head_dim} ({heads} heads x head_dim {head_dim} from the metadata)",
            "the metadata does not match the tensors")
    return torch.arange(rows).reshape(heads, head_dim // 2, 2).transpose(1, 2).reshape(-1)
