"""GGUF architectures as transformers models: the config from `{arch}.*` metadata
(the keys transformers' own GGUF loading reads), each GGUF tensor name's
transformers state-dict key, and each tensor's shape from that config, so that
the metadata and the tensor table are checked against each other. llama (and
Mistral, which llama.cpp writes as llama), qwen2, qwen3, phi3 (fused qkv and
gate_up, as transformers has them), gemma2 and gemma3 (norms stored plus one).

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
    per_layer: dict  # GGUF role -> the transformers module under model.layers.N
    norm_shift: float = 0.0  # llama.cpp stores Gemma's norms (applied as 1 + w) plus one
    large_layers: int = 0  # block count of the 27B model, whose attention scale differs


_ATTENTION = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
              "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj"}
_MLP = {"ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
_NORMS = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
_QK_NORMS = {"attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
# Phi-3 keeps transformers' fused projections: Q, K, V rows in one tensor, gate then up in
# another, as llama.cpp stores them.
_PHI3 = {**_NORMS, "attn_qkv": "self_attn.qkv_proj", "attn_output": "self_attn.o_proj",
         "ffn_up": "mlp.gate_up_proj", "ffn_down": "mlp.down_proj"}
# Gemma's four norms per layer: before and after attention, before and after the MLP.
_GEMMA = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
          "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
          **_ATTENTION, **_MLP}
ARCHITECTURES = {
    "llama": Architecture("llama", "LlamaForCausalLM", True, False, {**_NORMS, **_ATTENTION,
                                                                      **_MLP}),
    "qwen2": Architecture("qwen2", "Qwen2ForCausalLM", False, True, {**_NORMS, **_ATTENTION,
                                                                      **_MLP}),
    "qwen3": Architecture("qwen3", "Qwen3ForCausalLM", False, False,
                          {**_NORMS, **_ATTENTION, **_MLP, **_QK_NORMS}),
    "phi3": Architecture("phi3", "Phi3ForCausalLM", False, False, _PHI3),
    "gemma2": Architecture("gemma2", "Gemma2ForCausalLM", False, False, _GEMMA, 1.0, 46),
    "gemma3": Architecture("gemma3_text", "Gemma3ForCausalLM", False, False,
                           {**_GEMMA, **_QK_NORMS}, 1.0, 62),
}
GLOBAL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
LINEARS = {"output", "attn_q", "attn_k", "attn_v", "attn_output", "attn_qkv", "ffn_gate",
           "ffn_up", "ffn_down"}
# Tensors llama.cpp writes that transformers recomputes (rope scaling factors).
DERIVED = {"rope_freqs.weight"}
LONGROPE = {"rope_factors_long.weight", "rope_factors_short.weight"}
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


def map_name(name: str, arch: Architecture, layers: int, source: str) -> MappedName:
    m = _NAME.fullmatch(name)
    role = m.group(2) if m else None
    if m and m.group(1) is None and role in GLOBAL:
        module = GLOBAL[role]
    elif m and m.group(1) is not None and role in arch.per_layer and int(m.group(1)) < layers:
        module = f"model.layers.{int(m.group(1))}.{arch.per_layer[role]}"
    else:
        require(name not in LONGROPE, name, "present", True, "absent (LongRoPE's factors)",
                "LongRoPE context scaling is not read: use the model's short-context variant")
        require(False, source, "tensor name", repr(name),
                f"a {arch.model_type} tensor (token_embd, output_norm, output, "
                f"blk.N.{{{', '.join(arch.per_layer)}}} with N below {layers})",
                "the tensor has no transformers mapping for this architecture")
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
    _rotary_and_extras(metadata, a, config, source)
    if arch.norm_shift:
        _gemma_fields(metadata, a, arch, config, source)
    return config


def _gemma_fields(metadata: dict, a: str, arch: Architecture, config: dict, source: str) -> None:
    """What llama.cpp reads for Gemma 2 / 3: logit soft-caps (Gemma 2), the sliding
    window, Gemma 3's linear rope scaling; and what it fixes in code: the
    attention scale (the head size, but hidden / heads for the 27B models) and
    Gemma 3's local rope base 10000 and five sliding layers to one global."""
    config["sliding_window"] = _get(metadata, f"{a}.attention.sliding_window", source)
    heads = config["num_attention_heads"]
    large = config["num_hidden_layers"] == arch.large_layers
    config["query_pre_attn_scalar"] = (config["hidden_size"] // heads if large
                                       else config["head_dim"])
    if a == "gemma2":
        for ours in ("attn_logit_softcapping", "final_logit_softcapping"):
            key = f"{a}.{ours}"
            config[ours] = _get(metadata, key, source, float) if key in metadata else None
        return
    config["rope_local_base_freq"] = 10000.0
    config["sliding_window_pattern"] = 6
    scaling = metadata.get(f"{a}.rope.scaling.type", "none")
    require(scaling in ("none", "linear"), source, f"metadata '{a}.rope.scaling.type'",
            repr(scaling)[:40], "'none' or 'linear' (what Gemma 3 uses)")
    if scaling == "linear":
        factor = _get(metadata, f"{a}.rope.scaling.factor", source, float)
        config["rope_scaling"] = {"rope_type": "linear", "factor": factor}


