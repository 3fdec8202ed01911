"""What the checkpoint readers share: the result type, int32 unpacking, GPTQ's
group index as an input order, and the one constructor of a checked PackedWeight."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import torch

from ...errors import CheckpointError, QuantizationError
from ..packed_weight import PackedWeight
from ..placeholders import pack_int4


@dataclass
class Checkpoint:
    """A checkpoint read into memory: quantized Linears as PackedWeight (no float
    copy), the float tensors by their transformers names, and the config."""
    format: str  # "gptq", "awq", "compressed-tensors", "gguf"
    config: dict  # a transformers config (config.json's content)
    packed: dict[str, PackedWeight] = field(default_factory=dict)  # by Linear module path
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # float, by state-dict key
    notes: list[str] = field(default_factory=list)  # what was dequantized or re-quantized
    requantized: dict[str, float] = field(default_factory=dict)  # Linear -> worst weight error

    @property
    def stored_bytes(self) -> int:
        return (sum(p.stored_bytes for p in self.packed.values())
                + sum(t.numel() * t.element_size() for t in self.tensors.values()))


def open_checked(path: Path, kind: str) -> tuple[BinaryIO, int]:
    """(the opened file, its size); CheckpointError naming `path` when it cannot be opened."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be opened ({e.strerror}); give the path of a "
                              f"readable {kind} file") from e
    return f, os.fstat(f.fileno()).st_size


def require(ok: bool, where: str, field_name: str, got, want: str, remedy: str = "") -> None:
    """Refuses (CheckpointError) unless `ok`, naming the tensor or file, the field, the
    value found, the rule, and what to do."""
    if not ok:
        tail = f"; {remedy}" if remedy else ""
        raise CheckpointError(f"{where}: {field_name} is {got}; expected {want}{tail}")


def expect_tensor(where: str, t: torch.Tensor, dtype: torch.dtype, shape: tuple) -> None:
    require(t.dtype == dtype and tuple(t.shape) == tuple(shape), where, "dtype and shape",
            f"{t.dtype} {list(t.shape)}", f"{dtype} {list(shape)} (from the config's bits, "
            "group size and the layer's features)", "the checkpoint does not match its config")


def unpack_int32(words: torch.Tensor, bits: int, dim: int, order=None) -> torch.Tensor:
    """int32 words holding 32 / bits codes each, the code at shift `bits * t` being
    element `t` (or `order[t]`) of its run along `dim` -> uint8 codes, that dim
    32 / bits times longer."""
    per_word = 32 // bits
    shifts = torch.arange(0, 32, bits, dtype=torch.int32)
    codes = ((words.unsqueeze(-1) >> shifts) & (2 ** bits - 1)).to(torch.uint8)
    if order is not None:  # nibble t holds element order[t]: put it back in place
        codes = codes[..., torch.argsort(torch.tensor(order))]
    rows, cols = words.shape
    if dim == 1:
        return codes.reshape(rows, cols * per_word)
    return codes.permute(0, 2, 1).reshape(rows * per_word, cols)


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 codes [out, in] -> PackedWeight's codes (4 bits: two per byte, ONNX order)."""
    return pack_int4(codes).contiguous() if bits == 4 else codes.contiguous()


def input_order_from_g_idx(where: str, g_idx: torch.Tensor, in_features: int,
                           group_size: int) -> torch.Tensor | None:
    """GPTQ's act-order g_idx (input feature -> its group) as PackedWeight's
    input_order (stored column -> feature), grouping columns by group; None
    when g_idx is the plain k // group_size."""
    groups = in_features // group_size
    require(g_idx.dim() == 1 and g_idx.shape[0] == in_features, where, "g_idx's shape",
            list(g_idx.shape), f"[{in_features}] (one group per input feature)")
    require(not g_idx.is_floating_point(), where, "g_idx's dtype", g_idx.dtype, "an integer type")
    g_idx = g_idx.to(torch.int64)
    if bool(torch.equal(g_idx, torch.arange(in_features) // group_size)):
        return None
    require(int(g_idx.min()) >= 0 and int(g_idx.max()) < groups, where, "g_idx's range",
            f"{int(g_idx.min())}..{int(g_idx.max())}", f"0..{groups - 1} (the groups)")
    counts = torch.bincount(g_idx, minlength=groups)
    require(bool((counts == group_size).all()), where, "g_idx's group sizes",
            f"{int(counts.min())}..{int(counts.max())} features per group",
            f"{group_size} each (act-order permutes whole groups)",
            "a g_idx with uneven groups cannot be expressed as one permutation")
    return torch.argsort(g_idx, stable=True)


def make_packed(name: str, bits: int, codes: torch.Tensor, scales: torch.Tensor, *,
                zero_points=None, offsets=None, input_order=None, bias=None,
                packed: bool = False, signed: bool = False) -> PackedWeight:
    """A checked PackedWeight from uint8 codes [out, in] in stored column order,
    scales [out, groups] and optional zero points (uint8 [out, groups]). Zero points
    that all equal the code midpoint are dropped: the same weight, symmetric.
    `packed`: 4-bit codes given already packed [out, in / 2] (no input order). The
    codes are held signed (PackedWeight.signed): the lowering stores them as they are;
    `signed`: the packed codes given are already (no second copy made here)."""
    out_features, in_features = codes.shape
    if packed:  # already two 4-bit codes per byte, PackedWeight's layout (no input order)
        in_features *= 2
    groups = scales.shape[1]
    require(groups > 0 and in_features % groups == 0, name, "the scales' groups", groups,
            f"a divisor of in_features {in_features}")
    if input_order is not None:
        codes = codes[:, input_order]
    if zero_points is not None and bool((zero_points == 2 ** (bits - 1)).all()):
        zero_points = None
    weight = PackedWeight(name=name, bits=bits, out_features=out_features,
                          in_features=in_features, group_size=in_features // groups,
                          codes=codes.contiguous() if packed else pack_codes(codes, bits),
                          scales=scales.contiguous(),
                          zero_points=None if zero_points is None else zero_points.contiguous(),
                          offsets=None if offsets is None else offsets.contiguous(),
                          input_order=input_order, bias=bias,
                          signed=signed and packed).with_signed_codes()
    try:
        weight.check()
    except CheckpointError:
        raise
    except QuantizationError as e:
        raise CheckpointError(f"{e}; the checkpoint does not match its config") from None
    require(bool(torch.isfinite(weight.scales).all()), name, "scales", "not all finite",
            "finite numbers", "the checkpoint is damaged")
    if offsets is not None:
        require(bool(torch.isfinite(weight.offsets).all()), name, "offsets", "not all finite",
                "finite numbers", "the checkpoint is damaged")
    return weight
