import onnx, numpy as np, onnxruntime as ort
from onnx import helper, TensorProto
g = helper.make_graph([helper.make_node("TensorScatter", ["past", "upd", "widx"], ["present"], axis=-2),
                       helper.make_node("ReduceSum", ["present"], ["y"], keepdims=0)], "g",
  [helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, 2, 32, 8]), helper.make_tensor_value_info("upd", TensorProto.FLOAT, [1, 2, None, 8]),
   helper.make_tensor_value_info("widx", TensorProto.INT64, [1])],
  [helper.make_tensor_value_info("present", TensorProto.FLOAT, [1, 2, 32, 8]), helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
s = ort.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 24)]).SerializeToString(), providers=["CPUExecutionProvider"])
state = np.zeros((1, 2, 32, 8), np.float32); ref = state.copy(); ov = ort.OrtValue.ortvalue_from_numpy(state)
for S, p0 in [(8, 0), (1, 8), (1, 9), (3, 10)]:
    upd = np.random.rand(1, 2, S, 8).astype(np.float32); ref[:, :, p0:p0 + S, :] = upd
    io = s.io_binding(); io.bind_ortvalue_input("past", ov); io.bind_cpu_input("upd", upd); io.bind_cpu_input("widx", np.array([p0], np.int64))
    io.bind_ortvalue_output("present", ov); io.bind_output("y"); s.run_with_iobinding(io)
    print(f"S={S} pos={p0}: in-place state == ref:", np.array_equal(state, ref), " y ok:", np.isclose(io.copy_outputs_to_cpu()[1], ref.sum()))
# out of range write
try:
    io = s.io_binding(); io.bind_ortvalue_input("past", ov); io.bind_cpu_input("upd", np.ones((1, 2, 4, 8), np.float32)); io.bind_cpu_input("widx", np.array([30], np.int64))
    io.bind_ortvalue_output("present", ov); io.bind_output("y"); s.run_with_iobinding(io); print("OOB write (pos 30 + 4 > 32): no error raised by ORT")
except Exception as e: print("OOB write rejected by ORT:", str(e)[:160])
