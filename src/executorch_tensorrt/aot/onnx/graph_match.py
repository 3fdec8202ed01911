"""Matching helpers shared by the ONNX graph rewrites (fusions.py,
vision_fusions.py): constants read without touching weight data, single-reader
checks, and the node swap every rule ends with."""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

TOLERANCE = 1e-6  # how near a constant must be to the value a rule expects


def scalar(value: ir.Value | None) -> float | None:
    """The value of a one-element constant (initializer or Constant node)."""
    if value is None:
        return None
    tensor = value.const_value
    if tensor is None and value.producer() is not None and value.producer().op_type == "Constant":
        attr = value.producer().attributes.get("value")
        tensor = attr.value if attr is not None else None
    if tensor is None or math.prod(tensor.shape) != 1:  # never reads a weight's data
        return None
    return float(np.asarray(tensor.numpy()).reshape(-1)[0])


def ints(value: ir.Value | None) -> list[int] | None:
    tensor = value.const_value if value is not None else None
    return None if tensor is None else [int(v) for v in np.asarray(tensor.numpy()).reshape(-1)]


def only_reader(value: ir.Value) -> ir.Node | None:
    """The one node reading `value`, when it has exactly one and is no graph output."""
    readers = value.uses()
    if len(readers) != 1 or value.is_graph_output():
        return None
    return readers[0].node


def other_input(node: ir.Node, value: ir.Value) -> ir.Value | None:
    """The second operand of a binary node, given the first."""
    a, b = node.inputs
    return b if a is value else a if b is value else None


def known(shape: ir.Shape | None, rank: int) -> bool:
    """A shape of `rank` whose every dimension is a number or a named symbol:
    two unknown dimensions compare equal in onnx_ir, yet may differ."""
    return shape is not None and len(shape) == rank and all(
        isinstance(d, int) or d.value is not None for d in shape)


def near(x: float | None, want: float) -> bool:
    return x is not None and abs(x - want) <= TOLERANCE * max(1.0, abs(want))


def replace(graph: ir.Graph, chain: Sequence[ir.Node], op_type: str,
             inputs: Sequence[ir.Value], attributes: Sequence[ir.Attr] = (),
             origin: ir.Node | None = None) -> ir.Node:
    """Puts one node computing `chain[-1]`'s output where the chain was; it
    takes the name and metadata of `origin` (default: the chain's last node)."""
    last = chain[-1]
    origin = origin or last
    old = last.outputs[0]
    node = ir.Node("", op_type, inputs, attributes, name=origin.name)
    new = node.outputs[0]
    new.name, new.shape, new.type = old.name, old.shape, old.type
    node.metadata_props.update(origin.metadata_props)
    graph.insert_before(last, node)
    old.replace_all_uses_with(new, replace_graph_outputs=True)
    graph.remove(list(reversed(chain)), safe=True)
    return node


def new_node(op_type: str, inputs: list, origin: ir.Node, shape: ir.Shape | None,
             attributes: list | None = None) -> ir.Node:
    """A node named after `origin`, with its metadata; its output shaped `shape`
    and typed like `origin`'s."""
    node = ir.Node("", op_type, inputs, attributes or [], name=f"{origin.name}_{op_type}")
    node.outputs[0].name = f"{origin.outputs[0].name}_{op_type}"
    node.outputs[0].shape, node.outputs[0].type = shape, origin.outputs[0].type
    node.metadata_props.update(origin.metadata_props)
    return node


def initializer(graph: ir.Graph, name: str, data: np.ndarray,
                dtype: ir.DataType) -> ir.Value:
    """A new initializer holding `data`, under a name no other one has."""
    while name in graph.initializers:
        name += "_"
    value = ir.Value(name=name, shape=ir.Shape(data.shape), type=ir.TensorType(dtype),
                     const_value=ir.tensor(data, dtype=dtype, name=name))
    graph.register_initializer(value)
    return value
