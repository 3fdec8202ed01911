"""The two entry points. `quantize(model, ...)`: one call from a float model
to one TensorRT can run quantized, ready for `executorch_tensorrt.export`; and
`prepare_for_export`, what export does with any quantized model before
torch.export.

Weight-only schemes replace every `torch.nn.Linear` of the model, in a
structural copy that shares the model's other tensors, by the module form of
the scheme's format (registry.py; formats/): "int8_weight_only" a
per-output-channel symmetric int8 weight, "int4_weight_only" a per-group
symmetric int4 weight packed two per byte, "fp4_weight_only" NVFP4 weights
(SM120+). The returned model is the eager quantized reference (it dequantizes
in torch), and records which layers it quantized (`quantization_plan`), which
export checks against the TensorRT flavour and writes into the partition
report (registry.refusal).

The activation schemes ("int8_w8a8", "fp8_w8a8") run our PT2E quantizer
(importers/pt2e.quantize_pt2e: prepare_pt2e, calibration, convert_pt2e) and
return the converted graph module, which export checks per layer
(importers/qdq_graph.lower_qdq).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import QuantizationError
from .importers.modelopt import has_modelopt_quantizers, lower_modelopt
from .importers.packed import has_packed_linears, lower_packed
from .importers.pt2e import quantize_pt2e
from .importers.qdq_graph import is_qdq_graph, lower_qdq
from .importers.torchao import has_torchao_weights, lower_torchao
from .registry import (FORMATS, QuantizationPlan, Scheme, format_of, implemented,
                       quantization_plan, refusal, scheme_named, shared_copy, with_plan)

# Every format's etrt_quant ops are defined once this module is imported (as
# `import executorch_tensorrt.quantization` did before the registry was lazy):
# export and saved programs that hold those ops rely on it.
for _fmt in FORMATS.values():
    _fmt.steps()


def check_plan(plan: QuantizationPlan, flavor: str, capabilities: tuple[str, ...] | None,
               allow_unquantized: bool) -> dict[str, str]:
    """At export: refuses a scheme this TensorRT flavour or these targets cannot
    run (unless allowed to run unquantized); returns the report's lines,
    layer -> how it runs or "not quantized: <why>"."""
    why = refusal(plan.scheme, flavor, capabilities)
    if why is not None and plan.layers and plan.runs_float and not allow_unquantized:
        # float_where_refused runs them float when allowed; here it was not.
        raise QuantizationError(
            f"{why}; or pass allow_unquantized=True (CLI: --allow-unquantized) to export "
            f"layers {sorted(plan.layers)[:3]} float over their dequantized weights. Nothing "
            "was exported")
    if why is not None and plan.layers:
        # The weights are already quantized: running them float is not ours to
        # choose, so allow_unquantized does not apply (the remedy is in `why`).
        raise QuantizationError(
            f"{why}; or quantize the float model with a scheme these targets run. Nothing was "
            f"exported (layers {sorted(plan.layers)[:3]} are already quantized, so "
            "allow_unquantized cannot run them float)")
    lines = dict(plan.layers)
    for layer, reason in plan.unquantized.items():
        reason = f"{why}; {reason}" if why else reason
        if not allow_unquantized:
            raise QuantizationError(f"layer {layer!r}: {reason}; pass allow_unquantized=True "
                                    "(CLI: --allow-unquantized) to export it unquantized")
        lines[layer] = f"not quantized: {reason}"
    return lines


def float_where_refused(model: torch.nn.Module, flavor: str,
                        capabilities: tuple[str, ...] | None,
                        allow_unquantized: bool) -> torch.nn.Module:
    """At export, before check_plan: a model whose scheme these targets cannot
    run but whose layers can run float (plan.runs_float: fp4), allowed to run
    unquantized, becomes a copy with each such layer a float Linear over its
    dequantized weight (the values the eager model computes); its plan lists
    them as unquantized. Any other model is returned as it is."""
    plan = quantization_plan(model)
    if plan is None or not plan.runs_float or not plan.layers or not allow_unquantized:
        return model
    if refusal(plan.scheme, flavor, capabilities) is None:
        return model
    result = shared_copy(model)
    layers = dict(plan.layers)
    for name, module in list(result.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if full in layers and hasattr(child, "as_float_linear"):
                setattr(module, child_name, child.as_float_linear())
                del layers[full]
    unquantized = {**plan.unquantized,
                   **{n: "its weights run dequantized to float32" for n in plan.layers
                      if n not in layers}}
    return with_plan(result, QuantizationPlan(plan.scheme, layers, unquantized))


def _linears(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, str, torch.nn.Linear]]:
    found = []
    for name, module in model.named_modules():
        for child_name, child in module.named_children():
            if isinstance(child, torch.nn.Linear):
                found.append((module, child_name, f"{name}.{child_name}" if name else child_name,
                              child))
    return found


def quantize(model: torch.nn.Module, example_inputs=None, scheme: str = "int8_weight_only",
             group_size: int = 128, calibration=None, *,
             allow_unquantized: bool = False) -> torch.nn.Module:
    """A copy of `model` with its Linear weights quantized by `scheme`.

    "int8_w8a8" / "fp8_w8a8" quantize activations too (Linear and Conv2d,
    through TensorRTQuantizer): they need `example_inputs` (to export the model)
    and calibrate on `calibration`, an iterable of input tuples; without one
    they calibrate on the example inputs and warn. They return a convert_pt2e
    graph module; export() refuses them where the TensorRT flavour or targets
    cannot run them (INT8 W8A8 on TensorRT-RTX, FP8 below SM89) unless
    export's allow_unquantized=True.
    The weight-only schemes need neither (a calibration set given to them is
    refused, not silently ignored). `group_size` (int4 only): input features
    per scale, one of 32, 64, 128, and it must divide every quantized layer's
    input features. "fp4_weight_only" needs every quantized layer's input
    features to be a multiple of 16, and SM120+ targets at export. A scheme
    TensorRT has but this package does not implement (fp4_w4a4) is refused,
    unless `allow_unquantized=True`, which returns the model float and records
    why for the partition report.
    """
    chosen: Scheme = scheme_named(scheme)
    if not isinstance(model, torch.nn.Module):
        raise QuantizationError(f"quantize() takes a torch.nn.Module, got {type(model).__name__}")
    if chosen.activations:
        if example_inputs is None:
            raise QuantizationError(f"scheme {chosen.name!r} quantizes activations: pass "
                                    "example_inputs (a tuple of the model's inputs) so the "
                                    "model can be exported and calibrated")
        inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(
            example_inputs)
        return quantize_pt2e(model, inputs, chosen.name, calibration)
    linears = _linears(model)
    if not linears:
        raise QuantizationError(
            f"{type(model).__name__} has no torch.nn.Linear to quantize; the weight-only schemes "
            "quantize Linear weights only (export the model unquantized)")
    if not chosen.implemented:
        why = (f"scheme {chosen.name!r} ({chosen.description}) is not implemented by "
               f"executorch_tensorrt.quantization yet (implemented: {sorted(implemented())})")
        if not allow_unquantized:
            raise QuantizationError(why + "; pass allow_unquantized=True to export it float")
        return with_plan(shared_copy(model),
                          QuantizationPlan(chosen.name, {}, {n: why for _, _, n, _ in linears}))
    if calibration is not None:
        raise QuantizationError(f"scheme {chosen.name!r} is weight-only and takes no "
                                "calibration data; pass calibration=None")
    fmt = format_of(chosen.name)
    steps = fmt.steps()
    if steps.quantize_linear is None:
        raise QuantizationError(f"scheme {chosen.name!r} has no Linear form in format "
                                f"{fmt.name!r}")
    if steps.check_options is not None:
        steps.check_options(group_size)
    result = shared_copy(model)
    layers: dict[str, str] = {}
    replacements = []
    for parent, child_name, full, linear in _linears(result):
        module, layers[full] = steps.quantize_linear(linear, full, group_size)
        replacements.append((parent, child_name, module))
    for parent, child_name, module in replacements:  # after every check passed
        setattr(parent, child_name, module)
    return with_plan(result, QuantizationPlan(chosen.name, layers, runs_float=fmt.runs_float))


@dataclass(frozen=True)
class PreparedModel:
    """What export traces, the report's per-layer lines, and the eager reference."""
    traced: torch.nn.Module
    lines: dict[str, str]
    reference: torch.nn.Module


