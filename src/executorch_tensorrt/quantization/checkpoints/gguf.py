"""GGUF checkpoints (llama.cpp) -> PackedWeight per Linear, float tensors, a transformers config.

Imported as they are (block = one group of PackedWeight):
    Q4_0  32 codes, f16 d:            W = (q - 8) * d
    Q4_1  32 codes, f16 d, f16 m:     W = q * d + m          (offsets form)
    Q8_0  32 int8, f16 d:             W = q * d              (codes q + 128)
    Q4_K  256 = 8 x 32 codes, f16 d, dmin, 6-bit sc[8], m[8]:
                                      W = q * (d * sc) - dmin * m
Q5_K and Q6_K have no TensorRT kind: `unsupported="requantize"` re-quantizes
them to int8 per output channel (TensorRT's int8 weight-only kind) and records
the worst weight error; the default, "refuse", names the tensor and its kind.
Quantized tensors that are not Linear weights (a quantized token embedding)
are dequantized to float32 with gguf's own reference.
"""
from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Kind
from gguf import quants

from .common import Checkpoint, make_packed, require
from .gguf_arch import (DERIVED, LINEARS, architecture, expected_shape, map_name,
                        transformers_config, unpermute_rows)
from .gguf_file import GGUFFile

IMPORTED = (Kind.Q4_0, Kind.Q4_1, Kind.Q8_0, Kind.Q4_K)
FLOATS = {Kind.F32: np.float32, Kind.F16: np.float16, Kind.BF16: np.uint16}
REQUANTIZABLE = (Kind.Q5_K, Kind.Q6_K)
UNSUPPORTED = ("refuse", "requantize")


def read_gguf(path: str | os.PathLike, unsupported: str = "refuse") -> Checkpoint:
    require(unsupported in UNSUPPORTED, "read_gguf", "unsupported", repr(unsupported),
            f"one of {list(UNSUPPORTED)}")
    f = GGUFFile(path)
    try:
        return _read(f, unsupported)
    finally:
        f.close()


def _read(f: GGUFFile, unsupported: str) -> Checkpoint:
    source = str(f.path)
    arch = architecture(f.metadata, source)
    require("token_embd.weight" in f.tensors, source, "tensor 'token_embd.weight'", "missing",
            "present (the token embedding)")
    embd = f.tensors["token_embd.weight"]
    require(len(embd.dims) == 2, source, "token_embd.weight's dims", list(embd.dims),
            "[hidden, vocab]")
    config = transformers_config(f.metadata, arch, embd.dims[1],
                                 "output.weight" not in f.tensors, source)
    require(config["head_dim"] % 2 == 0, source, "the head dimension", config["head_dim"],
            "even (rotary embeddings pair features)")
    result = Checkpoint(format="gguf", config=config)
    biases = {}
    for name, info in f.tensors.items():
        if name in DERIVED:
            result.notes.append(f"{name}: not loaded (transformers derives it from the config)")
            continue
        mapped = map_name(name, arch, config["num_hidden_layers"], source)
        want = expected_shape(mapped, config)
        require(info.shape == want, name, "shape", list(info.shape), f"{list(want)} for "
                f"{mapped.key} (from the metadata's sizes)", "the metadata does not match the "
                "tensors: the file is damaged or was converted wrongly")
        rows = unpermute_rows(mapped.role, config, info.shape[0], name) if (
            arch.permuted_qk) else None
        if mapped.is_linear_weight and info.kind not in FLOATS:
            require(len(info.dims) == 2, name, "dims", list(info.dims), "[in, out]")
            packed = _linear(f, name, mapped.module, info, unsupported, result)
            result.packed[mapped.module] = packed if rows is None else _rows(packed, rows)
            continue
        tensor = _float_tensor(f, name, info, result)
        if arch.norm_shift and mapped.role.endswith("norm"):
            tensor = tensor - arch.norm_shift  # transformers' Gemma norms add the one back
        if rows is not None:
            tensor = tensor[rows].contiguous()
        if name.endswith(".bias") and mapped.role in LINEARS:
            biases[mapped.module] = tensor
        result.tensors[mapped.key] = tensor
    for module, bias in biases.items():  # a packed Linear holds its own bias
        if module in result.packed:
            packed = result.packed[module]
            require(tuple(bias.shape) == (packed.out_features,), f"{module}.bias", "shape",
                    list(bias.shape), f"[{packed.out_features}]")
            result.packed[module] = replace(packed, bias=bias)
            del result.tensors[f"{module}.bias"]
    return result


def _rows(p, rows: torch.Tensor):
    require(p.out_features == rows.numel(), p.name, "out_features", p.out_features,
            f"{rows.numel()} (heads x head_dim from the metadata)")
    pick = lambda t: None if t is None else t[rows].contiguous()
    return replace(p, codes=pick(p.codes), scales=pick(p.scales), zero_points=pick(p.zero_points),
                   offsets=pick(p.offsets), bias=pick(p.bias))


