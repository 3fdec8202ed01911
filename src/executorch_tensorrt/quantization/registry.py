"""The registry of quantization formats: each format's schemes, where they run,
how its weights are stored, and (loaded on first use) its steps.

Everything outside a format asks this table: quantize() for the module forms,
the ONNX export for translations and the rewrite after export, export for the
capability rules, the CLI for the scheme names. The table is plain data and
imports no torch, so `--help` stays fast; a format's steps (its module in
`formats/`, which imports torch) load when first asked for.

Capability rules follow TensorRT's and TensorRT-RTX 1.7's documented support:
INT8 and INT4 weight-only GEMMs on both flavours, INT8 activations (W8A8) on
standard TensorRT only, FP8 from compute capability 8.9, FP4 from 12.0.
`refusal(scheme, flavor, capabilities)` gives the reason a scheme cannot run
there (None when it can). Schemes with `implemented=False` have no quantize()
path here; the table lists them so that the reason a user gets is TensorRT's.

Adding a format: write `formats/<name>.py` (the `FormatSteps` names), add a
`QuantFormat` to FORMATS below naming that module, and test it
(docs/architecture.md, "Adding a quantization format"). The table names each
format's module by its dotted path and never imports one by name, so the
importers and export reach a format only through its steps.

What a quantization did to a model (`QuantizationPlan`) is here too: the
formats' and importers' results, read by export, beside the table it refers to.
"""
from __future__ import annotations

import copy
import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Protocol

from ..errors import QuantizationError

if TYPE_CHECKING:  # for the type checker only: the table itself stays torch-free
    import onnx_ir
    import torch


@dataclass(frozen=True)
class Scheme:
    """One quantization scheme and the TensorRT flavours and targets that run it."""
    name: str
    description: str
    flavors: tuple[str, ...] = ("tensorrt", "tensorrt_rtx")
    min_capability: int | None = None  # e.g. 89 for SM89
    why_not_rtx: str = ""
    implemented: bool = True  # quantize() has a path for it
    activations: bool = False  # quantizes activations: PT2E, calibrated


class FormatSteps(Protocol):
    """What a format module (formats/<name>.py) provides; None where it has none.
    A format may offer more to the importers that take it (the affine format's
    from_packed / from_signed / describe), still reached through steps_of."""
    TRANSLATIONS: Mapping[Any, Any]  # its torch ops -> ONNX translations
    # Rewrites its placeholders in an exported ONNX model, in place.
    lower_onnx: Optional[Callable[[onnx_ir.Model], None]]
    # (Linear, layer name, group size) -> (its quantized module, the report's line)
    quantize_linear: Optional[Callable[[torch.nn.Linear, str, int],
                                       tuple[torch.nn.Module, str]]]
    quantize_embedding: Optional[Callable[[torch.nn.Embedding, str, int],
                                          tuple[torch.nn.Module, str]]]
    check_options: Optional[Callable[[int], None]]  # quantize()'s group size, before any layer
    # What the importers (importers/) build this format's layers from:
    linear_module: Optional[type[torch.nn.Module]]  # its quantized Linear's module class
    # The op dequantizing its stored weight (also the FX target the Q/DQ checks match).
    dequantize_weight: Optional[torch._ops.OpOverload]
    # Its own activation Q/DQ ops where standard ONNX has none (fp8).
    quantize_activation: Optional[torch._ops.OpOverload]
    dequantize_activation: Optional[torch._ops.OpOverload]
    element_dtype: Optional[torch.dtype]  # its stored values' torch dtype, if torch has one
    max_value: Optional[float]  # the largest stored magnitude, where scales are amax / it
    group_sizes: tuple[int, ...]  # the groups of input features it takes; () if not grouped
    # (layer, in_features, group size): refuses a layer the groups cannot split.
    check_group_size: Optional[Callable[[str, int, int], None]]
    # (weight, group size, layer) -> (stored weight, scales), for a grouped format.
    quantize_weight: Optional[Callable[[torch.Tensor, int, str],
                                        tuple[torch.Tensor, torch.Tensor]]]


@dataclass(frozen=True)
class QuantFormat:
    """One quantization format: its schemes, its stored weight dtype, and its steps."""
    name: str
    schemes: tuple[Scheme, ...]
    # The blob's dtype name of its stored weights (blob/format.py's WEIGHT_DTYPES).
    weight_dtype: str
    # Its quantized layers can run float over their dequantized weights (the
    # same values) where the targets cannot run it, when allowed.
    runs_float: bool = False
    # onnxruntime has no kernel for its weight dtype, so the fallback decodes
    # those weights (runtime/onnxruntime/, which cannot import this table).
    fallback_decodes: bool = False
    # Its steps: a module's dotted path (relative to this package, or absolute),
    # imported on first use (torch, onnx) ...
    module: str | None = None
    # ... or a loader, for a format built elsewhere (tests).
    load: Callable[[], FormatSteps] | None = None

    def steps(self) -> FormatSteps:
        if self.module is not None:
            return importlib.import_module(self.module, __package__)
        if self.load is None:
            raise QuantizationError(f"quantization format {self.name!r} has no steps to load")
        return self.load()


def steps_of(name: str) -> FormatSteps:
    """The steps of the format called `name` (its module, loaded on first use)."""
    return FORMATS[name].steps()