def prepare_for_export(model: torch.nn.Module, flavor: str,
                       capabilities: tuple[str, ...] | None,
                       allow_unquantized: bool) -> PreparedModel:
    """Any quantized model -> the model torch.export traces, checked against the
    TensorRT flavour and targets: torchao weights and ModelOpt quantizers become
    our formats' modules; fp4 layers a target cannot run become float when
    allowed; a quantize() plan is checked; a convert_pt2e graph is checked per
    layer; checkpoint Linears (a `.packed` PackedWeight) become the affine
    format's modules. A float model comes back as it is, with no lines."""
    traced = (lower_torchao(model) if has_torchao_weights(model) else
              lower_modelopt(model) if has_modelopt_quantizers(model) else model)
    if has_packed_linears(traced):  # checkpoint Linears (PackedWeight): the affine format
        traced = lower_packed(traced)
    traced = float_where_refused(traced, flavor, capabilities, allow_unquantized)
    plan = quantization_plan(traced)
    lines = {} if plan is None else check_plan(plan, flavor, capabilities, allow_unquantized)
    if is_qdq_graph(model):  # a convert_pt2e graph: checked, and what runs is the reference
        traced, lines = lower_qdq(model, flavor, capabilities, allow_unquantized)
    # Q/DQ graphs (PT2E, ModelOpt): the reference is what TensorRT's Q/DQ
    # compute; ModelOpt's own rounding of x * (127 / amax) can differ by a step.
    reference = traced if is_qdq_graph(model) or has_modelopt_quantizers(model) else model
    return PreparedModel(traced, lines, reference)