def _float_tensor(f: GGUFFile, name: str, info, result: Checkpoint) -> torch.Tensor:
    raw = f.read_tensor_bytes(name)
    if info.kind in FLOATS:
        values = torch.from_numpy(raw.view(FLOATS[info.kind]).copy())
        if info.kind == Kind.BF16:
            values = values.view(torch.bfloat16)
        return values.reshape(info.shape)
    try:
        values = quants.dequantize(raw, info.kind)
    except NotImplementedError:
        require(False, name, "type", info.kind.name, "one gguf can dequantize")
    result.notes.append(f"{name}: {info.kind.name} dequantized to float32 (not a Linear weight)")
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).reshape(info.shape)


def _linear(f: GGUFFile, name: str, module: str, info, unsupported: str, result: Checkpoint):
    if info.kind in IMPORTED:
        blocks = f.read_tensor_bytes(name)
        return IMPORTERS[info.kind](module, blocks.reshape(blocks.shape[0], -1,
                                                           GGML_QUANT_SIZES[info.kind][1]))
    remedy = ("pass unsupported='requantize' to re-quantize it to int8 per output channel "
              "(the worst weight error is reported), or convert the model with llama.cpp to "
              "Q4_0, Q4_1, Q4_K or Q8_0" if info.kind in REQUANTIZABLE else
              "convert the model with llama.cpp to Q4_0, Q4_1, Q4_K or Q8_0")
    require(info.kind in REQUANTIZABLE and unsupported == "requantize", name, "type",
            info.kind.name, "one of Q4_0, Q4_1, Q4_K, Q8_0 (kinds TensorRT's int4/int8 "
            "weight-only GEMMs run as they are)", remedy)
    weight = torch.from_numpy(np.ascontiguousarray(quants.dequantize(
        f.read_tensor_bytes(name), info.kind), dtype=np.float32)).reshape(info.shape)
    packed = requantize_int8(module, weight)
    error = float((packed.dequantize() - weight).abs().max())
    largest = float(weight.abs().max())
    result.requantized[module] = error
    result.notes.append(f"{name}: {info.kind.name} re-quantized to int8 per output channel; "
                        f"worst weight error {error:.3g} ({error / max(largest, 1e-30):.3%} of "
                        "the largest weight)")
    return packed


def requantize_int8(module: str, weight: torch.Tensor):
    """Symmetric int8 per output channel (codes q + 128, scale max|w| / 127)."""
    largest = weight.abs().amax(dim=1, keepdim=True)
    scale = torch.where(largest > 0, largest / 127, torch.ones_like(largest))
    q = torch.round(weight / scale).clamp(-127, 127)
    return make_packed(module, 8, (q + 128).to(torch.uint8), scale)


def _f16(blocks: np.ndarray, at: int) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(blocks[..., at:at + 2]).view(np.float16)[..., 0])


def _nibbles(qs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return qs & 0x0F, qs >> 4


def _q4_0(module: str, blocks: np.ndarray):
    low, high = _nibbles(blocks[..., 2:])  # low: elements 0..15, high: 16..31
    codes = np.concatenate([low, high], axis=-1).reshape(blocks.shape[0], -1)
    return make_packed(module, 4, torch.from_numpy(codes), _f16(blocks, 0))


def _q4_1(module: str, blocks: np.ndarray):
    low, high = _nibbles(blocks[..., 4:])
    codes = np.concatenate([low, high], axis=-1).reshape(blocks.shape[0], -1)
    return make_packed(module, 4, torch.from_numpy(codes), _f16(blocks, 0),
                       offsets=_f16(blocks, 2))


def _q8_0(module: str, blocks: np.ndarray):
    codes = (blocks[..., 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
    return make_packed(module, 8, torch.from_numpy(codes.reshape(blocks.shape[0], -1)),
                       _f16(blocks, 0))


def _q4_k(module: str, blocks: np.ndarray):
    rows, supers = blocks.shape[:2]
    d = _f16(blocks, 0).to(torch.float32).unsqueeze(-1)
    dmin = _f16(blocks, 2).to(torch.float32).unsqueeze(-1)
    packed = blocks[..., 4:16].astype(np.uint8)  # 8 six-bit scales and mins in 12 bytes
    a, b, c = packed[..., 0:4], packed[..., 4:8], packed[..., 8:12]
    sc = np.concatenate([a & 0x3F, (c & 0x0F) | ((a >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([b & 0x3F, (c >> 4) | ((b >> 2) & 0x30)], axis=-1)
    scales = (d * torch.from_numpy(sc).to(torch.float32)).reshape(rows, supers * 8)
    offsets = -(dmin * torch.from_numpy(mn).to(torch.float32)).reshape(rows, supers * 8)
    low, high = _nibbles(blocks[..., 16:].reshape(rows, supers, 4, 32))  # 64 per 32 bytes
    codes = np.stack([low, high], axis=3).reshape(rows, -1)
    return make_packed(module, 4, torch.from_numpy(codes), scales, offsets=offsets)


IMPORTERS = {Kind.Q4_0: _q4_0, Kind.Q4_1: _q4_1, Kind.Q8_0: _q8_0, Kind.Q4_K: _q4_k}
