"""What the Whisper test checks in a written encoder-decoder program:
its decoder's blob, and that the cross-attention projections run at
position 0 only (llm/cross_attention.py, aot/onnx/decoder_fusions.py)."""
from __future__ import annotations

from pathlib import Path

import onnx

from executorch_tensorrt.blob import read_blob
from helpers import tensorrt_blobs


def decoder_blob(pte: str | Path):
    """The blob of the program's stateful partition (its text_decoder)."""
    return next(b for b in map(read_blob, tensorrt_blobs(Path(pte))) if b.state)


def cross_states(blob) -> dict[str, list[int]]:
    return {e["fqn"]: e["shape"] for e in blob.state
            if e["fqn"].startswith(("cross_key_", "cross_value_"))}


def assert_projected_once(blob) -> None:
    """The decoder's encoder_hidden_states (its one float user input) is read
    only inside one If's then-branch, by the projections (matmuls), and by
    Shape outside it; the else-branch computes nothing."""
    graph = onnx.load_model_from_string(blob.onnx).graph
    (name,) = [v.name for v in graph.input if not v.name.startswith("state_in.")
               and v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT]
    (branch,) = [n for n in graph.node if n.op_type == "If"]
    # Outside the If only Shape reads it (a dynamic encoder length): no data.
    outside = {n.op_type for n in graph.node if name in n.input}
    assert outside <= {"Shape"}, outside
    then, other = (next(a.g for a in branch.attribute if a.name == key)
                   for key in ("then_branch", "else_branch"))
    assert any(name in n.input and n.op_type == "MatMul" for n in then.node)
    assert {n.op_type for n in other.node} == {"Identity"}
