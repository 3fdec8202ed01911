"""GPTQ and AWQ checkpoints (safetensors, transformers' quantization_config) -> PackedWeight.

GPTQ (AutoGPTQ / GPTQModel layout): `qweight` int32 [in / p, out] packs p = 32 / bits
codes of consecutive input features per word (feature p*i + t at shift bits*t);
`qzeros` int32 [groups, out / p] packs zero points the same way along outputs;
`scales` [groups, out]; `g_idx` [in] (act-order, `desc_act`) maps each input
feature to its group. checkpoint_format "gptq" (v1) stores zero points minus
one: the zero is (stored + 1) masked to `bits`, as AutoGPTQ's unpacking does;
"gptq_v2" stores them as they are. W = (code - zero) * scale.

AWQ (AutoAWQ "gemm" layout): `qweight` int32 [in, out / 8] packs 8 output
features per word in the order [0, 2, 4, 6, 1, 3, 5, 7] (nibble t holds
feature 8j + ORDER[t]); `qzeros` int32 [groups, out / 8] the same; `scales`
[groups, out]. W = (code - zero) * scale.

AWQ "gemv" layout (AutoAWQ's WQLinear_GEMV): `qweight` int32 [out, in / 8] packs 8
consecutive input features per word in plain order (feature 8j + t at shift 4t);
`qzeros` int32 [out, width] packs the groups the same way, and `scales` [out,
width * 8] holds them in its first columns: width is ceil(groups / 8) rounded
up to a multiple of 4, 2 or 1 for group sizes 32, 64 and 128 or more, the rest
padding. W = (code - zero) * scale.
"""
from __future__ import annotations

import torch

from .common import (Checkpoint, expect_tensor, input_order_from_g_idx, make_packed, require,
                     unpack_int32)
from .safetensors_reader import SafetensorsFolder

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
AWQ_VERSIONS = ("gemm", "gemv")
GPTQ_FORMATS = ("gptq", "gptq_v2")
PARTS = ("qweight", "qzeros", "scales", "g_idx", "bias")
SCALE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
SIGN_FLIP_INT4 = 0x88  # unsigned -> signed nibbles (PackedWeight.sign_flip)
READ_BLOCK_BYTES = 4 << 20  # a large qweight is read this much at a time


def _settings(qc: dict, where: str) -> dict:
    method = qc.get("quant_method")
    bits = qc.get("bits", qc.get("w_bit"))
    group = qc.get("group_size", qc.get("q_group_size"))
    require(bits in ((4, 8) if method == "gptq" else (4,)), where, f"{method} bits", bits,
            "4 or 8 for GPTQ, 4 for AWQ", "TensorRT's weight-only GEMMs take int4 and int8 only")
    require(type(group) is int and (group == -1 or group > 0), where, "group_size", group,
            "a positive integer or -1 (per output channel)")
    if method == "gptq":
        fmt = qc.get("checkpoint_format", "gptq")
        require(fmt in GPTQ_FORMATS, where, "checkpoint_format", repr(fmt),
                f"one of {list(GPTQ_FORMATS)}", "kernel-specific layouts (marlin, bitblas, "
                "exllama) are not read: save the model in the plain gptq format")
        return {"method": "gptq", "bits": bits, "group": group, "v1": fmt == "gptq",
                "desc_act": bool(qc.get("desc_act", False))}
    version = str(qc.get("version", "gemm")).lower()
    require(version in AWQ_VERSIONS, where, "AWQ version", repr(version),
            f"one of {list(AWQ_VERSIONS)}", "the gemv_fast (interleaved), exllama and marlin "
            "layouts are not read: save the model with version gemm")
    require(qc.get("zero_point", True) is True, where, "AWQ zero_point", qc.get("zero_point"),
            "true (the gemm and gemv layouts always store zero points)")
    require(version != "gemv" or group in (32, 64) or group >= 128, where,
            "group_size for AWQ gemv", group, "32, 64 or at least 128 (the sizes AutoAWQ's "
            "gemv layout pads its zero points for)")
    return {"method": "awq", "bits": bits, "group": group, "gemv": version == "gemv"}


