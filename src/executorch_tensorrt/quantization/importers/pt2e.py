"""TensorRTQuantizer: the PT2E quantizer for this delegate (ExecuTorch's convention).

    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e, convert_pt2e
    gm = prepare_pt2e(torch.export.export(model, x).module(), TensorRTQuantizer("int8_w8a8"))
    for batch in calibration: gm(*batch)
    gm = convert_pt2e(gm)
    executorch_tensorrt.export(gm, x, "model.pte")

It annotates what TensorRT quantizes: the weight (and, for W8A8, the input
activation) of every Linear and Conv2d whose weight is a constant, with
symmetric specs only (TensorRT takes zero points of 0 only):

- "int8_w8a8": int8 weights per output channel ([-127, 127]), int8
  activations per tensor ([-128, 127], the range ONNX QuantizeLinear saturates
  to). Standard TensorRT; TensorRT-RTX has no INT8 activation quantization.
- "fp8_w8a8": fp8 e4m3 weights and activations, per tensor (scale = max|x| /
  448). Compute capability 8.9 or newer.
- "int8_weight_only": int8 weights per output channel, float activations
  (both flavours; TensorRT-RTX's INT8 path).
- "int4_weight_only" (with `group_size`, 32, 64 or 128): symmetric int4
  weights of Linear layers per group of input features, packed two per byte
  (Int4WeightObserver below: quantize()'s int4 path, block DequantizeLinear). Conv2d stays
  float. A group size that does not divide a layer's input features is refused
  at prepare_pt2e, the layer named.

`quantize_pt2e(model, example_inputs, scheme, calibration)` runs the whole
sequence for quantize() (workflow.py). Bias stays float (TensorRT adds it in
float).

Int4WeightObserver: torchao 0.18's pt2e observers have no per-group int4 spec
that convert_pt2e lowers to quantized_decomposed ops, but convert_pt2e hands
any observer with a `convert(model, node)` method its own node. The observer
uses that to put quantize()'s int4 path into the graph: the Linear's weight
becomes `etrt_quant.dequantize_int4(packed uint8, scale, group)` over buffers
of the packed weight (two per byte) and its scales, which export stores in
named data and lowers to an opset-21 block DequantizeLinear, exactly as for
Int4Linear. The weight is a constant, so the observer needs no calibration.
"""
from __future__ import annotations

import warnings

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.observer import (MinMaxObserver, ObserverBase,
                                                PerChannelMinMaxObserver)
from torchao.quantization.pt2e.quantizer import (QuantizationAnnotation, QuantizationSpec,
                                                 Quantizer)

from ...errors import QuantizationError
from ..registry import scheme_named, steps_of
from .fx_nodes import LAYERS, graph_attr, layer_name

# The formats' pieces through the registry, never a format module by name.
_fp8, _int4 = steps_of("fp8"), steps_of("int4")
FP8, FP8_MAX = _fp8.element_dtype, _fp8.max_value
DEQUANTIZE_INT4, check_group_size = _int4.dequantize_weight, _int4.check_group_size
quantize_int4 = _int4.quantize_weight

PT2E_SCHEMES = ("int8_w8a8", "fp8_w8a8", "int8_weight_only", "int4_weight_only")
_EPS = 2 ** -20  # smallest scale an observer may choose (an all-zero tensor)


def _int8_activation() -> QuantizationSpec:
    return QuantizationSpec(dtype=torch.int8, quant_min=-128, quant_max=127,
                            qscheme=torch.per_tensor_symmetric,
                            observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=_EPS))


def _int8_weight() -> QuantizationSpec:
    return QuantizationSpec(dtype=torch.int8, quant_min=-127, quant_max=127,
                            qscheme=torch.per_channel_symmetric, ch_axis=0,
                            observer_or_fake_quant_ctr=PerChannelMinMaxObserver.with_args(
                                eps=_EPS))


