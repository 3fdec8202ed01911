import numpy as np, onnx, onnxruntime as ort
from onnx import helper, TensorProto, numpy_helper
W = np.random.rand(256, 256).astype(np.float32); x = np.random.rand(1, 256).astype(np.float32)
backing = bytearray(W.tobytes()); view = np.frombuffer(backing, dtype=np.float32).reshape(256, 256)
def model(op, w_as):
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])]
    inits = []
    if w_as == "input": inputs.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [256, 256]))
    elif w_as == "init_zeros": inits.append(numpy_helper.from_array(np.zeros((256, 256), np.float32), "W"))
    else:
        t = onnx.TensorProto(); t.name = "W"; t.data_type = TensorProto.FLOAT; t.dims.extend([256, 256]); t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "named_data"), ("offset", "0"), ("length", str(W.nbytes))):
            e = t.external_data.add(); e.key = k; e.value = v
        inits.append(t)
    g = helper.make_graph([helper.make_node(op, ["x", "W"], ["y"])], "g", inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
def ref(op, w): return x @ w if op == "MatMul" else x + w
for op in ("MatMul", "Add"):
    for w_as, api in (("external", "add_external_initializers"), ("init_zeros", "add_initializer"), ("input", "feed")):
        so = ort.SessionOptions(); so.add_session_config_entry("session.disable_prepacking", "1")
        ov = ort.OrtValue.ortvalue_from_numpy(view)
        if api == "add_initializer": so.add_initializer("W", ov)
        elif api == "add_external_initializers": so.add_external_initializers(["W"], [ov])
        s = ort.InferenceSession(model(op, w_as), so, providers=["CPUExecutionProvider"])
        feeds = {"x": x} if api != "feed" else {"x": x, "W": view}
        if api == "feed":
            io = s.io_binding(); io.bind_cpu_input("x", x); io.bind_ortvalue_input("W", ov); io.bind_output("y")
            s.run_with_iobinding(io); y1 = io.copy_outputs_to_cpu()[0]
            view *= 2; s.run_with_iobinding(io); y2 = io.copy_outputs_to_cpu()[0]; view /= 2
        else:
            y1 = s.run(None, feeds)[0]; view *= 2; y2 = s.run(None, feeds)[0]; view /= 2
        print(op, w_as, api, "correct", np.allclose(y1, ref(op, W), rtol=1e-5), "zero-copy", np.allclose(y2, ref(op, 2 * W), rtol=1e-5))
