"""An embedded ONNX model never reads a file (issue #9): a tensor whose data is
EXTERNAL (a `location` resolved against the process's working directory) is
refused before onnxruntime, the fp32 upcast or the engine rebuild sees it.

The crafted blob's model is `y = x + W` with W's bytes in `secret.txt`; the
test runs in a temporary working directory that holds that file, so a reader
that followed the reference would put the secret into the output.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from executorch_tensorrt.blob import read_blob, write_blob
from executorch_tensorrt.errors import InvalidProgramError, RebuildImpossible
from executorch_tensorrt.runtime.tensorrt.portability import rebuilt_engine
from executorch_tensorrt.runtime.choose import create_executor
from executorch_tensorrt.runtime.onnxruntime.executor import OnnxRuntimeExecutor
from executorch_tensorrt.tensorrt.flavor import load_tensorrt

SHAPE = [2, 3]
REFUSED = r"keeps the data of .* outside the model \(external data, location 'secret.txt'\)"


def external(name: str, elem_type: int) -> TensorProto:
    t = TensorProto(name=name, data_type=elem_type, dims=SHAPE)
    t.data_location = TensorProto.EXTERNAL
    itemsize = 4 if elem_type == TensorProto.FLOAT else 2
    for key, value in (("location", "secret.txt"), ("offset", "0"),
                       ("length", str(6 * itemsize))):
        t.external_data.add(key=key, value=value)
    return t


def crafted_model(where: str, elem_type: int) -> onnx.ModelProto:
    """y = x + W, with W external: as an initializer, a Constant node's value,
    or an initializer inside an If node's branch."""
    x = helper.make_tensor_value_info("x", elem_type, SHAPE)
    y = helper.make_tensor_value_info("y", elem_type, SHAPE)
    w = external("W", elem_type)
    nodes, inits = [], []
    if where == "initializer":
        inits.append(w)
    elif where == "constant":
        nodes.append(helper.make_node("Constant", [], ["W"], value=w))
    else:  # an If whose branches both output W
        branch = helper.make_graph([helper.make_node("Identity", ["Wb"], ["W_out"])], "b", [],
                                   [helper.make_tensor_value_info("W_out", elem_type, SHAPE)],
                                   initializer=[external("Wb", elem_type)])
        inits.append(helper.make_tensor("cond", TensorProto.BOOL, [], [True]))
        nodes.append(helper.make_node("If", ["cond"], ["W"], then_branch=branch,
                                      else_branch=branch))
    nodes.append(helper.make_node("Add", ["x", "W"], ["y"]))
    graph = helper.make_graph(nodes, "crafted", [x], [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def crafted_blob(where: str, precision: str):
    elem = TensorProto.FLOAT if precision == "fp32" else TensorProto.FLOAT16
    dtype = "float32" if precision == "fp32" else "float16"
    trt = load_tensorrt()
    meta = {"io_bindings": [{"name": "x", "dtype": dtype, "shape": SHAPE, "is_input": True},
                            {"name": "y", "dtype": dtype, "shape": SHAPE, "is_input": False}],
            "trt_flavor": trt.flavor, "trt_version": "0.1.2", "compute_capabilities": "all",
            "precision": precision}
    return read_blob(write_blob(b"\0" * 64, meta,
                                onnx=crafted_model(where, elem).SerializeToString()))


@pytest.fixture
def secret_cwd(tmp_path, monkeypatch):
    (tmp_path / "secret.txt").write_bytes(np.arange(6, dtype=np.float32).tobytes() * 2)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EXECUTORCH_TENSORRT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


WHERE = ["initializer", "constant", "subgraph"]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("where", WHERE)
def test_onnxruntime_fallback_refuses_external_data(secret_cwd, where, precision):
    blob = crafted_blob(where, precision)
    with pytest.raises(InvalidProgramError, match=REFUSED):
        OnnxRuntimeExecutor(blob)
    with pytest.raises(InvalidProgramError, match=REFUSED):
        create_executor(blob, "onnxruntime")  # the path init takes


@pytest.mark.parametrize("where", WHERE)
def test_rebuild_refuses_external_data(secret_cwd, where):
    with pytest.raises(RebuildImpossible, match=REFUSED):
        rebuilt_engine(crafted_blob(where, "fp32"), load_tensorrt(), "SM89")
    assert not (secret_cwd / "cache").exists()


def test_refusal_names_the_tensor(secret_cwd):
    with pytest.raises(InvalidProgramError, match=r"graph node 'If' attribute '(then|else)_branch' "
                       r"subgraph initializer 'Wb'"):
        OnnxRuntimeExecutor(crafted_blob("subgraph", "fp32"))
