import numpy as np, onnx, onnxruntime as ort
from onnx import helper, TensorProto
exec(open("exp_ort.py").read().split("x = np.random")[0])
x = np.random.rand(1, 256).astype(np.float32)
backing = bytearray(W.tobytes()); view = np.frombuffer(backing, dtype=np.float32).reshape(256, 256)
for opt in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC):
  for prepack in ("0", "1"):
    for api in ("add_external_initializers", "add_initializer"):
        so = ort.SessionOptions(); so.graph_optimization_level = opt
        so.add_session_config_entry("session.disable_prepacking", prepack)
        ov = ort.OrtValue.ortvalue_from_numpy(view)
        if api == "add_initializer": so.add_initializer("W", ov)
        else: so.add_external_initializers(["W"], [ov])
        try:
            s = ort.InferenceSession(b, so, providers=["CPUExecutionProvider"])
        except Exception as e:
            print(opt, prepack, api, "ERR", str(e)[:150]); continue
        y1 = s.run(None, {"x": x})[0]; view *= 2.0; y2 = s.run(None, {"x": x})[0]; view /= 2.0
        print(opt.name, "disable_prepacking=" + prepack, api, "ok", np.allclose(y1, x @ W, rtol=1e-5), "zero-copy", np.allclose(y2, 2 * y1, rtol=1e-5))
