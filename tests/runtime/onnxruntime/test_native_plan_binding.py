"""The native plan's OrtIoBinding (issue 23, part 3): a static any-address plan
runs onnxruntime's RunWithBinding over one binding made when the adapter
adopts the plan, rebinding an argument only when its address changes
(native/src/native_plan.cpp adopt_io_binding, bind).

Real programs through the real ExecuTorch runtime and onnxruntime. The only
instrumentation is a pass-through counter in front of onnxruntime's
RunWithBinding and BindInput (a C-callable wrapper handed to the plan in
place of the real function, which it then calls)."""
from __future__ import annotations

import ctypes

import pytest
import torch

import executorch_tensorrt
from executorch_tensorrt.examples.models import example
from executorch_tensorrt.runtime.native_plan import IO_BINDING_ENV
from executorch_tensorrt.runtime.onnxruntime.capi import OrtApi

PLAN_ENV = "EXECUTORCH_TENSORRT_NATIVE_PLAN"
_STATUS_3 = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_BIND = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)


@pytest.fixture
def ort_counts(monkeypatch):
    """{"run_with_binding": n, "bind_input": n}: the calls the plans made
    (plans built after this fixture point at the counting wrappers)."""
    api = OrtApi.get()
    counts = {"run_with_binding": 0, "bind_input": 0}
    real_run, real_bind = api.RunWithBinding, api.BindInput

    def run(session, options, binding):
        counts["run_with_binding"] += 1
        return real_run(session, options, binding)

    def bind(binding, name, value):
        counts["bind_input"] += 1
        return real_bind(binding, name, value)

    wrappers = (_STATUS_3(run), _BIND(bind))  # alive for the test
    monkeypatch.setattr(api, "RunWithBinding", wrappers[0])
    monkeypatch.setattr(api, "BindInput", wrappers[1])
    return counts


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """The add example twice: memory-planned inputs (one address for every
    call) and caller-owned inputs (each new tensor is a new address)."""
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, \
        to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass

    folder = tmp_path_factory.mktemp("binding")
    model, inputs = example("add")
    planned = executorch_tensorrt.export(model, inputs, folder / "planned.pte", progress=None)
    edge = to_edge_transform_and_lower(
        torch.export.export(model, inputs),
        partitioner=[executorch_tensorrt.TensorRTPartitioner(progress=None)],
        compile_config=EdgeCompileConfig(_check_ir_validity=False))
    program = edge.to_executorch(ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False)))
    (folder / "user_inputs.pte").write_bytes(program.buffer)
    return model, inputs, planned, folder / "user_inputs.pte"


def _load(path):
    from executorch.runtime import Runtime

    return Runtime.get().load_program(path).load_method("forward")


def test_the_bound_plan_gives_the_run_and_python_paths_outputs(programs, allow_fallback,
                                                               monkeypatch, ort_counts,
                                                               python_calls):
    """One program loaded three ways: RunWithBinding (the default), Run
    (ORT_IO_BINDING=0) and the Python executor (NATIVE_PLAN=0). Bit-identical
    outputs; the bound method ran every call with RunWithBinding and bound its
    input once (memory-planned: the address never changes)."""
    model, inputs, planned, _ = programs
    bound = _load(planned)
    monkeypatch.setenv(IO_BINDING_ENV, "0")
    run = _load(planned)
    monkeypatch.setenv(PLAN_ENV, "0")
    python = _load(planned)
    monkeypatch.delenv(PLAN_ENV)
    monkeypatch.delenv(IO_BINDING_ENV)
    torch.manual_seed(5)
    batches = [[torch.randn_like(inputs[0])] for _ in range(4)]
    for batch in batches:
        got = bound.execute(batch)
        assert torch.equal(got[0], run.execute(batch)[0])
        assert torch.equal(got[0], python.execute(batch)[0])
        assert torch.allclose(got[0], model(*batch), atol=1e-6)
    assert ort_counts["run_with_binding"] == len(batches), "the bound plan did not use its binding"
    assert ort_counts["bind_input"] == 1, "an unchanged address was bound again"
    assert sum(python_calls.values()) == len(batches), "only the NATIVE_PLAN=0 method enters Python"


def test_a_new_address_after_reuse_rebinds(programs, allow_fallback, ort_counts, python_calls):
    """Caller-owned inputs: the binding is reused while the address stays, and
    rebound when it changes; each output is the model's for the tensor passed
    in that call (a stale binding would read the previous tensor's memory)."""
    model, (x,), _, user_inputs = programs
    method = _load(user_inputs)
    y = x + 5
    order = [x, x, y, y, x, y]
    outputs = [method.execute([t])[0].clone() for t in order]
    assert sum(python_calls.values()) == 0
    for k, (got, t) in enumerate(zip(outputs, order)):
        assert torch.allclose(got, model(t), atol=1e-6), f"call {k} read another tensor"
    assert ort_counts["run_with_binding"] == len(order)
    assert ort_counts["bind_input"] == 4, "expected a bind per address change (x, y, x, y)"
