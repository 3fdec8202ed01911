"""Checks on one candidate partition beyond "its engine builds".

- The options themselves: a compute capability TensorRT cannot target fails
  every build, so it is found once on a one-node model instead of costing a
  build per partition (and per split half).
- Output agreement: the ONNX model's outputs, as ONNX shape inference and
  TensorRT's network compute them, must have the shapes and dtypes the graph
  (FX `meta["val"]`) says. The exporter declares each output with the graph's
  shape whatever the nodes compute, so a wrong translation (torchlib's
  `aten::copy` made a 0-d value where [7, 7] was declared) would otherwise
  build and fail only at run time.
"""
from __future__ import annotations

import functools

import onnx
import torch
from onnx import helper
from torch.utils import _pytree as pytree

from ...errors import EngineBuildError
from ...tensorrt.engine_builder import build_engine, parse_network
from ..compile_spec import TensorRTCompileSpec
from ..torch_dtypes import TORCH_OF_ONNX, TORCH_OF_TENSORRT



@functools.lru_cache(maxsize=16)
def options_error(spec: TensorRTCompileSpec) -> str | None:
    """Why TensorRT builds no engine at all with `spec` (None when it builds one)."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    try:
        build_engine(model.SerializeToString(), spec, label="options probe", progress=None)
    except EngineBuildError as e:
        return f"TensorRT builds no engine with these options: {e}"
    return None


def _graph_outputs(sub_ep: torch.export.ExportedProgram) -> list[torch.Tensor | None]:
    out = sub_ep.graph.output_node().args[0]
    vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a
            for a in pytree.tree_leaves(out)]
    return [v if isinstance(v, torch.Tensor) else None for v in vals]


def _static(shape) -> list[int | None]:
    return [int(d) if isinstance(d, int) else None for d in shape]


def _disagrees(want: torch.Tensor, shape, dtype) -> str | None:
    want_shape = _static(want.shape)
    if shape is not None and (len(shape) != len(want_shape) or any(
            a is not None and b is not None and a != b for a, b in zip(shape, want_shape))):
        return f"shape {list(shape)}"
    if dtype is not None and dtype != want.dtype:
        return f"dtype {dtype}"
    return None


def _onnx_inferred(onnx_bytes: bytes) -> list[tuple[list | None, torch.dtype | None]]:
    """Output shapes/dtypes as ONNX shape inference computes them from the nodes
    (the declared output shapes are cleared first: they are the graph's)."""
    model = onnx.load_model_from_string(onnx_bytes)
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    result = []
    for out in inferred.graph.output:
        t = out.type.tensor_type
        shape = ([d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
                 if t.HasField("shape") else None)
        result.append((shape, TORCH_OF_ONNX.get(t.elem_type)))
    return result


def _tensorrt_network(trt, onnx_bytes: bytes,
                      initializers) -> list[tuple[list | None, torch.dtype | None]]:
    _builder, network, _parser, _logger = parse_network(trt, onnx_bytes, initializers)
    result = []
    for i in range(network.num_outputs):
        out = network.get_output(i)
        shape = [d if d >= 0 else None for d in out.shape]
        result.append((shape, TORCH_OF_TENSORRT.get(str(out.dtype).rsplit(".", 1)[-1])))
    return result


def output_mismatch(trt, sub_ep: torch.export.ExportedProgram, onnx_bytes: bytes,
                    initializers=None) -> str | None:
    """Why the partition's outputs disagree with the graph's, or None.
    `initializers`: the graph's EXTERNAL weights by address (parser.Initializer)."""
    wants = _graph_outputs(sub_ep)
    for source, computed in (("ONNX shape inference", _onnx_inferred(onnx_bytes)),
                             ("TensorRT's network", _tensorrt_network(trt, onnx_bytes, initializers))):
        if len(computed) != len(wants):
            return (f"{source} gives {len(computed)} outputs where the graph has "
                    f"{len(wants)}")
        for i, (want, (shape, dtype)) in enumerate(zip(wants, computed)):
            if want is None:
                continue
            bad = _disagrees(want, shape, dtype)
            if bad:
                return (f"output {i}: {source} computes {bad}, the graph says shape "
                        f"{list(want.shape)} dtype {want.dtype} (a wrong ONNX translation; "
                        "the program would fail at run time)")
    return None


def scalar_input_readers(sub_ep: torch.export.ExportedProgram,
                         names: set[str]) -> dict[str, str]:
    """Nodes of a partition that read a size given as a plain int input (a
    SymInt placeholder): TensorRT would take it as a 0-D shape tensor with no
    optimization profile and refuse the build, and ExecuTorch passes it as an
    int, not a tensor. Said here in words, before a build fails on it."""
    out = {}
    for node in sub_ep.graph.nodes:
        if node.op != "placeholder" or not isinstance(node.meta.get("val"), torch.SymInt):
            continue
        for user in node.users:
            if user.name in names:
                out[user.name] = (
                    f"reads {node.name}, a size that reaches the partition as a number, not "
                    "as a tensor's dimension (TensorRT builds engines over tensor inputs "
                    "only); stays with ExecuTorch. To run it on TensorRT, compute the size "
                    "from a tensor input (x.shape[0]) instead of passing it as an int")
    return out
