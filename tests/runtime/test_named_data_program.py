"""Programs whose TensorRT weights are in ExecuTorch's named data, run through
the real runtime (executorch.runtime -> adapter -> get_named_data -> the
onnxruntime fallback): weights in a .ptd or inside the .pte; zero-copy all
the way from the mapped file (the .ptd is changed on disk after load and the
next call sees it); a missing .ptd fails with the key and the remedy; a
truncated or foreign .ptd gives a clean error in a child process, never a
signal."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import named_data_programs as nd
from helpers import FALLBACK, child_env
from executorch_tensorrt.runtime.onnxruntime import named_weights

W, B = nd.weights()
KEY = nd.key_of(W.tobytes())
X = torch.arange(8, dtype=torch.float32).reshape(nd.X_SHAPE) / 8


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    out = tmp_path_factory.mktemp("named_data")
    blob = nd.named_blob(W, B)
    external = nd.write_program(out / "external.pte", blob, {KEY: W.tobytes()}, external=True)
    inside = nd.write_program(out / "inside.pte", blob, {KEY: W.tobytes()}, external=False)
    w2, _ = nd.weights(seed=1)
    other = nd.write_program(out / "other.pte", nd.named_blob(w2, B),
                             {nd.key_of(w2.tobytes()): w2.tobytes()}, external=True)
    return {"external": external, "inside": inside, "other": other}


def load(pte, ptd=None):
    import executorch_tensorrt  # noqa: F401 - registers TensorRTBackend
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(str(pte), **({"data_path": str(ptd)} if ptd else {}))
    return program.load_method("forward")


def expected(w) -> np.ndarray:
    return X.numpy() @ w + B


def test_weights_in_a_ptd_are_read_in_place(programs, allow_fallback, tmp_path, monkeypatch):
    # A partition over the prepacking limit (here: any); small ones get a packed copy.
    monkeypatch.setattr(named_weights, "PREPACK_LIMIT", 0)
    pte, ptd = programs["external"]
    assert ptd.name == "external.ptd" and W.tobytes() not in pte.read_bytes()
    copy = tmp_path / "external.ptd"  # changed below: keep the module's file intact
    copy.write_bytes(ptd.read_bytes())
    method = load(pte, copy)
    np.testing.assert_allclose(method.execute([X])[0].numpy(), expected(W), rtol=1e-6)
    # Change the weight's bytes in the file ExecuTorch mapped: a copy anywhere
    # on the way (adapter, executor, onnxruntime) would keep the old output.
    data = copy.read_bytes()
    at = data.find(W.tobytes())
    assert at > 0 and data.count(W.tobytes()) == 1
    with open(copy, "r+b") as f:
        f.seek(at)
        f.write((W * 2).tobytes())
    np.testing.assert_allclose(method.execute([X])[0].numpy(), expected(W * 2), rtol=1e-6)


def test_weights_inside_the_pte_run(programs, allow_fallback):
    pte, ptd = programs["inside"]
    assert ptd is None and W.tobytes() in pte.read_bytes()
    np.testing.assert_allclose(load(pte).execute([X])[0].numpy(), expected(W), rtol=1e-6)


def test_missing_ptd_names_the_key_and_what_to_pass(programs, allow_fallback):
    import executorch_tensorrt

    pte, _ = programs["external"]
    with pytest.raises(RuntimeError, match="0x:20"):  # NotFound
        load(pte)
    cause = executorch_tensorrt.last_error()
    assert f"weight 'W'" in cause and KEY in cause and "pass the .ptd" in cause, cause
    assert "data_path=" in cause and "--data" in cause


def test_ptd_of_another_program_names_the_key(programs, allow_fallback):
    import executorch_tensorrt

    pte, _ = programs["external"]
    with pytest.raises(RuntimeError, match="0x:20"):
        load(pte, programs["other"][1])
    cause = executorch_tensorrt.last_error()
    assert f"has no key '{KEY}'" in cause and "belongs to another program" in cause, cause


_CHILD = r"""
import json, sys, torch
import executorch_tensorrt
from executorch.runtime import Runtime
pte, cases = sys.argv[1], json.loads(sys.argv[2])
for name, path in cases:
    print("START", name, flush=True)
    try:
        program = Runtime.get().load_program(pte, data_path=path)
        program.load_method("forward").execute([torch.ones(2, 4)])
        print("RESULT", json.dumps([name, "ran"]), flush=True)
    except Exception as e:
        print("RESULT", json.dumps([name, "error: " + str(e)[:200]]), flush=True)
