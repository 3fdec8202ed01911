import numpy as np, onnxruntime as ort
from onnx import helper, TensorProto
# cache [1,2,8,4]; update [1,2,S,4] at positions pos (S,) on axis 2 -> new_cache; y = sum(new_cache)
# ScatterND form as torch.onnx emits for index_put: indices [S,1] after transposing axis 2 to front -- use ScatterElements-free simple variant:
# new_cache = ScatterND(cache_t, pos[:,None], upd_t) where cache_t = cache transposed so axis 2 is first.
nodes = [
  helper.make_node("Transpose", ["cache"], ["ct"], perm=[2, 0, 1, 3]),
  helper.make_node("Transpose", ["upd"], ["ut"], perm=[2, 0, 1, 3]),
  helper.make_node("Unsqueeze", ["pos", "ax"], ["idx"]),
  helper.make_node("ScatterND", ["ct", "idx", "ut"], ["nt"]),
  helper.make_node("Transpose", ["nt"], ["new_cache"], perm=[1, 2, 0, 3]),
  helper.make_node("ReduceSum", ["new_cache"], ["y"], keepdims=0),
]
g = helper.make_graph(nodes, "g",
  [helper.make_tensor_value_info("cache", TensorProto.FLOAT, [1, 2, 8, 4]), helper.make_tensor_value_info("upd", TensorProto.FLOAT, [1, 2, None, 4]),
   helper.make_tensor_value_info("pos", TensorProto.INT64, [None])],
  [helper.make_tensor_value_info("new_cache", TensorProto.FLOAT, [1, 2, 8, 4]), helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
  [helper.make_tensor("ax", TensorProto.INT64, [1], [1])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
state = np.zeros((1, 2, 8, 4), np.float32); ref = state.copy()
ov = ort.OrtValue.ortvalue_from_numpy(state)
ok = True
for step, (S, p0) in enumerate([(3, 0), (1, 3), (1, 4), (2, 5)]):
    upd = np.random.rand(1, 2, S, 4).astype(np.float32); pos = np.arange(p0, p0 + S, dtype=np.int64)
    ref[:, :, pos, :] = upd
    io = s.io_binding(); io.bind_ortvalue_input("cache", ov); io.bind_cpu_input("upd", upd); io.bind_cpu_input("pos", pos)
    io.bind_ortvalue_output("new_cache", ov); io.bind_output("y")
    s.run_with_iobinding(io)
    y = io.copy_outputs_to_cpu()[1]
    ok &= np.array_equal(state, ref) and np.isclose(y, ref.sum())
    print("step", step, "state updated in place:", np.array_equal(state, ref), "y ok:", np.isclose(y, ref.sum()))
