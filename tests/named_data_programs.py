"""Blobs and programs in the named-data weights format, made by hand (the
AOT side's export writes the same layout): a weightless ONNX model
y = x @ W + B whose W is an EXTERNAL initializer at the named-data sentinel,
a blob listing W in "weights", and a real ExecuTorch program whose
TensorRTBackend delegate carries that blob and whose NamedDataStore holds W,
in the .pte or in a .ptd beside it.

The program is lowered through ExecuTorch with a small stand-in
BackendDetails (it returns the prebuilt blob and named data instead of
compiling), whose delegate id is then renamed to "TensorRTBackend" before the
program is serialized: a second BackendDetails class named TensorRTBackend
would clash with the real one in ExecuTorch's lookup by class name.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from executorch_tensorrt.blob import write_blob
from executorch_tensorrt.blob.format import NAMED_DATA_LOCATION

# W is 192 bytes: onnxruntime copies an external initializer of 127 bytes or
# less into its model, so only a larger one shows that it reads in place.
X_SHAPE, W_SHAPE = (2, 4), (4, 12)
NP = {"float32": np.float32, "float16": np.float16}
ONNX_TYPE = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}


def key_of(data: bytes) -> str:
    return "etrt." + hashlib.sha256(data).hexdigest()


def weights(dtype: str = "float32", seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(W_SHAPE).astype(NP[dtype])
    b = rng.standard_normal(W_SHAPE[1]).astype(NP[dtype])
    return w, b


def sentinel_initializer(name: str, dtype: str, shape, location: str = NAMED_DATA_LOCATION,
                         extra: dict | None = None) -> TensorProto:
    t = TensorProto(name=name, data_type=ONNX_TYPE[dtype], dims=list(shape))
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value=location)
    for k, v in (extra or {}).items():
        t.external_data.add(key=k, value=v)
    return t


def weightless_onnx(w: np.ndarray, b: np.ndarray, dtype: str = "float32",
                    w_initializer: TensorProto | None = None) -> bytes:
    """y = MatMul(x, W) + B; W at the sentinel (no bytes), B inline. x and y
    are float32; a float16 model casts around its MatMul, as reduced-precision
    partitions do."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X_SHAPE))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [X_SHAPE[0], W_SHAPE[1]])
    if dtype == "float32":
        nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]),
                 helper.make_node("Add", ["xw", "B"], ["y"])]
    else:
        nodes = [helper.make_node("Cast", ["x"], ["xh"], to=ONNX_TYPE[dtype]),
                 helper.make_node("MatMul", ["xh", "W"], ["xw"]),
                 helper.make_node("Add", ["xw", "B"], ["yh"]),
                 helper.make_node("Cast", ["yh"], ["y"], to=TensorProto.FLOAT)]
    inits = [w_initializer or sentinel_initializer("W", dtype, w.shape),
             numpy_helper.from_array(b, "B")]
    graph = helper.make_graph(nodes, "named_weights", [x], [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8).SerializeToString()


def weight_entry(w: np.ndarray, dtype: str = "float32", name: str = "W",
                 key: str | None = None) -> dict:
    return {"name": name, "key": key or key_of(w.tobytes()), "dtype": dtype,
            "shape": list(w.shape), "nbytes": int(w.nbytes)}


def named_blob(w: np.ndarray, b: np.ndarray, dtype: str = "float32", engine: bytes = b"",
               kind: str = "none", entries: list | None = None, onnx: bytes | None = None,
               **meta) -> bytes:
    """A blob whose ONNX is weightless and whose weights are in named data."""
    from executorch_tensorrt.tensorrt.flavor import load_tensorrt

    trt = load_tensorrt()
    metadata = {"io_bindings": [
        {"name": "x", "dtype": "float32", "shape": list(X_SHAPE), "is_input": True},
        {"name": "y", "dtype": "float32", "shape": [X_SHAPE[0], W_SHAPE[1]],
         "is_input": False}],
        "trt_flavor": trt.flavor, "trt_version": trt.version, "compute_capabilities": "all",
        "precision": "fp32" if dtype == "float32" else "fp16",
        "engine": kind, "weights_location": "named_data",
        "weights": entries if entries is not None else [weight_entry(w, dtype)], **meta}
    return write_blob(engine, metadata, onnx=onnx or weightless_onnx(w, b, dtype))


def write_program(path: Path, blob: bytes, named: dict[str, bytes],
                  external: bool) -> tuple[Path, Path | None]:
    """`path` (.pte) whose forward(x [2, 4] float32) is one TensorRTBackend
    delegate call carrying `blob`, with `named` (key -> bytes) in the
    program's named data: inside the .pte, or (external) in `<stem>.ptd`
    beside it. Returns (pte, ptd or None)."""
    import torch
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir._serialize._named_data_store import NamedDataStore
    from executorch.exir._serialize._serialize import serialize_for_executorch
    from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
    from executorch.exir.backend.partitioner import (DelegationSpec, Partitioner,
                                                     PartitionResult)
    from executorch.exir.backend.utils import tag_constant_data

    tag = path.stem if external else None

    class EtrtNamedDataStandIn(BackendDetails):
        @staticmethod
        def preprocess(edge_program, compile_specs):
            store = NamedDataStore()
            for key, data in named.items():
                store.add_named_data(key, data, alignment=64, external_tag=tag)
            return PreprocessResult(processed_bytes=blob, debug_handle_map={},
                                    data_store_output=store.get_named_data_store_output())

    class AllNodes(Partitioner):
        def __init__(self):
            super().__init__()
            self.delegation_spec = DelegationSpec(EtrtNamedDataStandIn.__name__, [])

        def partition(self, ep):
            for node in ep.graph.nodes:
                if node.op == "call_function":
                    node.meta["delegation_tag"] = "tag0"
            tag_constant_data(ep)
            return PartitionResult(tagged_exported_program=ep,
                                   partition_tags={"tag0": self.delegation_spec})

    class Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(W_SHAPE))

        def forward(self, x):
            return x @ self.w

    ep = torch.export.export(Linear().eval(), (torch.ones(X_SHAPE),))
    edge = to_edge_transform_and_lower(ep, partitioner=[AllNodes()])
    program = edge.to_executorch(ExecutorchBackendConfig())
    emitted = program._emitter_output  # noqa: SLF001 - rename the delegate, then serialize
    for plan in emitted.program.execution_plan:
        for delegate in plan.delegates:
            assert delegate.id == EtrtNamedDataStandIn.__name__
            delegate.id = "TensorRTBackend"
    pte, tensor_data = serialize_for_executorch(emitted, ExecutorchBackendConfig(),
                                                program._data_serializer,  # noqa: SLF001
                                                program._named_data)  # noqa: SLF001
    with open(path, "wb") as f:
        pte.write_to_file(f)
    ptd = None
    for name, cord in tensor_data.items():
        ptd = path.parent / f"{name}.ptd"
        with open(ptd, "wb") as f:
            cord.write_to_file(f)
    return path, ptd
