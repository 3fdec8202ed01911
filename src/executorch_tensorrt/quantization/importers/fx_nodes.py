"""FX lookups the PT2E quantizer and the Q/DQ graph checks share."""
from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

# The layers TensorRTQuantizer annotates and lower_qdq checks.
LAYERS = {torch.ops.aten.linear.default: "Linear", torch.ops.aten.conv2d.default: "Conv2d"}


def graph_attr(gm: GraphModule, target: str) -> torch.Tensor:
    """The tensor a get_attr node's dotted target names."""
    value = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def layer_name(node: Node) -> str:
    """The layer's module path (nn_module_stack), else the node's name."""
    stack = node.meta.get("nn_module_stack") or {}
    path = list(stack.values())[-1][0] if stack else ""
    return path or node.name