# In this order the ONNX export rewrites their placeholders.
FORMATS: dict[str, QuantFormat] = {f.name: f for f in (
    QuantFormat("int8", (
        Scheme("int8_weight_only", "symmetric int8 weights per output channel, float "
                                   "activations"),
        Scheme("int8_w8a8", "symmetric int8 weights and activations", flavors=("tensorrt",),
               why_not_rtx="TensorRT-RTX has no INT8 activation quantization (INT8 is "
                           "weight-only there); use int8_weight_only, or standard TensorRT",
               activations=True),
    ), weight_dtype="int8", module=".formats.int8"),
    QuantFormat("int4", (
        Scheme("int4_weight_only", "symmetric int4 weights per group of input features, "
                                   "packed two per byte, float activations"),
    ), weight_dtype="int4", module=".formats.int4"),
    # Zero points and float offsets (checkpoints, asymmetric torchao / PT2E):
    # TensorRT's symmetric GEMM plus a float correction (formats/affine.py).
    QuantFormat("affine", (
        Scheme("int4_affine_weight_only", "int4 codes with a zero point or float offset per "
                                          "group of input features (GPTQ, AWQ, GGUF, asymmetric "
                                          "torchao / PT2E), float activations", implemented=False),
        Scheme("int8_affine_weight_only", "int8 codes with a zero point or float offset per "
                                          "output channel or group, float activations",
               implemented=False),
    ), weight_dtype="int4", module=".formats.affine"),
    QuantFormat("fp8", (
        Scheme("fp8_weight_only", "FP8 (e4m3) weights per tensor or per output channel, float "
                                  "activations", min_capability=89, implemented=False),
        Scheme("fp8_w8a8", "FP8 (e4m3) weights and activations, per tensor", min_capability=89,
               activations=True),
    ), weight_dtype="float8", module=".formats.fp8"),
    QuantFormat("fp4", (
        Scheme("fp4_weight_only", "NVFP4 weights (E2M1 packed two per byte, an FP8 E4M3 scale "
                                  "per 16 input features, a float32 scale per tensor), float "
                                  "activations", min_capability=120),
        Scheme("fp4_w4a4", "NVFP4 weights and activations, block scales", min_capability=120,
               implemented=False),
    ), weight_dtype="float4_e2m1", runs_float=True, fallback_decodes=True, module=".formats.fp4"),
)}


def register(fmt: QuantFormat) -> None:
    """Adds a format (tests, or a format kept outside this package); its
    schemes must be new."""
    taken = {s for s in SCHEMES} & {s.name for s in fmt.schemes}
    if fmt.name in FORMATS or taken:
        raise QuantizationError(f"quantization format {fmt.name!r} or its schemes "
                                f"{sorted(taken)} are registered already")
    FORMATS[fmt.name] = fmt
    SCHEMES.update({s.name: s for s in fmt.schemes})
    _FORMAT_OF.update({s.name: fmt for s in fmt.schemes})


def unregister(name: str) -> None:
    fmt = FORMATS.pop(name)
    for s in fmt.schemes:
        SCHEMES.pop(s.name, None)
        _FORMAT_OF.pop(s.name, None)


SCHEMES: dict[str, Scheme] = {s.name: s for f in FORMATS.values() for s in f.schemes}
_FORMAT_OF: dict[str, QuantFormat] = {s.name: f for f in FORMATS.values() for s in f.schemes}


def implemented() -> frozenset[str]:
    """The schemes quantize() runs."""
    return frozenset(name for name, s in SCHEMES.items() if s.implemented)


def format_of(scheme: str) -> QuantFormat:
    return _FORMAT_OF[scheme_named(scheme).name]


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
                                f"{sorted(SCHEMES)} (implemented: {sorted(implemented())})")
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


_PLAN_ATTR = "_etrt_quantization_plan"


@dataclass(frozen=True)
class QuantizationPlan:
    """What a quantization did to a model (quantize(), the importers), recorded
    on the model it returns: the scheme and, per layer (by qualified name), how
    it runs ("int4 weight-only, group 64") or why it was left float. Export
    reads it to check the scheme against the TensorRT flavour and targets and
    to write the partition report's lines."""
    scheme: str
    layers: dict[str, str] = field(default_factory=dict)
    unquantized: dict[str, str] = field(default_factory=dict)  # layer -> why float
    # The quantized layers can run float over their dequantized weights (the
    # same values) where the targets cannot run the scheme, when allowed.
    runs_float: bool = False


def quantization_plan(model: torch.nn.Module) -> QuantizationPlan | None:
    return getattr(model, _PLAN_ATTR, None)


READ_ONLY_ATTR = "_etrt_read_only"


def mark_read_only(tensor: torch.Tensor | None) -> torch.Tensor | None:
    """Marks a buffer that no forward writes (a quantized weight's codes, scales):
    a strict torch.export may then keep it by reference instead of cloning it
    (llm/hf_export.py), as it does parameters."""
    if tensor is not None:
        setattr(tensor, READ_ONLY_ATTR, True)
    return tensor


def is_read_only(tensor) -> bool:
    return bool(getattr(tensor, READ_ONLY_ATTR, False))


def shared_copy(model: torch.nn.Module, also=()) -> torch.nn.Module:
    """A structural copy whose tensors are the model's own (no weight copied),
    as are the objects in `also` (e.g. weights a module holds as attributes)."""
    shared = {id(t): t for t in [*model.parameters(), *model.buffers(), *also]}
    return copy.deepcopy(model, memo=shared)


def with_plan(model: torch.nn.Module, plan: QuantizationPlan) -> torch.nn.Module:
    object.__setattr__(model, _PLAN_ATTR, plan)
    return model
