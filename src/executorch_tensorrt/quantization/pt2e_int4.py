"""INT4 weight-only per group through PT2E (TensorRTQuantizer("int4_weight_only")).

torchao 0.18's pt2e observers have no per-group int4 spec that convert_pt2e
lowers to quantized_decomposed ops, but convert_pt2e hands any observer with a
`convert(model, node)` method its own node. Int4WeightObserver uses that to
put quantize()'s int4 path (int4.py) into the graph: the Linear's weight
becomes `etrt_quant.dequantize_int4(packed uint8, scale, group)` over buffers
of the packed weight (two per byte) and its scales, which export stores in
named data and lowers to an opset-21 block DequantizeLinear, exactly as for
Int4Linear. The weight is a constant, so the observer needs no calibration.
"""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.observer import ObserverBase

from .errors import QuantizationError
from .int4 import quantize_int4
from .ops import DEQUANTIZE_INT4
from .qdq_graph import graph_attr


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
