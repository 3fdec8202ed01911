"""A published checkpoint's quantized Linear weight in one common form.

GPTQ, AWQ, compressed-tensors and GGUF store the same thing in different
layouts: unsigned integer codes per weight, and per group of input features
a scale and either an integer zero point or a float offset (a "minimum").
Their readers (checkpoints/) unpack the layout into `PackedWeight` and never
make a float copy; the int4/int8 lowering takes `PackedWeight` whatever
format it came from.

    W[n, k'] = (code[n, k'] - zero[n, g]) * scale[n, g] + offset[n, g]
    where g = k' // group_size and k' indexes the stored (permuted) columns:
    stored column k' is the model's input feature `input_order[k']`
    (None: the identity). zero is `zero_points` when given, else 0 when
    `offsets` are given (GGUF's minimum form: W = code * scale + offset),
    else the code midpoint 2**(bits - 1) (symmetric); offset is `offsets`
    when given, else 0.

Readers store the codes `signed`: the same bytes recoded as two's-complement
q = code - 2**(bits-1) (each nibble XOR 8; for 8 bits XOR 0x80), the form
TensorRT's symmetric GEMM reads, so the lowering stores them as they are and
never makes a recoded copy; `unpacked_codes()` reads the codes back.

`dequantize()` is the definition, in float32, and what tests compare each
format's own reference dequantization with (bit-exact).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..errors import QuantizationError

BITS = (4, 8)


@dataclass(frozen=True)
class PackedWeight:
    name: str  # the Linear's module path, e.g. "model.layers.0.mlp.up_proj"
    bits: int  # 4 or 8
    out_features: int
    in_features: int
    group_size: int  # input features per scale; == in_features for per-channel
    # uint8: for 4 bits [out, in / 2], two codes per byte, stored column 2j in the
    # low nibble and 2j+1 in the high (ONNX's order); for 8 bits [out, in].
    # Codes are unsigned: 0 .. 2**bits - 1.
    codes: torch.Tensor
    scales: torch.Tensor  # float16 / bfloat16 / float32 [out, in / group_size]
    zero_points: torch.Tensor | None = None  # uint8 [out, in / group_size], codes
    offsets: torch.Tensor | None = None  # float [out, in / group_size]
    input_order: torch.Tensor | None = None  # int64 [in], a permutation
    bias: torch.Tensor | None = None  # float [out]
    signed: bool = False  # codes held as q = code - 2**(bits-1) (two's complement)

    @property
    def groups(self) -> int:
        return self.in_features // self.group_size

    @property
    def stored_bytes(self) -> int:
        parts = (self.codes, self.scales, self.zero_points, self.offsets, self.input_order)
        return sum(t.numel() * t.element_size() for t in parts if t is not None)

    def check(self) -> None:
        """Refuses a weight whose parts disagree, naming the part, its value and the rule."""
        def refuse(field: str, got, want: str):
            raise QuantizationError(f"{self.name}: {field} is {got}; expected {want}")

        if self.bits not in BITS:
            refuse("bits", self.bits, f"one of {list(BITS)}")
        if self.group_size <= 0 or self.in_features % self.group_size:
            refuse("group_size", self.group_size,
                   f"a positive divisor of in_features {self.in_features}")
        per_byte = 8 // self.bits
        if self.in_features % per_byte:
            refuse("in_features", self.in_features, f"a multiple of {per_byte}")
        codes = (self.out_features, self.in_features // per_byte)
        if self.codes.dtype != torch.uint8 or tuple(self.codes.shape) != codes:
            refuse("codes", f"{self.codes.dtype} {list(self.codes.shape)}",
                   f"torch.uint8 {list(codes)}")
        grouped = (self.out_features, self.groups)
        if (not self.scales.is_floating_point()) or tuple(self.scales.shape) != grouped:
            refuse("scales", f"{self.scales.dtype} {list(self.scales.shape)}",
                   f"a float tensor {list(grouped)}")
        if self.zero_points is not None and (
                self.zero_points.dtype != torch.uint8
                or tuple(self.zero_points.shape) != grouped):
            refuse("zero_points", f"{self.zero_points.dtype} {list(self.zero_points.shape)}",
                   f"torch.uint8 {list(grouped)}")
        if self.zero_points is not None and int(self.zero_points.max()) >= 2 ** self.bits:
            refuse("zero_points", f"max {int(self.zero_points.max())}",
                   f"codes below {2 ** self.bits}")
        if self.offsets is not None and (
                not self.offsets.is_floating_point() or tuple(self.offsets.shape) != grouped):
            refuse("offsets", f"{self.offsets.dtype} {list(self.offsets.shape)}",
                   f"a float tensor {list(grouped)}")
        if self.input_order is not None:
            order = self.input_order
            if order.dtype != torch.int64 or tuple(order.shape) != (self.in_features,):
                refuse("input_order", f"{order.dtype} {list(order.shape)}",
                       f"torch.int64 [{self.in_features}]")
            if not torch.equal(torch.sort(order).values, torch.arange(self.in_features)):
                refuse("input_order", "not a permutation", f"each of 0..{self.in_features - 1} once")
        if self.bias is not None and tuple(self.bias.shape) != (self.out_features,):
            refuse("bias", list(self.bias.shape), f"[{self.out_features}]")

    @property
    def sign_flip(self) -> int:
        """The byte XOR between the unsigned codes and the signed ones."""
        return 0x88 if self.bits == 4 else 0x80

    def signed_codes(self) -> torch.Tensor:
        """The codes' bytes as signed q (4 bits: two per byte; 8 bits: as uint8
        bytes of int8): no copy when held signed."""
        return self.codes if self.signed else self.codes ^ self.sign_flip

    def with_signed_codes(self) -> PackedWeight:
        """This weight holding its codes signed (a new codes tensor)."""
        return self if self.signed else replace(self, codes=self.signed_codes(), signed=True)

    def unpacked_codes(self) -> torch.Tensor:
        """The codes as uint8 [out, in] in stored column order."""
        codes = self.codes ^ self.sign_flip if self.signed else self.codes
        if self.bits == 8:
            return codes
        low, high = codes & 0x0F, codes >> 4
        return torch.stack((low, high), dim=-1).reshape(self.out_features, self.in_features)

    def dequantize(self) -> torch.Tensor:
        """float32 [out, in] in the model's input order: the definition above."""
        codes = self.unpacked_codes().to(torch.float32)
        if self.zero_points is not None:
            zero = self.zero_points.to(torch.float32)
        else:
            midpoint = 0 if self.offsets is not None else 2 ** (self.bits - 1)
            zero = torch.full_like(self.scales, midpoint, dtype=torch.float32)
        per_column = lambda t: t.to(torch.float32).repeat_interleave(self.group_size, dim=1)
        weight = (codes - per_column(zero)) * per_column(self.scales)
        if self.offsets is not None:
            weight = weight + per_column(self.offsets)
        if self.input_order is None:
            return weight
        restored = torch.empty_like(weight)
        restored[:, self.input_order] = weight
        return restored
