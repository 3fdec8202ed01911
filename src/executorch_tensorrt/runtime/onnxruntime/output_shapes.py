"""Which outputs of dynamic shape the onnxruntime executor may bind to
ExecuTorch's memory instead of letting onnxruntime allocate them.

An output whose every dimension is a number or a symbol that also names an
input dimension (the exporter's `s27` of `logits[1, s27, V]` is the tokens'
`[1, s27]`) has one shape per set of input shapes: each of its dimensions
takes its size from that input dimension, or is static. The executor binds
such an output after one call of each input shape, and a plan with bounds
gives the adapter the rule, so it resizes and binds the output itself (no
allocation, no copy: a decode step's logits). A symbol of no input (an
unbacked size, e.g. NonZero's count) depends on the values: such outputs
stay allocated and copied. onnxruntime refuses a bound output whose shape
differs from the one it computes, so a wrong rule fails the call rather than
writing the wrong bytes.
"""
from __future__ import annotations

import onnx

__all__ = ["DimSource", "output_dim_sources"]

# Where one output dimension's size comes from: (input index, its dimension),
# or a static size.
DimSource = tuple[int, int] | int


def output_dim_sources(model: bytes, num_outputs: int) -> tuple[tuple[DimSource, ...] | None, ...]:
    """For each of the model's first `num_outputs` outputs: per dimension, the
    input dimension whose size it takes (the first that carries its symbol)
    or its static size; None when some dimension is neither (it depends on
    the values, or the output has no shape)."""
    graph = onnx.load_model_from_string(model).graph
    symbols: dict[str, tuple[int, int]] = {}
    for i, value in enumerate(graph.input):
        for d, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.dim_param:
                symbols.setdefault(dim.dim_param, (i, d))

    def sources(value: onnx.ValueInfoProto) -> tuple[DimSource, ...] | None:
        tensor = value.type.tensor_type
        if not tensor.HasField("shape"):
            return None
        found: list[DimSource] = []
        for dim in tensor.shape.dim:
            if dim.HasField("dim_value"):
                found.append(int(dim.dim_value))
            elif dim.dim_param in symbols:
                found.append(symbols[dim.dim_param])
            else:
                return None
        return tuple(found)

    return tuple(sources(value) for value in graph.output[:num_outputs])
