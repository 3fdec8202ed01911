import numpy as np, onnx, onnxruntime as ort, os, resource
from onnx import helper, TensorProto, numpy_helper
W = np.random.rand(256, 256).astype(np.float32)
# initializer declared with EXTERNAL data location but no file: weightless graph
t = onnx.TensorProto(); t.name = "W"; t.data_type = TensorProto.FLOAT; t.dims.extend(W.shape)
t.data_location = TensorProto.EXTERNAL
for k, v in (("location", "named_data"), ("offset", "0"), ("length", str(W.nbytes))):
    e = t.external_data.add(); e.key = k; e.value = v
g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])], [t])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
b = m.SerializeToString(); print("weightless model bytes:", len(b))
x = np.random.rand(1, 256).astype(np.float32)
backing = bytearray(W.tobytes())            # stands in for a FreeableBuffer from the NamedDataMap
view = np.frombuffer(backing, dtype=np.float32).reshape(256, 256)  # zero-copy view
for prepack in ("0", "1"):
    so = ort.SessionOptions(); so.add_session_config_entry("session.disable_prepacking", prepack)
    ov = ort.OrtValue.ortvalue_from_numpy(view)   # CPU: no copy
    print("OrtValue shares memory:", ov.data_ptr() == view.ctypes.data)
    so.add_external_initializers(["W"], [ov])
    s = ort.InferenceSession(b, so, providers=["CPUExecutionProvider"])
    y1 = s.run(None, {"x": x})[0]
    print("disable_prepacking", prepack, "matches:", np.allclose(y1, x @ W, rtol=1e-5))
    view *= 2.0   # mutate backing memory after session creation
    y2 = s.run(None, {"x": x})[0]
    print("  after doubling backing buffer, output doubled (=> zero-copy):", np.allclose(y2, 2 * y1, rtol=1e-5))
    view /= 2.0
# files-in-memory variant
so = ort.SessionOptions()
so.add_external_initializers_from_files_in_memory(["named_data"], [memoryview(backing)], [len(backing)])
s = ort.InferenceSession(b, so, providers=["CPUExecutionProvider"])
y3 = s.run(None, {"x": x})[0]; view *= 2.0; y4 = s.run(None, {"x": x})[0]; view /= 2.0
print("files_in_memory matches:", np.allclose(y3, x @ W, rtol=1e-5), "zero-copy:", np.allclose(y4, 2 * y3, rtol=1e-5))