def _rotary_and_extras(metadata: dict, a: str, config: dict, source: str) -> None:
    """The rotary width against the head size (transformers rotates whole heads,
    Phi-3 a stated share), V's head size against K's, and Phi-3's own fields."""
    head_dim, hidden, heads = config["head_dim"], config["hidden_size"], config[
        "num_attention_heads"]
    value_length = metadata.get(f"{a}.attention.value_length", head_dim)
    require(value_length == head_dim, source, f"metadata '{a}.attention.value_length'",
            repr(value_length)[:40], f"{head_dim} (attention.key_length: transformers gives "
            "keys and values one head size)")
    rotary = _get(metadata, f"{a}.rope.dimension_count", source, default=head_dim)
    if a != "phi3":
        require(rotary == head_dim, source, f"metadata '{a}.rope.dimension_count'", rotary,
                f"{head_dim} (the head size: {a} rotates whole heads)",
                "the metadata does not match the architecture")
        return
    require(head_dim * heads == hidden, source, f"metadata '{a}.attention.key_length'", head_dim,
            f"{hidden // heads} (embedding_length / head_count, Phi-3's head size)")
    require(rotary <= head_dim and rotary % 2 == 0, source, f"metadata '{a}.rope.dimension_count'",
            rotary, f"an even number up to the head size {head_dim}")
    config["partial_rotary_factor"] = rotary / head_dim
    pad = metadata.get("tokenizer.ggml.padding_token_id")
    # Phi-3's config defaults its pad id to 32000, past a smaller vocabulary
    config["pad_token_id"] = pad if isinstance(pad, int) and 0 <= pad < config[
        "vocab_size"] else None
    window = metadata.get(f"{a}.attention.sliding_window")
    if window is not None:
        config["sliding_window"] = _get(metadata, f"{a}.attention.sliding_window", source)


def expected_shape(mapped: MappedName, config: dict) -> tuple[int, ...]:
    """A tensor's torch shape from the config the metadata gave: the check that
    the tensor table and the metadata describe one model."""
    hidden, head_dim, ff = config["hidden_size"], config["head_dim"], config["intermediate_size"]
    q = config["num_attention_heads"] * head_dim
    kv = config["num_key_value_heads"] * head_dim
    vocab = config["vocab_size"]
    fused_up = config["model_type"] == "phi3"
    shapes = {"token_embd": (vocab, hidden), "output": (vocab, hidden), "attn_q": (q, hidden),
              "attn_k": (kv, hidden), "attn_v": (kv, hidden), "attn_output": (hidden, q),
              "attn_qkv": (q + 2 * kv, hidden), "ffn_gate": (ff, hidden),
              "ffn_up": (2 * ff if fused_up else ff, hidden), "ffn_down": (hidden, ff),
              "attn_q_norm": (head_dim,), "attn_k_norm": (head_dim,)}
    shape = shapes.get(mapped.role, (hidden,))  # the rest are norms over the hidden size
    return shape[:1] if mapped.key.endswith(".bias") else shape


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
