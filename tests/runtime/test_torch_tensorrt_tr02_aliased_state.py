"""A Torch-TensorRT TR02 blob (aliased_io, caller-owned cache) built here from the
published layout: header <4sIIIQ8s> with magic TR02, JSON metadata with
io_bindings then aliased_io, the engine, and (our extension) the ONNX section
the onnxruntime fallback runs. Its cache input keeps the new value across calls."""
from __future__ import annotations

import ctypes
import json
import struct

import numpy as np
import torch
from onnx import TensorProto, helper

from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.runtime.adapter import abi
from executorch_tensorrt.runtime.onnxruntime.executor import OnnxRuntimeExecutor

CACHE = [1, 2, 8, 4]


def _onnx() -> bytes:
    g = helper.make_graph(
        [helper.make_node("TensorScatter", ["cache", "update", "write_index"], ["cache_out"],
                          axis=-2),
         helper.make_node("ReduceSum", ["cache_out"], ["total"], keepdims=0)], "kv",
        [helper.make_tensor_value_info("cache", TensorProto.FLOAT, CACHE),
         helper.make_tensor_value_info("update", TensorProto.FLOAT, [1, 2, 1, 4]),
         helper.make_tensor_value_info("write_index", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("cache_out", TensorProto.FLOAT, CACHE),
         helper.make_tensor_value_info("total", TensorProto.FLOAT, [])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 24)]).SerializeToString()


def _binding(name, dtype, shape, is_input):
    return {"name": name, "dtype": dtype, "shape": shape, "is_input": is_input}


BINDINGS = [_binding("cache", "float32", CACHE, True),
            _binding("update", "float32", [1, 2, 1, 4], True),
            _binding("write_index", "int64", [1], True),
            _binding("cache_out", "float32", CACHE, False),
            _binding("total", "float32", [], False)]


def _tr02_blob(engine: bytes, onnx: bytes, bindings=BINDINGS, output="cache_out",
               input="cache") -> bytes:
    """Torch-TensorRT's layout: io_bindings, then aliased_io, then its scalar keys;
    magic TR02 because aliased_io is non-empty; reserved byte 0 = 1."""
    def layout(sections):
        meta = {"io_bindings": bindings,
                "aliased_io": [{"output": output, "input": input, "kind": "kv_cache_update"}],
                "hardware_compatible": False, "device_id": 0, "serialized_metadata": "",
                "target_platform": "linux_x86_64", "sections": sections}
        text = json.dumps(meta, separators=(",", ":")).encode()
        engine_off = (32 + len(text) + 15) // 16 * 16
        onnx_off = (engine_off + len(engine) + 15) // 16 * 16
        return text, engine_off, onnx_off

    text, engine_off, onnx_off = layout([{"name": "onnx", "offset": 0, "size": len(onnx)}])
    for _ in range(4):  # the offset's digits change the metadata's length
        text, engine_off, new_off = layout([{"name": "onnx", "offset": onnx_off,
                                             "size": len(onnx)}])
        if new_off == onnx_off:
            break
        onnx_off = new_off
    header = struct.pack("<4sIIIQ8s", b"TR02", 32, len(text), engine_off, len(engine),
                         b"\x01" + b"\0" * 7)
    out = header + text
    out += b"\0" * (engine_off - len(out)) + engine
    return out + b"\0" * (onnx_off - len(out)) + onnx


def _arg(keep, array: np.ndarray, is_input: bool, dtype: int):
    shape = array.shape
    sizes = (ctypes.c_int32 * max(1, len(shape)))(*shape)
    order = (ctypes.c_uint8 * max(1, len(shape)))(*range(len(shape)))
    keep += [array, sizes, order]
    a = abi.EtrtArg()
    a.struct_size, a.kind, a.is_input, a.dtype = ctypes.sizeof(a), abi.ETRT_ARG_TENSOR, \
        int(is_input), dtype
    a.data, a.nbytes, a.ndim = array.ctypes.data, array.nbytes, len(shape)
    a.sizes = ctypes.cast(sizes, ctypes.POINTER(ctypes.c_int32))
    a.dim_order = ctypes.cast(order, ctypes.POINTER(ctypes.c_uint8))
    return a


def test_tr02_blob_loads_and_its_cache_survives_calls():
    blob = read_blob(_tr02_blob(b"\x7fplan" * 8, _onnx()))
    assert blob.aliased_io[0]["kind"] == "kv_cache_update" and blob.onnx is not None
    executor = OnnxRuntimeExecutor(blob)
    assert executor.aliases == [(0, 0)]
    keep: list = []
    cache = np.zeros(CACHE, np.float32)
    cache_out, total = np.zeros(CACHE, np.float32), np.zeros((), np.float32)
    want = np.zeros(CACHE, np.float32)
    for pos in range(3):
        update = np.full((1, 2, 1, 4), pos + 1.0, np.float32)
        want[:, :, pos:pos + 1] = update
        args = (abi.EtrtArg * 5)(_arg(keep, cache, True, 6), _arg(keep, update, True, 6),
                                 _arg(keep, np.array([pos], np.int64), True, 4),
                                 _arg(keep, cache_out, False, 6), _arg(keep, total, False, 6))
        executor.execute(args, 5)
        assert np.array_equal(cache, want)       # the caller's cache: updated
        assert np.array_equal(cache_out, want)   # and the aliased output
        assert float(total) == want.sum()
    executor.close()


