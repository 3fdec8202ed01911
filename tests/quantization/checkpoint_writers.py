"""Synthetic published checkpoints, written here from tiny transformers configs with
random packed weights (nothing downloaded), in the layouts their authors publish:
GPTQ and AWQ (their documented packing, written with safetensors' own writer),
compressed-tensors pack-quantized (its own compressor) and GGUF (gguf's own
GGUFWriter and quantizers; K-quant blocks as random bytes with finite scales).
Each writer returns the reference dequantization of every quantized Linear
(module path -> float32 [out, in]), computed by the format's own code or its
documented unpacking, independently of the readers under test."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

CONFIGS = {
    "llama": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 96,
              "hidden_size": 256, "intermediate_size": 256, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
              "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "tie_word_embeddings": False},
    "qwen2": {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 96,
              "hidden_size": 256, "intermediate_size": 256, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
              "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "tie_word_embeddings": True},
    # head_dim 128 is not hidden / heads: the GGUF reader must take attention.key_length
    "qwen3": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 96,
              "hidden_size": 256, "intermediate_size": 256, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 128,
              "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "tie_word_embeddings": True},
    # fused qkv_proj and gate_up_proj, as llama.cpp stores them (attn_qkv, ffn_up)
    "phi3": {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "vocab_size": 96,
             "hidden_size": 256, "intermediate_size": 256, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
             "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
             "tie_word_embeddings": False, "pad_token_id": None, "bos_token_id": 1,
             "eos_token_id": 2},
    # four norms a layer (stored plus one in GGUF), soft-caps, sliding windows
    "gemma2": {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "vocab_size": 96,
               "hidden_size": 256, "intermediate_size": 256, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
               "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
               "tie_word_embeddings": True, "sliding_window": 16, "query_pre_attn_scalar": 64,
               "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0},
    "gemma3": {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"],
               "vocab_size": 96, "hidden_size": 256, "intermediate_size": 256,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "head_dim": 128, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
               "rope_theta": 10000.0, "rope_local_base_freq": 10000.0,
               "tie_word_embeddings": True, "sliding_window": 16, "query_pre_attn_scalar": 128},
    # the fuzzers' seed: small enough to read hundreds of mutated copies in seconds
    "llama-small": {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                    "vocab_size": 32, "hidden_size": 64, "intermediate_size": 64,
                    "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
                    "head_dim": 32, "max_position_embeddings": 32, "rms_norm_eps": 1e-5,
                    "rope_theta": 10000.0, "tie_word_embeddings": False},
    # the smallest llama whose rows hold a GGUF K-quant super-block (256)
    "llama-k": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 32,
                "hidden_size": 256, "intermediate_size": 256, "num_hidden_layers": 1,
                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                "tie_word_embeddings": True},
}
# second architectures of the export tests and fuzz seeds, as small as llama-small / llama-k
CONFIGS["qwen3-small"] = {**CONFIGS["qwen3"], "vocab_size": 32, "hidden_size": 64,
                          "intermediate_size": 64, "num_hidden_layers": 1,
                          "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
                          "max_position_embeddings": 32}
CONFIGS["phi3-small"] = {**CONFIGS["phi3"], "vocab_size": 32, "hidden_size": 64,
                         "intermediate_size": 64, "num_hidden_layers": 1,
                         "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
                         "max_position_embeddings": 32}
CONFIGS["gemma3-small"] = {**CONFIGS["gemma3"], "vocab_size": 32, "hidden_size": 64,
                           "intermediate_size": 64, "num_hidden_layers": 1,
                           "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
                           "max_position_embeddings": 32, "query_pre_attn_scalar": 32}
CONFIGS["phi3-k"] = {**CONFIGS["phi3"], "vocab_size": 32, "num_hidden_layers": 1,
                     "max_position_embeddings": 32}
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
AWQ_REVERSE_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)


def float_model(arch: str, seed: int = 0):
    import transformers

    cfg = dict(CONFIGS[arch])
    torch.manual_seed(seed)
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def quantized_linears(model) -> dict[str, torch.nn.Linear]:
    return {n: m for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and n.startswith("model.layers.")}


def _save(folder: Path, arch: str, tensors: dict, qc: dict) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({**CONFIGS[arch], "quantization_config": qc}))


def _floats(model, linears) -> dict:
    skip = {f"{n}.{p}" for n in linears for p in ("weight", "bias")}
    tensors = {k: v for k, v in model.state_dict().items() if k not in skip}
    if model.config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    return tensors


def _pack_rows(codes: np.ndarray, bits: int) -> np.ndarray:
    """codes [R, C] (C a multiple of 32/bits) -> int32 [R, C*bits/32], element t of each
    run at shift bits*t."""
    per = 32 // bits
    r, c = codes.shape
    runs = codes.reshape(r, c // per, per).astype(np.uint64)
    words = (runs << (np.arange(per, dtype=np.uint64) * bits)).sum(-1).astype(np.uint32)
    return words.view(np.int32)


def write_gptq(folder: Path, arch: str, *, bits=4, group=32, act_order=False, v1=True,
               sym=False, seed=0):
    """GPTQ (AutoGPTQ layout). Returns (model, {module: f32 reference},
    {module: f16 reference as AutoGPTQ's torch unpacking computes it})."""
    model, rng = float_model(arch, seed), np.random.default_rng(seed)
    linears = quantized_linears(model)
    tensors, ref32, ref16 = _floats(model, linears), {}, {}
    top = 2 ** bits - 1
    for name, lin in linears.items():
        out, inp = lin.out_features, lin.in_features
        groups = inp // group
        codes = rng.integers(0, top + 1, (inp, out), dtype=np.uint32)  # [in, out] as stored
        zeros = (np.full((groups, out), 2 ** (bits - 1), np.uint32) if sym
                 else rng.integers(1, top + 1, (groups, out), dtype=np.uint32))
        scales = torch.from_numpy(rng.uniform(0.002, 0.02, (groups, out))).to(torch.float16)
        if act_order:
            perm = rng.permutation(inp)
            g_idx = np.empty(inp, np.int64)
            g_idx[perm] = np.arange(inp) // group
        else:
            g_idx = np.arange(inp) // group
        stored = (zeros - 1) & top if v1 else zeros
        tensors[f"{name}.qweight"] = torch.from_numpy(_pack_rows(codes.T, bits).T.copy())
        tensors[f"{name}.qzeros"] = torch.from_numpy(_pack_rows(stored, bits))
        tensors[f"{name}.scales"] = scales
        tensors[f"{name}.g_idx"] = torch.from_numpy(g_idx.astype(np.int32))
        if lin.bias is not None:
            tensors[f"{name}.bias"] = lin.bias.detach().to(torch.float16)
        ref16[name], ref32[name] = _gptq_reference(tensors, name, bits, v1)
    _save(folder, arch, tensors, gptq_config(bits, group, act_order, sym, v1))
    return model, ref32, ref16


def gptq_config(bits: int, group: int, act_order: bool, sym: bool, v1: bool) -> dict:
    """config.json's quantization_config as AutoGPTQ writes it."""
    return {"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": act_order,
            "sym": sym, "checkpoint_format": "gptq" if v1 else "gptq_v2"}


def write_gptq_shards(folder: Path, config: dict, *, group=128, seed=0,
                      shard_bytes=2 << 30) -> int:
    """A GPTQ int4 checkpoint of any size, as AutoGPTQ publishes one (symmetric,
    no act-order, v1; float16 scales, embeddings, norms and an unquantized
    lm_head), written shard by shard with its index: never the model in memory,
    no float model built. Random qweight words are random codes (every nibble
    uniform); qzeros hold the midpoint minus one (v1, symmetric); scales of about
    0.001 keep the weights near a trained model's (std ~0.005), so that 32 random
    layers stay finite in float16. `config` is a
    transformers config dict (model_type included). Returns the bytes written."""
    import transformers
    from safetensors.torch import save_file

    fields = dict(config)
    hf = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device("meta"):
        shapes = {k: (tuple(t.shape), t.dim()) for k, t in
                  transformers.AutoModelForCausalLM.from_config(hf).state_dict().items()}
    linears = {k[:-len(".weight")] for k, (_, dim) in shapes.items()
               if dim == 2 and k.startswith("model.layers.")}
    gen = torch.Generator().manual_seed(seed)
    midpoint_v1 = sum((2 ** 3 - 1) << (4 * t) for t in range(8))  # eight nibbles of 7
    folder.mkdir(parents=True, exist_ok=True)
    weight_map, shard, shard_size, total, index = {}, {}, 0, 0, 0

    def flush():
        nonlocal shard, shard_size, index
        index += 1
        name = f"model-{index:05d}.safetensors"
        save_file(shard, str(folder / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in shard})
        shard, shard_size = {}, 0

    for key, (shape, _) in shapes.items():
        module = key.rpartition(".")[0]
        if module in linears:
            out, inp = shape
            words = torch.randint(-2 ** 31, 2 ** 31, (inp // 8, out), generator=gen,
                                  dtype=torch.int64).to(torch.int32)
            parts = {"qweight": words,
                     "qzeros": torch.full((inp // group, out // 8), midpoint_v1, dtype=torch.int32),
                     "scales": torch.empty(inp // group, out).uniform_(5e-4, 1.5e-3, generator=gen)
                     .to(torch.float16),
                     "g_idx": (torch.arange(inp) // group).to(torch.int32)}
            tensors = {f"{module}.{k}": v for k, v in parts.items()}
        elif len(shape) == 1:
            tensors = {key: torch.ones(shape, dtype=torch.float16)}
        else:
            tensors = {key: torch.empty(shape).normal_(0.0, 0.02, generator=gen)
                       .to(torch.float16)}
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        if shard and shard_size + size > shard_bytes:
            flush()
        shard.update(tensors)
        shard_size += size
        total += size
    flush()
    for name in sorted(set(weight_map.values())):  # the -of-N names
        final = name.replace(".safetensors", f"-of-{index:05d}.safetensors")
        (folder / name).rename(folder / final)
        weight_map = {k: (final if v == name else v) for k, v in weight_map.items()}
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps(
        {**config, "torch_dtype": "float16",
         "quantization_config": gptq_config(4, group, False, True, True)}))
    return total


def _gptq_reference(tensors, name, bits, v1):
    """AutoGPTQ's documented torch unpacking (shift, mask, zeros + 1 for v1, g_idx gather)."""
    qweight, qzeros = tensors[f"{name}.qweight"], tensors[f"{name}.qzeros"]
    scales, g_idx = tensors[f"{name}.scales"], tensors[f"{name}.g_idx"].long()
    wf = torch.arange(0, 32, bits, dtype=torch.int32)
    zeros = torch.bitwise_right_shift(qzeros.unsqueeze(2).expand(-1, -1, 32 // bits),
                                      wf.unsqueeze(0)).to(torch.int16)
    zeros = zeros + 1 if v1 else zeros
    zeros = torch.bitwise_and(zeros, 2 ** bits - 1).reshape(qzeros.shape[0], -1)
    weight = torch.bitwise_right_shift(qweight.unsqueeze(1).expand(-1, 32 // bits, -1),
                                       wf.unsqueeze(-1)).to(torch.int16)
    weight = torch.bitwise_and(weight, 2 ** bits - 1).reshape(-1, qweight.shape[1])  # [in, out]
    diff = weight - zeros[g_idx]
    f16 = (scales[g_idx] * diff.to(torch.float16)).T
    f32 = (scales[g_idx].float() * diff.float()).T
    return f16.contiguous(), f32.contiguous()


def write_awq(folder: Path, arch: str, *, group=32, version="gemm", seed=0):
    """AWQ gemm or gemv (AutoAWQ layouts). Returns (model, {module: f32 reference})."""
    model, rng = float_model(arch, seed), np.random.default_rng(seed)
    linears = quantized_linears(model)
    tensors, refs = _floats(model, linears), {}
    for name, lin in linears.items():
        if version == "gemv":
            refs[name] = _awq_gemv(tensors, name, lin, group, rng)
            continue
        out, inp = lin.out_features, lin.in_features
        codes = rng.integers(0, 16, (inp, out), dtype=np.uint32)
        zeros = rng.integers(0, 16, (inp // group, out), dtype=np.uint32)
        order = np.concatenate([np.arange(c * 8, c * 8 + 8)[list(AWQ_ORDER)]
                                for c in range(out // 8)])
        tensors[f"{name}.qweight"] = torch.from_numpy(_pack_rows(codes[:, order], 4))
        tensors[f"{name}.qzeros"] = torch.from_numpy(_pack_rows(zeros[:, order], 4))
        tensors[f"{name}.scales"] = torch.from_numpy(
            rng.uniform(0.002, 0.02, (inp // group, out))).to(torch.float16)
        if lin.bias is not None:
            tensors[f"{name}.bias"] = lin.bias.detach().to(torch.float16)
        refs[name] = _awq_reference(tensors, name, group)
    _save(folder, arch, tensors, {"quant_method": "awq", "bits": 4, "group_size": group,
                                  "zero_point": True, "version": version})
    return model, refs


def _awq_gemv(tensors, name, lin, group, rng):
    """AutoAWQ's WQLinear_GEMV layout: qweight [out, in / 8] (8 consecutive inputs per
    word, plain order), qzeros [out, width] and scales [out, width * 8] over the
    groups, padded to `width` words (AutoAWQ's calculate_zeros_width). Returns the
    f32 reference: shifts and masks, (w - z) * s."""
    out, inp = lin.out_features, lin.in_features
    groups = inp // group
    multiple = 1 if group >= 128 else {64: 2, 32: 4}[group]
    width = -(-(-(-groups // 8)) // multiple) * multiple
    codes = rng.integers(0, 16, (out, inp), dtype=np.uint32)
    zeros = np.zeros((out, width * 8), np.uint32)
    zeros[:, :groups] = rng.integers(0, 16, (out, groups))
    scales = torch.zeros(out, width * 8, dtype=torch.float16)
    scales[:, :groups] = torch.from_numpy(rng.uniform(0.002, 0.02, (out, groups)))
    tensors[f"{name}.qweight"] = torch.from_numpy(_pack_rows(codes, 4))
    tensors[f"{name}.qzeros"] = torch.from_numpy(_pack_rows(zeros, 4))
    tensors[f"{name}.scales"] = scales
    if lin.bias is not None:
        tensors[f"{name}.bias"] = lin.bias.detach().to(torch.float16)
    shifts = torch.arange(0, 32, 4)

    def unpack(q):
        return torch.bitwise_and(q[:, :, None] >> shifts, 15).reshape(q.shape[0], -1)

    w = unpack(tensors[f"{name}.qweight"])
    z = unpack(tensors[f"{name}.qzeros"])[:, :groups].repeat_interleave(group, dim=1)
    s = scales[:, :groups].float().repeat_interleave(group, dim=1)
    return ((w - z).float() * s).contiguous()


def _awq_reference(tensors, name, group):
    """AutoAWQ's documented unpacking: shifts, then AWQ_REVERSE_ORDER, (w - z) * s."""
    shifts = torch.arange(0, 32, 4)

    def unpack(q):
        values = torch.bitwise_right_shift(q[:, :, None], shifts[None, None, :]).to(torch.int8)
        values = values.reshape(values.shape[0], -1)
        order = torch.arange(values.shape[-1]).view(-1, 8)[:, list(AWQ_REVERSE_ORDER)].view(-1)
        return torch.bitwise_and(values[:, order], 15)

    w, z = unpack(tensors[f"{name}.qweight"]), unpack(tensors[f"{name}.qzeros"])
    s = tensors[f"{name}.scales"].float().repeat_interleave(group, dim=0)
    z = z.repeat_interleave(group, dim=0)
    return ((w - z).float() * s).T.contiguous()


def write_compressed_tensors(folder: Path, arch: str, *, bits=4, group=32, symmetric=True,
                             strategy="group", scale_dtype=torch.float32, act_order=False,
                             seed=0):
    """compressed-tensors pack-quantized, packed by its own compressor. Returns
    (model, {module: the compressor's own decompression}). `act_order`: actorder
    'group' with weight_g_idx, as older compressed-tensors wrote it (see
    _act_order_group)."""
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import (QuantizationArgs, QuantizationConfig,
                                                 QuantizationScheme)

    model, gen = float_model(arch, seed), torch.Generator().manual_seed(seed)
    linears = quantized_linears(model)
    args = QuantizationArgs(num_bits=bits, type="int", symmetric=symmetric, strategy=strategy,
                            group_size=group if strategy == "group" else None)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    tensors, refs = _floats(model, linears), {}
    half = 2 ** (bits - 1)
    for name, lin in linears.items():
        w = lin.weight.detach().float()
        groups = w.shape[1] // group if strategy == "group" else 1
        amax = w.reshape(w.shape[0], groups, -1).abs().amax(-1)
        scale = (amax / (half - 1)).clamp(min=1e-4).to(scale_dtype)
        state = {"weight": w.to(scale_dtype), "weight_scale": scale}
        if not symmetric:
            state["weight_zero_point"] = torch.randint(-half // 2, half // 2, scale.shape,
                                                       generator=gen, dtype=torch.int8)
        if act_order:
            packed, refs[name] = _act_order_group(w, state, scheme, group, bits, gen)
        else:
            packed = PackedQuantizationCompressor.compress(state, scheme)
            refs[name] = PackedQuantizationCompressor.decompress(dict(packed), scheme)["weight"]
        for k, v in packed.items():
            tensors[f"{name}.{k}"] = v
        if lin.bias is not None:
            tensors[f"{name}.bias"] = lin.bias.detach()
    qc = QuantizationConfig(config_groups={"group_0": scheme}, format="pack-quantized",
                            ignore=["lm_head"]).model_dump(mode="json")
    if act_order:  # the pinned release refuses the value in QuantizationArgs; files carry it
        qc["config_groups"]["group_0"]["weights"]["actorder"] = "group"
    qc["quant_method"] = "compressed-tensors"
    _save(folder, arch, tensors, qc)
    return model, refs


def _act_order_group(w, state, scheme, group, bits, gen):
    """Act-order 'group' as compressed-tensors wrote and read it: the columns
    sorted by g_idx form the groups. Quantized and dequantized by the pinned
    compressor on the sorted columns, then put back in feature order (what its
    earlier releases did with weight_g_idx). Returns (stored tensors, reference)."""
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.compressors.pack_quantized.helpers import (pack_to_int32,
                                                                       unpack_from_int32)

    inp = w.shape[1]
    perm = torch.randperm(inp, generator=gen)  # sorted column j is feature perm[j]
    back = torch.argsort(perm)
    # act-order's scales are those of the groups of sorted columns
    sorted_w = state["weight"][:, perm]
    amax = sorted_w.float().reshape(w.shape[0], inp // group, -1).abs().amax(-1)
    state = {**state, "weight": sorted_w,
             "weight_scale": (amax / (2 ** (bits - 1) - 1)).clamp(min=1e-4).to(sorted_w.dtype)}
    packed = PackedQuantizationCompressor.compress(state, scheme)
    ref = PackedQuantizationCompressor.decompress(dict(packed), scheme)["weight"][:, back]
    codes = unpack_from_int32(packed["weight_packed"], bits, packed["weight_shape"])
    packed["weight_packed"] = pack_to_int32(codes[:, back].contiguous(), bits)
    g_idx = torch.empty(inp, dtype=torch.int32)
    g_idx[perm] = (torch.arange(inp) // group).to(torch.int32)
    packed["weight_g_idx"] = g_idx
    return packed, ref.contiguous()


def llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's reordering of llama's Q/K rows."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(
        w.shape)


def _random_k_blocks(rng, kind, rows: int, cols: int) -> np.ndarray:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as K

    block, size = GGML_QUANT_SIZES[kind]
    raw = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    scales = rng.uniform(0.001, 0.01, (rows, cols // block, 2)).astype(np.float16).view(np.uint8)
    if kind in (K.Q4_K, K.Q5_K):  # d and dmin lead the block
        raw[..., 0:4] = scales.reshape(rows, cols // block, 4)
    else:  # Q6_K: d trails the block
        raw[..., -2:] = scales[..., :2]
    return raw.reshape(rows, -1)


def write_gguf(path: Path, arch: str, kinds: dict, *, embed_kind=None, seed=0, extra=None,
               gguf_arch=None):
    """A GGUF file of the model; `kinds` maps a role ("attn_q", "ffn_down", ...,
    "default") to a GGMLQuantizationType; `extra` adds float tensors by GGUF name;
    `gguf_arch` names another architecture in the metadata. Returns (model,
    {transformers module: gguf's own dequantization, rows in transformers' order})."""
    import gguf
    from gguf import GGMLQuantizationType as K

    model, rng = float_model(arch, seed), np.random.default_rng(seed)
    c, model_type = model.config, CONFIGS[arch]["model_type"]
    gemma = model_type in ("gemma2", "gemma3_text")
    writer = gguf.GGUFWriter(str(path), gguf_arch or model_type.replace("_text", ""))
    writer.add_block_count(c.num_hidden_layers)
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_rope_freq_base(10000.0)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if head_dim != c.hidden_size // c.num_attention_heads:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    if gemma:
        writer.add_sliding_window(c.sliding_window)
    if model_type == "gemma2":
        writer.add_attn_logit_softcapping(c.attn_logit_softcapping)
        writer.add_final_logit_softcapping(c.final_logit_softcapping)
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
             "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
             "self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up"}
    if gemma:
        names.update({"post_attention_layernorm": "post_attention_norm",
                      "pre_feedforward_layernorm": "ffn_norm",
                      "post_feedforward_layernorm": "post_ffw_norm"})
    refs = {}
    for key, value in model.state_dict().items():
        if key == "lm_head.weight" and c.tie_word_embeddings:
            continue
        module, _, kind_of = key.rpartition(".")
        if module == "model.embed_tokens":
            name, role = "token_embd", "token_embd"
        elif module == "model.norm":
            name, role = "output_norm", "output_norm"
        elif module == "lm_head":
            name, role = "output", "output"
        else:
            layer, rest = module[len("model.layers."):].split(".", 1)
            role = names[rest]
            name = f"blk.{layer}.{role}"
        w = value.detach().float().numpy()
        if gemma and role.endswith("norm"):
            w = w + 1  # llama.cpp's converter stores Gemma's norms plus one
        heads = {"attn_q": c.num_attention_heads, "attn_k": c.num_key_value_heads}.get(role)
        if model_type == "llama" and heads:
            w = llama_cpp_permute(w, heads)
        kind = kinds.get(role, kinds.get("default")) if kind_of == "weight" and w.ndim == 2 \
            and role != "token_embd" else (embed_kind if role == "token_embd" else None)
        if kind is None:
            writer.add_tensor(f"{name}.{kind_of}", w.astype(np.float32))
            continue
        if kind in (K.Q4_K, K.Q5_K, K.Q6_K):
            data = _random_k_blocks(rng, kind, *w.shape)
        else:
            data = gguf.quants.quantize(w, kind)
        writer.add_tensor(f"{name}.{kind_of}", data, raw_dtype=kind)
        ref = torch.from_numpy(gguf.quants.dequantize(data, kind).astype(np.float32))
        if model_type == "llama" and heads:  # undo the permutation: transformers' row order
            undo = np.argsort(llama_cpp_permute(np.arange(w.shape[0]), heads))
            ref = ref[torch.from_numpy(undo)]
        if role != "token_embd":  # a quantized embedding is read back as float
            refs[module] = ref.contiguous()
    for name, value in (extra or {}).items():
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model, refs