def read_gptq_awq(files: SafetensorsFolder, config: dict, source: str) -> Checkpoint:
    qc = config["quantization_config"]
    s = _settings(qc, f"{source} quantization_config")
    prefixes = sorted(n[: -len(".qweight")] for n in files.names() if n.endswith(".qweight"))
    require(bool(prefixes), source, "the number of quantized Linears (tensors named *.qweight)",
            0, f"at least one in a {s['method']} checkpoint")
    result = Checkpoint(format=s["method"], config=config)
    for prefix in prefixes:
        read = (_gptq_layer if s["method"] == "gptq" else
                _awq_gemv_layer if s["gemv"] else _awq_layer)
        result.packed[prefix] = read(files, prefix, s)
    owned = {f"{p}.{part}" for p in prefixes for part in PARTS}
    for name in files.names():
        if name not in owned:
            result.tensors[name] = files.read(name)
    return result


def _common(files: SafetensorsFolder, prefix: str, s: dict, out_features: int,
            in_features: int):
    """Scales [groups, out] and packed zeros of a layer, checked, with its group count."""
    group = in_features if s["group"] == -1 else s["group"]
    require(in_features % group == 0, prefix, "in_features", in_features,
            f"a multiple of group_size {group}")
    groups = in_features // group
    per_word = 32 // s["bits"]
    scales_entry = files.entry(f"{prefix}.scales")
    require(scales_entry.dtype in SCALE_DTYPES, f"{prefix}.scales", "dtype", scales_entry.dtype,
            f"one of {list(SCALE_DTYPES)}")
    scales = files.read(f"{prefix}.scales")
    expect_tensor(f"{prefix}.scales", scales, scales_entry.dtype, (groups, out_features))
    require(out_features % per_word == 0, prefix, "out_features", out_features,
            f"a multiple of {per_word} (zero points pack {per_word} per int32)")
    qzeros = _read_checked(files, f"{prefix}.qzeros", torch.int32,
                           (groups, out_features // per_word))
    return group, scales, qzeros


def _read_checked(files, name, dtype, shape):
    entry = files.entry(name)  # shape checked before the bytes are read
    require(entry.dtype == dtype and entry.shape == tuple(shape), name, "dtype and shape",
            f"{entry.dtype} {list(entry.shape)}", f"{dtype} {list(shape)}",
            "the checkpoint does not match its config")
    return files.read(name)


def _bias(files, prefix, out_features):
    name = f"{prefix}.bias"
    if name not in files.where:
        return None
    entry = files.entry(name)
    require(entry.dtype.is_floating_point and entry.shape == (out_features,), name,
            "dtype and shape", f"{entry.dtype} {list(entry.shape)}", f"a float [{out_features}]")
    return files.read(name)


def _gptq_layer(files: SafetensorsFolder, prefix: str, s: dict):
    bits, per_word = s["bits"], 32 // s["bits"]
    entry = files.entry(f"{prefix}.qweight")
    require(entry.dtype == torch.int32 and len(entry.shape) == 2, f"{prefix}.qweight",
            "dtype and rank", f"{entry.dtype} {list(entry.shape)}", "torch.int32 [in / "
            f"{per_word}, out]")
    in_features, out_features = entry.shape[0] * per_word, entry.shape[1]
    require(in_features > 0 and out_features > 0, f"{prefix}.qweight", "shape",
            list(entry.shape), "non-empty")
    group, scales, qzeros = _common(files, prefix, s, out_features, in_features)
    zeros = unpack_int32(qzeros, bits, dim=1)  # [groups, out]
    if s["v1"]:
        zeros = (zeros + 1) & (2 ** bits - 1)
    order = None
    if f"{prefix}.g_idx" in files.where:
        g_entry = files.entry(f"{prefix}.g_idx")
        require(g_entry.shape == (in_features,) and not g_entry.dtype.is_floating_point,
                f"{prefix}.g_idx", "dtype and shape", f"{g_entry.dtype} {list(g_entry.shape)}",
                f"an integer [{in_features}]")
        order = input_order_from_g_idx(f"{prefix}.g_idx", files.read(f"{prefix}.g_idx"),
                                       in_features, group)
    if bits == 4 and order is None:
        codes = _read_int4_transposed(files, f"{prefix}.qweight", out_features)
    else:
        codes = unpack_int32(files.read(f"{prefix}.qweight"), bits, dim=0).t()  # [out, in]
    zero_rows = zeros.t().contiguous()
    return make_packed(prefix, bits, codes, scales.t(), zero_points=zero_rows,
                       input_order=order, bias=_bias(files, prefix, out_features),
                       packed=bits == 4 and order is None, signed=bits == 4 and order is None)


def _read_int4_transposed(files: SafetensorsFolder, name: str, out_features: int):
    """GPTQ's int4 words [in / 8, out] -> PackedWeight's codes [out, in / 2].

    A word's little-endian bytes hold its codes two per byte, the earlier input
    feature in the low nibble: PackedWeight's own order. So the bytes are
    transposed, never unpacked, a block of rows at a time straight into the
    result, made signed on the way (PackedWeight.signed): no whole-tensor
    temporary for the allocator to keep afterwards."""
    rows = files.entry(name).shape[0]
    codes = torch.empty((out_features, rows, 4), dtype=torch.uint8)
    block = torch.empty((max(1, min(rows, READ_BLOCK_BYTES // (4 * out_features))),
                         out_features), dtype=torch.int32)
    for start in range(0, rows, block.shape[0]):
        part = block[: min(block.shape[0], rows - start)]
        files.read_rows_into(name, start, part)
        part.view(torch.uint8).bitwise_xor_(SIGN_FLIP_INT4)
        codes[:, start:start + part.shape[0]] = (
            part.view(torch.uint8).reshape(part.shape[0], out_features, 4).transpose(0, 1))
    return codes.reshape(out_features, rows * 4)


def _awq_layer(files: SafetensorsFolder, prefix: str, s: dict):
    bits, per_word = s["bits"], 32 // s["bits"]
    entry = files.entry(f"{prefix}.qweight")
    require(entry.dtype == torch.int32 and len(entry.shape) == 2, f"{prefix}.qweight",
            "dtype and rank", f"{entry.dtype} {list(entry.shape)}",
            f"torch.int32 [in, out / {per_word}]")
    in_features, out_features = entry.shape[0], entry.shape[1] * per_word
    require(in_features > 0 and out_features > 0, f"{prefix}.qweight", "shape",
            list(entry.shape), "non-empty")
    _, scales, qzeros = _common(files, prefix, s, out_features, in_features)
    codes = unpack_int32(files.read(f"{prefix}.qweight"), bits, dim=1, order=AWQ_ORDER)
    zeros = unpack_int32(qzeros, bits, dim=1, order=AWQ_ORDER)  # [groups, out]
    return make_packed(prefix, bits, codes.t(), scales.t(), zero_points=zeros.t(),
                       bias=_bias(files, prefix, out_features))


def gemv_zeros_width(groups: int, group: int) -> int:
    """Words of zero points per output row in AutoAWQ's gemv layout."""
    multiple = 1 if group >= 128 else {64: 2, 32: 4}[group]
    words = -(-groups // 8)
    return -(-words // multiple) * multiple


def _awq_gemv_layer(files: SafetensorsFolder, prefix: str, s: dict):
    entry = files.entry(f"{prefix}.qweight")
    require(entry.dtype == torch.int32 and len(entry.shape) == 2 and min(entry.shape) > 0,
            f"{prefix}.qweight", "dtype and shape", f"{entry.dtype} {list(entry.shape)}",
            "torch.int32 [out, in / 8], non-empty (the gemv layout)")
    out_features, in_features = entry.shape[0], entry.shape[1] * 8
    group = s["group"]  # gemv has no per-channel form (checked in _settings)
    require(in_features % group == 0, prefix, "in_features", in_features,
            f"a multiple of group_size {group}")
    groups = in_features // group
    width = gemv_zeros_width(groups, group)
    scales_entry = files.entry(f"{prefix}.scales")
    require(scales_entry.dtype in SCALE_DTYPES, f"{prefix}.scales", "dtype", scales_entry.dtype,
            f"one of {list(SCALE_DTYPES)}")
    scales = _read_checked(files, f"{prefix}.scales", scales_entry.dtype,
                           (out_features, width * 8))[:, :groups]
    qzeros = _read_checked(files, f"{prefix}.qzeros", torch.int32, (out_features, width))
    zeros = unpack_int32(qzeros, 4, dim=1)[:, :groups]
    codes = unpack_int32(files.read(f"{prefix}.qweight"), 4, dim=1)
    return make_packed(prefix, 4, codes, scales, zero_points=zeros,
                       bias=_bias(files, prefix, out_features))