def _fp8_tensor() -> QuantizationSpec:
    # A symmetric range of +-448 makes the observer's scale max|x| / 448.
    bound = int(FP8_MAX)
    return QuantizationSpec(dtype=FP8, quant_min=-bound, quant_max=bound,
                            qscheme=torch.per_tensor_symmetric,
                            observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=_EPS))


def _free_name(gm: GraphModule, stem: str) -> str:
    i = 0
    while hasattr(gm, f"{stem}_{i}"):
        i += 1
    return f"{stem}_{i}"


class Int4WeightObserver(ObserverBase):
    """Observes nothing (the weight is a constant); convert() quantizes it."""

    def __init__(self, group_size: int = 128, layer: str = "", **kwargs) -> None:
        super().__init__(dtype=torch.int8)
        self.group_size = group_size
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def calculate_qparams(self, **kwargs):
        raise NotImplementedError("int4 scales come from the weight itself, in convert()")

    def convert(self, model: GraphModule, observer_node: Node) -> None:
        weight_node = observer_node.args[0]
        if not (isinstance(weight_node, Node) and weight_node.op == "get_attr"):
            raise QuantizationError(f"layer {self.layer!r}: its weight is computed in the graph, "
                                    "not a constant; int4 weight-only needs constant weights")
        weight = graph_attr(model, weight_node.target)
        if weight.dim() != 2:
            raise QuantizationError(f"layer {self.layer!r}: int4 weight-only takes Linear "
                                    f"weights [out, in], this one has shape {list(weight.shape)}")
        packed, scale = quantize_int4(weight, self.group_size, self.layer)
        names = []
        for stem, value in (("_etrt_int4_weight", packed), ("_etrt_int4_scale", scale)):
            names.append(_free_name(model, stem))
            model.register_buffer(names[-1], value)
        with model.graph.inserting_before(observer_node):
            packed_node = model.graph.get_attr(names[0])
            scale_node = model.graph.get_attr(names[1])
            dq = model.graph.call_function(DEQUANTIZE_INT4,
                                           (packed_node, scale_node, self.group_size))
        dq.meta["val"] = observer_node.meta.get("val")
        observer_node.replace_all_uses_with(dq)
        model.graph.erase_node(observer_node)
        if not weight_node.users:  # the float weight is no longer read
            model.graph.erase_node(weight_node)


class TensorRTQuantizer(Quantizer):
    """A PT2E quantizer whose annotations TensorRT can run (module docstring)."""

    def __init__(self, scheme: str = "int8_w8a8", group_size: int = 128) -> None:
        super().__init__()
        name = scheme_named(scheme).name  # uint4 / int2 / unknown: refused with the reason
        if name not in PT2E_SCHEMES:
            raise QuantizationError(f"TensorRTQuantizer has no scheme {name!r}; its "
                                    f"schemes are {list(PT2E_SCHEMES)}")
        if name == "int4_weight_only":
            check_group_size("(every Linear)", 0, group_size)  # 32/64/128; each layer at annotate
        self.scheme = name
        self.group_size = group_size  # int4_weight_only only
        self.skipped: dict[str, str] = {}  # node -> why it was not annotated

    def _specs(self) -> tuple[QuantizationSpec | None, QuantizationSpec]:
        if self.scheme == "fp8_w8a8":
            return _fp8_tensor(), _fp8_tensor()
        if self.scheme == "int8_w8a8":
            return _int8_activation(), _int8_weight()
        return None, _int8_weight()

    def _int4_weight(self, node: Node, w: Node) -> QuantizationSpec:
        layer = layer_name(node)
        check_group_size(layer, int(w.meta["val"].shape[1]), self.group_size)
        return QuantizationSpec(dtype=torch.int8, quant_min=-8, quant_max=7,
                                qscheme=torch.per_channel_symmetric, ch_axis=0,
                                observer_or_fake_quant_ctr=Int4WeightObserver.with_args(
                                    group_size=self.group_size, layer=layer))

    def annotate(self, model: GraphModule) -> GraphModule:
        activation, weight = self._specs()
        found = 0
        for node in model.graph.nodes:
            if node.op != "call_function" or node.target not in LAYERS:
                continue
            x, w = node.args[0], node.args[1]
            if not (isinstance(w, Node) and w.op == "get_attr"):
                self.skipped[node.name] = "its weight is computed, not a constant"
                continue
            if "quantization_annotation" in node.meta:
                continue  # annotated by another quantizer composed before this one
            if self.scheme == "int4_weight_only":
                if node.target != torch.ops.aten.linear.default:
                    self.skipped[node.name] = "int4 weight-only quantizes Linear layers only"
                    continue
                weight = self._int4_weight(node, w)
            specs = {w: weight}
            if activation is not None and isinstance(x, Node):
                specs[x] = activation
            node.meta["quantization_annotation"] = QuantizationAnnotation(
                input_qspec_map=specs, _annotated=True)
            found += 1
        if not found:
            raise QuantizationError(
                "TensorRTQuantizer found no Linear or Conv2d with a constant weight to quantize "
                f"({'; '.join(f'{n}: {w}' for n, w in self.skipped.items()) or 'none at all'});"
                " pass the graph of torch.export.export(model, inputs).module()")
        return model

    def validate(self, model: GraphModule) -> None:
        """Nothing to validate beyond annotate(): lower_qdq checks the converted graph."""


