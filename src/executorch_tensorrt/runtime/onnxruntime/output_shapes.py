"""Which outputs of dynamic shape the onnxruntime executor may bind to
ExecuTorch's memory instead of letting onnxruntime allocate them.

An output whose every dimension is a number or a symbol that also names an
input dimension (the exporter's `s27` of `logits[1, s27, V]` is the tokens'
`[1, s27]`) has one shape per set of input shapes. After one call has shown
that shape, later calls with the same input shapes can run with the output
bound (no allocation, no copy: a decode step's logits). A symbol of no input
(an unbacked size, e.g. NonZero's count) depends on the values: such outputs
stay allocated and copied. onnxruntime refuses a bound output whose shape
differs from the one it computes, so a wrong guess fails the call rather than
writing the wrong bytes.
"""
from __future__ import annotations

import onnx

__all__ = ["outputs_follow_input_shapes"]


def outputs_follow_input_shapes(model: bytes, num_outputs: int) -> tuple[bool, ...]:
    """For each of the model's first `num_outputs` outputs: whether its shape
    is fixed by the inputs' shapes (every dimension a number or an input's
    symbol)."""
    graph = onnx.load_model_from_string(model).graph
    symbols = {d.dim_param for value in graph.input
               for d in value.type.tensor_type.shape.dim if d.dim_param}

    def follows(value: onnx.ValueInfoProto) -> bool:
        tensor = value.type.tensor_type
        return tensor.HasField("shape") and all(
            d.HasField("dim_value") or d.dim_param in symbols for d in tensor.shape.dim)

    return tuple(follows(value) for value in graph.output[:num_outputs])