class _KV(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(CACHE))

    def forward(self, update, pos):
        self.cache.index_copy_(2, pos, update)
        return self.cache.sum()


def _caller_program():
    from executorch.exir import to_edge_transform_and_lower

    from executorch_tensorrt.aot.partition.partitioner import TensorRTPartitioner

    ep = torch.export.export(_KV().eval(), (torch.ones(1, 2, 1, 4), torch.tensor([0])))
    return to_edge_transform_and_lower(
        ep, partitioner=[TensorRTPartitioner(progress=None, state="caller")]).to_executorch()


def test_caller_owned_cache_is_written_as_tr02(allow_fallback):
    """state="caller" (Torch-TensorRT's layout): our own blob is TR02, with the cache
    pair in aliased_io and a KV_CACHE_UPDATE layer the alias comes from."""
    from executorch.runtime import Runtime

    from executorch_tensorrt.tensorrt.engine_builder import parse_network
    from executorch_tensorrt.tensorrt.flavor import load_tensorrt

    program = _caller_program()
    data = bytes(program.executorch_program.backend_delegate_data[0].data)
    blob = read_blob(data)
    assert data[:4] == b"TR02" and len(blob.aliased_io) == 1
    pair = blob.aliased_io[0]
    names = [b["name"] for b in blob.io_bindings]
    assert pair["kind"] == "kv_cache_update" and names.index(pair["input"]) == 0
    _b, network, _p, _l = parse_network(load_tensorrt(), blob.onnx)
    assert any("KV_CACHE_UPDATE" in str(network.get_layer(i).type)
               for i in range(network.num_layers))
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    want = torch.zeros(CACHE)
    for pos in range(4):
        update = torch.full((1, 2, 1, 4), pos + 1.0)
        want[:, :, pos:pos + 1] = update
        assert float(method.execute([update, torch.tensor([pos])])[0]) == float(want.sum())


def test_tr02_blob_in_a_program_loads_and_its_state_survives_calls(allow_fallback):
    """A program laid out as Torch-TensorRT's partitioner lays it out (the cache
    stays with ExecuTorch: a delegate input and output, copied back by copy_;
    state="caller" here), with its delegate replaced by a TR02 blob."""
    from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary
    from executorch.runtime import Runtime

    program = _caller_program()
    ours = read_blob(program.executorch_program.backend_delegate_data[0].data)
    cache_in, cache_out = ours.io_bindings[0]["name"], ours.io_bindings[3]["name"]
    assert ours.io_bindings[0]["shape"] == ours.io_bindings[3]["shape"] == CACHE
    pte = deserialize_pte_binary(bytes(program.buffer))
    pte.program.backend_delegate_data[0].data = _tr02_blob(
        b"\x7fplan" * 8, ours.onnx, ours.io_bindings, cache_out, cache_in)
    method = Runtime.get().load_program(bytes(serialize_pte_binary(pte))).load_method("forward")
    want = torch.zeros(CACHE)
    for pos in range(4):
        update = torch.full((1, 2, 1, 4), pos + 1.0)
        want[:, :, pos:pos + 1] = update
        assert float(method.execute([update, torch.tensor([pos])])[0]) == float(want.sum())


def test_an_ordinary_input_is_never_aliased(allow_fallback):
    """The same cache write on a plain input (not a buffer): no aliased_io, so the
    caller's tensor is not overwritten."""
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    from executorch_tensorrt.aot.partition.partitioner import TensorRTPartitioner

    class Write(torch.nn.Module):
        def forward(self, cache, update, pos):
            return cache.index_copy(2, pos, update)

    args = (torch.zeros(CACHE), torch.ones(1, 2, 1, 4), torch.tensor([1]))
    program = to_edge_transform_and_lower(
        torch.export.export(Write(), args),
        partitioner=[TensorRTPartitioner(progress=None, state="caller")]).to_executorch()
    data = bytes(program.executorch_program.backend_delegate_data[0].data)
    assert data[:4] == b"TR01" and not read_blob(data).aliased_io
    cache = torch.zeros(CACHE)
    out = Runtime.get().load_program(program.buffer).load_method("forward").execute(
        [cache, torch.ones(1, 2, 1, 4), torch.tensor([1])])[0]
    assert float(out.sum()) == 8 and float(cache.abs().sum()) == 0