def _batches(calibration, example_inputs: tuple, scheme: str) -> list[tuple]:
    """The calibration batches as tuples; the example inputs, with a warning, when none."""
    if calibration is None:
        warnings.warn(f"quantize(scheme={scheme!r}): no calibration data, so the activation "
                      "ranges come from the example inputs alone; one batch is weak "
                      "calibration: pass calibration= (an iterable of input tuples) with "
                      "representative inputs", UserWarning, stacklevel=3)
        return [example_inputs]
    if isinstance(calibration, (torch.Tensor, str, bytes)):
        raise QuantizationError("calibration must be an iterable of input tuples (one tuple per "
                                f"batch), got a {type(calibration).__name__}")
    batches = []
    for i, batch in enumerate(calibration):
        batch = (batch,) if isinstance(batch, torch.Tensor) else batch
        if not (isinstance(batch, (tuple, list))
                and all(isinstance(t, torch.Tensor) for t in batch)):
            raise QuantizationError(f"calibration batch {i} is a {type(batch).__name__}, not a "
                                    "tuple of tensors (the model's inputs)")
        batches.append(tuple(batch))
    if not batches:
        raise QuantizationError("calibration is empty: pass at least one batch of inputs")
    return batches


def quantize_pt2e(model: torch.nn.Module, example_inputs: tuple, scheme: str, calibration,
                  group_size: int = 128) -> GraphModule:
    """torch.export -> prepare_pt2e(TensorRTQuantizer) -> calibrate -> convert_pt2e:
    the converted graph module, which export() takes (qdq_graph.lower_qdq checks it
    against the TensorRT flavour and targets there)."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = TensorRTQuantizer(scheme, group_size)
    batches = _batches(calibration, example_inputs, scheme)
    try:
        graph = torch.export.export(model, example_inputs).module()
    except Exception as e:  # noqa: BLE001 - torch.export raises many kinds
        raise QuantizationError(f"quantize(scheme={scheme!r}): torch.export of the model failed "
                                f"before quantizing: {type(e).__name__}: {e}") from e
    prepared = prepare_pt2e(graph, quantizer)
    with torch.no_grad():
        for i, batch in enumerate(batches):
            try:
                prepared(*batch)
            except Exception as e:  # noqa: BLE001 - the model's own error, re-raised with context
                raise QuantizationError(
                    f"calibration batch {i} (shapes {[list(t.shape) for t in batch]}) failed in "
                    f"the model: {type(e).__name__}: {e}; calibration batches must be inputs "
                    "the model takes, like example_inputs") from e
    return convert_pt2e(prepared)