"""


def test_truncated_or_foreign_ptd_never_crashes(programs, tmp_path):
    pte, ptd = programs["external"]
    data = ptd.read_bytes()
    at = data.find(W.tobytes())
    cases = []
    for cut in sorted({0, 4, 8, 16, 31, 32, 48, 63, 64, at - 1, at, at + 10, len(data) - 1}):
        path = tmp_path / f"cut{cut}.ptd"
        path.write_bytes(data[:cut])
        cases.append((f"truncated at {cut}", str(path)))
    foreign = {"random bytes": np.random.default_rng(0).bytes(len(data)),
               "the .pte itself": pte.read_bytes(),
               "header only, body zeroed": data[:64] + bytes(len(data) - 64)}
    for name, content in foreign.items():
        path = tmp_path / f"{len(cases)}.ptd"
        path.write_bytes(content)
        cases.append((name, str(path)))
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(pte), json.dumps(cases)],
                          capture_output=True, text=True, timeout=300, env=child_env(**FALLBACK))
    started = [l.split(" ", 1)[1] for l in proc.stdout.splitlines() if l.startswith("START ")]
    assert proc.returncode == 0, (
        f"the child died (return code {proc.returncode}) loading {started[-1]!r}\n"
        f"{proc.stdout}\n{proc.stderr[-3000:]}")
    results = dict(json.loads(l[len("RESULT "):]) for l in proc.stdout.splitlines()
                   if l.startswith("RESULT "))
    assert len(results) == len(cases) and all(r.startswith("error") for r in results.values()), (
        results)


def test_weights_sharing_a_key_share_one_buffer(tmp_path, allow_fallback):
    """Two initializers with equal bytes share one named-data key (the key is
    their digest): the program stores them once, and the adapter hands both
    the same mapped bytes."""
    from onnx import TensorProto, helper, numpy_helper

    from executorch_tensorrt.blob import read_blob, write_blob
    from executorch_tensorrt.runtime import callbacks

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(nd.X_SHAPE))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [nd.X_SHAPE[0], nd.W_SHAPE[1]])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W1"], ["a"]), helper.make_node("MatMul", ["x", "W2"],
                                                                          ["b"]),
         helper.make_node("Add", ["a", "b"], ["ab"]), helper.make_node("Add", ["ab", "B"], ["y"])],
        "shared", [x], [y],
        initializer=[nd.sentinel_initializer("W1", "float32", W.shape),
                     nd.sentinel_initializer("W2", "float32", W.shape),
                     numpy_helper.from_array(B, "B")])
    onnx_bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                   ir_version=8).SerializeToString()
    base = read_blob(nd.named_blob(W, B)).metadata
    meta = dict(base, weights=[nd.weight_entry(W, name="W1"), nd.weight_entry(W, name="W2")])
    pte, ptd = nd.write_program(tmp_path / "shared.pte", write_blob(b"", meta, onnx=onnx_bytes),
                                {KEY: W.tobytes()}, external=True)
    assert ptd.read_bytes().count(W.tobytes()) == 1
    method = load(pte, ptd)
    np.testing.assert_allclose(method.execute([X])[0].numpy(), X.numpy() @ (2 * W) + B,
                               rtol=1e-5)
    executors = [e for e in callbacks._executors.handles.values()  # noqa: SLF001
                 if e.kind == "onnxruntime" and e.weights is not None
                 and [w.name for w in e.weights._weights] == ["W1", "W2"]]  # noqa: SLF001
    (executor,) = executors
    w1, w2 = executor.weights._weights  # noqa: SLF001
    assert w1.address == w2.address and bytes(w1.view) == W.tobytes()
