import numpy as np, onnx, tensorrt_rtx as trt, time
from onnx import helper, TensorProto
N = 512
W = np.random.rand(N, N).astype(np.float32)
t = onnx.TensorProto(); t.name = "W"; t.data_type = TensorProto.FLOAT; t.dims.extend([N, N]); t.data_location = TensorProto.EXTERNAL
for k, v in (("location", "named_data"), ("offset", "0"), ("length", str(W.nbytes))):
    e = t.external_data.add(); e.key = k; e.value = v
g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, N])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, N])], [t])
mb = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
logger = trt.Logger(trt.Logger.WARNING)
for flags in ([], [trt.BuilderFlag.STRIP_PLAN], [trt.BuilderFlag.STRIP_PLAN, trt.BuilderFlag.REFIT_IDENTICAL], [trt.BuilderFlag.REFIT]):
    b = trt.Builder(logger); net = b.create_network(0); p = trt.OnnxParser(net, logger)
    assert p.load_model_proto(mb), [p.get_error(i).desc() for i in range(p.num_errors)]
    ok = p.load_initializer("W", W.ctypes.data, W.nbytes)   # pointer into caller memory, no copy into the model
    assert ok and p.parse_model_proto(), [p.get_error(i).desc() for i in range(p.num_errors)]
    cfg = b.create_builder_config()
    for f in flags: cfg.set_flag(f)
    t0 = time.time(); eng = b.build_serialized_network(net, cfg)
    print([f.name for f in flags] or ["(none)"], "engine bytes:", eng.nbytes, "build s: %.2f" % (time.time() - t0), "weights bytes:", W.nbytes)
