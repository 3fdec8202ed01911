import onnx, numpy as np, tensorrt_rtx as trt
from onnx import helper, TensorProto
print("onnx", onnx.__version__, "TensorScatter schema:", onnx.defs.get_schema("TensorScatter").since_version)
# TensorScatter(past_cache [B,H,S,D], update [B,H,s,D], write_indices [B]) -> present_cache, axis=-2
g = helper.make_graph([helper.make_node("TensorScatter", ["past", "upd", "widx"], ["present"], axis=-2),
                       helper.make_node("ReduceSum", ["present"], ["y"], keepdims=0)], "g",
  [helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, 2, 32, 8]), helper.make_tensor_value_info("upd", TensorProto.FLOAT, [1, 2, 1, 8]),
   helper.make_tensor_value_info("widx", TensorProto.INT64, [1])],
  [helper.make_tensor_value_info("present", TensorProto.FLOAT, [1, 2, 32, 8]), helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 24)])
onnx.checker.check_model(m)
l = trt.Logger(trt.Logger.WARNING); b = trt.Builder(l); n = b.create_network(0); p = trt.OnnxParser(n, l)
ok = p.parse(m.SerializeToString()); print("parse:", ok, [p.get_error(i).desc() for i in range(p.num_errors)])
for i in range(n.num_layers):
    L = n.get_layer(i); print("  layer", L.type, L.name)
cfg = b.create_builder_config()
eng = b.build_serialized_network(n, cfg); print("engine built:", eng is not None and eng.nbytes)
import onnxruntime as ort
try:
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]); print("onnxruntime runs TensorScatter: yes")
except Exception as e: print("onnxruntime TensorScatter:", str(e)[:200])
