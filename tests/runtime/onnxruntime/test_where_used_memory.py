"""Cast where used gives the fp32 values back after each call: a session
over weights cast where used runs without onnxruntime's arena, which would
keep the largest cast of each call (an 8B-shaped LLM head's: 2.1 GB), and a
big MatMul weight is cast in column blocks, so no call holds its whole cast.
In a child process, with a 256 MiB fp16 weight (its cast: 512 MiB): resident
anonymous memory after two calls against before them, and the peak."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/runtime"]
import numpy as np
import named_data_programs as nd
from proc_status import reset_peak, status
from test_named_data_executors import run  # reads the shapes below when it runs
from executorch_tensorrt.blob import read_blob
from executorch_tensorrt.runtime.named_data import InMemoryNamedData
from executorch_tensorrt.runtime.onnxruntime.executor import OnnxRuntimeExecutor
nd.X_SHAPE, nd.W_SHAPE = (2, 8192), (8192, 16384)

w, b = nd.weights("float16")
executor = OnnxRuntimeExecutor(read_blob(nd.named_blob(w, b, "float16")),
                               InMemoryNamedData({nd.key_of(w.tobytes()): w}))
x = np.random.default_rng(1).standard_normal(nd.X_SHAPE).astype(np.float32)
before, rss = status("RssAnon"), status("VmRSS")
reset_peak()
y = run(executor, x)
y = run(executor, x)
kept, peak = status("RssAnon") - before, status("VmHWM") - rss
ref = x @ w.astype(np.float32) + b.astype(np.float32)
print(json.dumps({"where_used": sorted(executor.weights.where_used), "kept": kept, "peak": peak,
                  "cast_bytes": w.size * 4, "max_diff": float(np.abs(y - ref).max())}))
"""


def test_the_casts_of_weights_cast_where_used_are_not_kept_after_a_call():
    env = {**os.environ, "EXECUTORCH_TENSORRT_ORT_UPCAST": "where-used"}
    run = subprocess.run([sys.executable, "-c", CHILD, str(TESTS)], capture_output=True,
                         text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    measured = json.loads(run.stdout.strip().splitlines()[-1])
    assert measured["where_used"] == ["W"]
    assert measured["max_diff"] < 1e-2  # fp32 products of the fp16 values
    assert measured["kept"] < 0.25 * measured["cast_bytes"], measured
    # Cast in column blocks of CAST_BLOCK_BYTES (128 MiB: 4 blocks): a block's
    # fp16 slice and fp32 cast, and the next one's slice at most (0.72x
    # measured), never the whole cast (1.0x).
    assert measured["peak"] < 0.85 * measured["cast_bytes"], measured


CHAINED = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np, onnxruntime as ort
from proc_status import reset_peak, status
from onnx import TensorProto, helper
from executorch_tensorrt.runtime.onnxruntime.upcast import upcast_to_fp32

K, LAYERS = 4096, 8   # 8 bf16 weights used one after another; each cast is 64 MiB
nodes, x = [], "x"
for i in range(LAYERS):
    nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [f"h{i}"]))
    x = f"h{i}"
weights = [helper.make_tensor(f"W{i}", TensorProto.BFLOAT16, [K, K], b"\0\0" * (K * K), raw=True)
           for i in range(LAYERS)]
graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, K])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, K])], weights)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
rewritten = upcast_to_fp32(model.SerializeToString(),
                           where_used=frozenset(f"W{i}" for i in range(LAYERS)))
options = ort.SessionOptions()  # as named_weights.py configures these sessions
options.enable_cpu_mem_arena = False
options.enable_mem_pattern = False
session = ort.InferenceSession(rewritten, options, providers=["CPUExecutionProvider"])
feed = {f"W{i}": ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
    np.zeros((K, K), np.uint16), TensorProto.BFLOAT16) for i in range(LAYERS)}

rss = status("VmRSS")
reset_peak()
session.run(None, {"x": np.ones((2, K), np.float32), **feed})
print(json.dumps({"peak": status("VmHWM") - rss, "cast_bytes": K * K * 4}))
"""


def test_casts_of_weights_used_one_after_another_are_not_alive_together():
    """onnxruntime runs a node as soon as its inputs exist: ungated, all eight
    casts (inputs only) ran first and peaked at 8 casts; gated on the value
    before each use, one cast at a time (where_used.py `_gate`)."""
    run = subprocess.run([sys.executable, "-c", CHAINED, str(TESTS)], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    measured = json.loads(run.stdout.strip().splitlines()[-1])
    assert measured["peak"] < 2.5 * measured["cast_bytes"], measured
