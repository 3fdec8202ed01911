import numpy as np, onnx, onnxruntime as ort, tempfile, os
from onnx import helper, TensorProto
W = np.random.rand(256, 256).astype(np.float32); x = np.random.rand(1, 256).astype(np.float32)
backing = bytearray(W.tobytes()); view = np.frombuffer(backing, dtype=np.float32).reshape(256, 256)
def model(loc):
    t = onnx.TensorProto(); t.name = "W"; t.data_type = TensorProto.FLOAT; t.dims.extend([256, 256]); t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", loc), ("offset", "0"), ("length", str(W.nbytes))):
        e = t.external_data.add(); e.key = k; e.value = v
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [t])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
d = tempfile.mkdtemp()
for how in ("bytes",):
    for combo in ("both",):
        so = ort.SessionOptions(); so.add_session_config_entry("session.disable_prepacking", "0")
        ov = ort.OrtValue.ortvalue_from_numpy(view)
        so.add_initializer("W", ov)
        if combo == "both": so.add_external_initializers(["W"], [ov])
        m = model("w.bin")
        try:
            if how == "bytes": s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
            else:
                p = os.path.join(d, "m.onnx"); open(p, "wb").write(m.SerializeToString())
                s = ort.InferenceSession(p, so, providers=["CPUExecutionProvider"])
            y1 = s.run(None, {"x": x})[0]; view *= 2; y2 = s.run(None, {"x": x})[0]; view /= 2
            print(how, combo, "correct", np.allclose(y1, x @ W, rtol=1e-5), "zero-copy", np.allclose(y2, 2 * y1, rtol=1e-5))
        except Exception as e: print(how, combo, "ERR", str(e)[:160])
