"""Which quantization schemes which TensorRT flavour and target GPUs can run.

One table (SCHEMES) from TensorRT's and TensorRT-RTX 1.7's documented support:
INT8 and INT4 weight-only GEMMs on both flavours, INT8 activations (W8A8) on
standard TensorRT only, FP8 from compute capability 8.9, FP4 from 12.0.
`refusal(scheme, flavor, capabilities)` gives the reason a scheme cannot run
there (None when it can); export refuses with it unless the user allows the
layers to run unquantized (then the partition report says why per layer).
Only the schemes in IMPLEMENTED have a real path in this package; the table
covers the rest so that the reason a user gets is TensorRT's, not ours.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import QuantizationError


@dataclass(frozen=True)
class Scheme:
    name: str
    description: str
    flavors: tuple[str, ...] = ("tensorrt", "tensorrt_rtx")
    min_capability: int | None = None  # e.g. 89 for SM89
    why_not_rtx: str = ""


SCHEMES: dict[str, Scheme] = {s.name: s for s in (
    Scheme("int8_weight_only", "symmetric int8 weights per output channel, float activations"),
    Scheme("int4_weight_only", "symmetric int4 weights per group of input features, packed two "
                               "per byte, float activations"),
    Scheme("fp8_weight_only", "FP8 (e4m3) weights per tensor or per output channel, float "
                              "activations", min_capability=89),
    Scheme("int8_w8a8", "symmetric int8 weights and activations", flavors=("tensorrt",),
           why_not_rtx="TensorRT-RTX has no INT8 activation quantization (INT8 is weight-only "
                       "there); use int8_weight_only, or standard TensorRT"),
    Scheme("fp8_w8a8", "FP8 (e4m3) weights and activations, per tensor", min_capability=89),
    Scheme("fp4_weight_only", "NVFP4 weights (E2M1 packed two per byte, an FP8 E4M3 scale per "
                              "16 input features, a float32 scale per tensor), float "
                              "activations", min_capability=120),
    Scheme("fp4_w4a4", "NVFP4 weights and activations, block scales", min_capability=120),
)}
IMPLEMENTED = frozenset({"int8_weight_only", "int4_weight_only", "fp4_weight_only", "int8_w8a8",
                         "fp8_w8a8"})
# Asked for by users, never runnable by TensorRT: say so, not "unknown".
_NOT_IN_TENSORRT = {
    "uint4": "TensorRT's quantized types are signed and symmetric (zero point 0): there is no "
             "uint4; use int4_weight_only",
    "int2": "TensorRT has no 2-bit integer type; use int4_weight_only",
}
# TensorRT-RTX 1.7's default targets (no compute_capabilities given).
RTX_DEFAULT_CAPABILITIES = ("SM75", "SM80", "SM86", "SM89", "SM120", "SM121")


def scheme_named(name: str) -> Scheme:
    """The scheme called `name`; QuantizationError for anything else."""
    if not isinstance(name, str):
        raise QuantizationError(f"scheme must be a string, got {type(name).__name__}")
    key = name.strip().lower()
    for word, why in _NOT_IN_TENSORRT.items():
        if key == word or key.startswith(word + "_"):
            raise QuantizationError(f"scheme {name!r} cannot run on TensorRT: {why}")
    if key not in SCHEMES:
        raise QuantizationError(f"unknown quantization scheme {name!r}; the schemes are "
                                f"{sorted(SCHEMES)} (implemented: {sorted(IMPLEMENTED)})")
    return SCHEMES[key]


def _sm(capability: str) -> int:
    return int(capability.upper().removeprefix("SM"))


def refusal(scheme: str, flavor: str, capabilities: tuple[str, ...] | None) -> str | None:
    """Why `scheme` cannot run with this TensorRT flavour on these targets, or None.
    `capabilities` None: TensorRT-RTX's default list (every supported GPU);
    for standard TensorRT, the GPU at build time, unknown here (not checked)."""
    s = scheme_named(scheme)
    if flavor not in s.flavors:
        return f"{s.name} on {flavor}: {s.why_not_rtx or 'not supported by this flavour'}"
    if s.min_capability is None:
        return None
    targets = capabilities or (RTX_DEFAULT_CAPABILITIES if flavor == "tensorrt_rtx" else ())
    low = [c for c in targets if _sm(c) < s.min_capability]
    if low:
        return (f"{s.name} needs compute capability SM{s.min_capability} or newer, but the "
                f"engine targets {', '.join(low)}; pass compute_capabilities with only "
                f"SM{s.min_capability}+ targets")
    return None
