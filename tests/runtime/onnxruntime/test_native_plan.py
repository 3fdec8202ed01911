"""The native plan: after the Python executor has checked and bound a call,
the adapter runs identical calls in C++ without entering Python
(native/src/plans/native_plan.cpp, runtime/onnxruntime/run_plan.py).

Real programs through the real ExecuTorch runtime and onnxruntime; the only
instrumentation is a pass-through wrapper around the executor's execute that
counts how often Python was entered."""
from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import executorch_tensorrt
from executorch_tensorrt.errors import ArgumentError
from executorch_tensorrt.runtime.adapter import abi
from executorch_tensorrt.runtime.onnxruntime.executor import OnnxRuntimeExecutor
from executorch_tensorrt.examples.models import example

PLAN_ENV = "EXECUTORCH_TENSORRT_NATIVE_PLAN"


@pytest.fixture
def python_calls(monkeypatch):
    """{publish_plans: number of calls that entered the Python executor}."""
    counts = {True: 0, False: 0}
    original = OnnxRuntimeExecutor.execute

    def counting(self, args, num_args=None):
        counts[self.publish_plans] += 1
        return original(self, args, num_args)

    monkeypatch.setattr(OnnxRuntimeExecutor, "execute", counting)
    return counts


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plan")
    exported = {}
    for name in ("add", "cnn", "transformer"):
        model, inputs = example(name)
        path = executorch_tensorrt.export(model, inputs, folder / f"{name}.pte", progress=None)
        exported[name] = (model, inputs, path)
    return exported


@pytest.mark.parametrize("name", ["add", "cnn", "transformer"])
def test_native_path_gives_the_python_paths_outputs(name, programs, allow_fallback,
                                                     monkeypatch, python_calls):
    """The same program loaded twice: once with plans, once with
    EXECUTORCH_TENSORRT_NATIVE_PLAN=0 (Python on every call). Bit-identical
    outputs on several inputs, and the planned method never enters Python,
    its first call included: these partitions have static shapes, so the
    executor hands the adapter a plan for any address at init (issue 19)."""
    from executorch.runtime import Runtime

    model, inputs, path = programs[name]
    native = Runtime.get().load_program(path).load_method("forward")
    monkeypatch.setenv(PLAN_ENV, "0")
    python = Runtime.get().load_program(path).load_method("forward")
    monkeypatch.delenv(PLAN_ENV)
    torch.manual_seed(3)
    batches = [tuple(torch.randn_like(x) for x in inputs) for _ in range(5)]
    first = native.execute(list(batches[0]))
    # Was: the first call entered Python once per partition. Now none does;
    # the bit-identical comparison below still guards the plan's outputs, and
    # the plan-less method shows the counter sees every Python call.
    assert python_calls[True] == 0, "the first call entered Python"
    for batch in batches:
        got, want = native.execute(list(batch)), python.execute(list(batch))
        assert all(torch.equal(a, b) for a, b in zip(got, want)), name
        with torch.no_grad():
            eager = model(*batch)
        eager = eager if isinstance(eager, (tuple, list)) else (eager,)
        assert all(torch.allclose(a, b, atol=1e-4, rtol=1e-4) for a, b in zip(got, eager))
    assert torch.equal(first[0], native.execute(list(batches[0]))[0])
    assert python_calls[True] == 0, "a planned call entered Python"
    partitions = python_calls[False] // len(batches)
    assert partitions >= 1 and python_calls[False] == partitions * len(batches)  # every call


def _user_input_program(path):
    """The add example with inputs that are NOT memory-planned: the delegate
    sees the caller's tensor memory, so each new input tensor is a new address."""
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, \
        to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass

    model, inputs = example("add")
    edge = to_edge_transform_and_lower(
        torch.export.export(model, inputs),
        partitioner=[executorch_tensorrt.TensorRTPartitioner(progress=None)],
        compile_config=EdgeCompileConfig(_check_ir_validity=False))
    program = edge.to_executorch(ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False)))
    path.write_bytes(program.buffer)
    return model, inputs


def test_a_new_input_address_runs_the_plan_over_the_new_memory(tmp_path, allow_fallback,
                                                               python_calls):
    """Was: a new input address went back to Python for a new plan. A static
    plan now binds each call's addresses itself (issue 19), so no call enters
    Python; what the old test protected (a new address never runs over the old
    address's memory) is kept by the outputs: x and y differ, and each output
    must be the model's for the tensor passed in that call."""
    from executorch.runtime import Runtime

    model, (x,) = _user_input_program(tmp_path / "user_inputs.pte")
    method = Runtime.get().load_program(tmp_path / "user_inputs.pte").load_method("forward")
    y = x + 5
    outputs = [method.execute([x]), method.execute([x])]
    outputs.append(method.execute([y]))  # another tensor: another address
    outputs.append(method.execute([y]))
    y.add_(1)  # same address, new contents: the plan reads the memory itself
    outputs.append(method.execute([y]))
    outputs.append(method.execute([x]))  # x again: rebound over x's memory
    assert python_calls[True] == 0, "a call with static shapes entered Python"
    for got, inp in zip(outputs, [x, x, y - 1, y - 1, y, x]):
        assert torch.allclose(got[0], model(inp), atol=1e-6)


# --- The executor's half of the contract, with etrt_arg structs built directly ---

def _arg(keep: list, buffer: np.ndarray, is_input: bool, dtype: int = 6, shape=(2, 3)):
    sizes = (ctypes.c_int32 * len(shape))(*shape)
    order = (ctypes.c_uint8 * len(shape))(*range(len(shape)))
    keep += [buffer, sizes, order]
    a = abi.EtrtArg()
    a.struct_size, a.kind, a.is_input, a.dtype = ctypes.sizeof(a), abi.ETRT_ARG_TENSOR, \
        int(is_input), dtype
    a.data, a.nbytes, a.ndim = buffer.ctypes.data, buffer.nbytes, len(shape)
    a.sizes = ctypes.cast(sizes, ctypes.POINTER(ctypes.c_int32))
    a.dim_order = ctypes.cast(order, ctypes.POINTER(ctypes.c_uint8))
    return a


@pytest.fixture(scope="module")
def add_blob(programs):
    from executorch.exir._serialize._program import deserialize_pte_binary

    from executorch_tensorrt.blob import read_blob

    program = deserialize_pte_binary(programs["add"][2].read_bytes()).program
    return read_blob(bytes(program.backend_delegate_data[0].data))


def test_the_plan_made_at_init_serves_any_address_and_outlives_refused_calls(add_blob):
    executor = OnnxRuntimeExecutor(add_blob)
    plan = executor.native_plan()  # before any call: static shapes, outputs in place
    assert plan is not None and plan.any_address and plan.num_args == 2
    keep: list = []
    x, y = np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32)
    args = (abi.EtrtArg * 2)(_arg(keep, x, True), _arg(keep, y, False))
    for k in range(2):  # every field of the call but its address
        sig, arg = plan.signature[k], args[k]
        assert (sig.kind, sig.dtype, sig.ndim, sig.nbytes, sig.device_type) == \
            (arg.kind, arg.dtype, arg.ndim, arg.nbytes, arg.device_type)
        assert list(sig.sizes[:2]) == [2, 3] and not sig.data
    executor.execute(args, 2)
    assert ctypes.addressof(executor.native_plan()) == ctypes.addressof(plan)
    # Calls the Python check refuses leave it in place: it does not match them.
    xi = np.ones((2, 3), np.int32)
    with pytest.raises(ArgumentError, match="dtype"):
        executor.execute((abi.EtrtArg * 2)(_arg(keep, xi, True, dtype=3), _arg(keep, y, False)), 2)
    x4 = np.ones((4, 3), np.float32)
    with pytest.raises(ArgumentError, match="shape"):
        executor.execute((abi.EtrtArg * 2)(_arg(keep, x4, True, shape=(4, 3)),
                                           _arg(keep, y, False)), 2)
    assert ctypes.addressof(executor.native_plan()) == ctypes.addressof(plan)
    executor.close()


def test_the_plan_signature_is_the_checked_call_and_a_bad_call_withdraws_it(add_blob,
                                                                            monkeypatch):
    # With per-node timings no plan is made at init (a traced call replaces the
    # session): plans then name one call's addresses.
    from executorch_tensorrt.runtime import profiling

    monkeypatch.setenv(profiling.PROFILE_NODES_ENV, "1")
    executor = OnnxRuntimeExecutor(add_blob)
    assert executor.native_plan() is None
    keep: list = []
    x, y = np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32)
    args = (abi.EtrtArg * 2)(_arg(keep, x, True), _arg(keep, y, False))
    executor.execute(args, 2)
    plan = executor.native_plan()
    assert plan is not None and plan.kind == abi.ETRT_PLAN_ORT_RUN and plan.num_args == 2
    for k in range(2):
        sig, arg = plan.signature[k], args[k]
        assert (sig.kind, sig.dtype, sig.ndim, sig.data, sig.nbytes, sig.device_type) == \
            (arg.kind, arg.dtype, arg.ndim, arg.data, arg.nbytes, arg.device_type)
        assert list(sig.sizes[:2]) == [2, 3] and list(sig.dim_order[:2]) == [0, 1]
    assert plan.num_inputs == 1 and plan.num_outputs == 1 and plan.session and plan.ort_run
    executor.execute(args, 2)  # the same arguments again: the plan is reused, not rebuilt
    assert ctypes.addressof(executor.native_plan()) == ctypes.addressof(plan)
    # A wrong dtype after a good call: the Python check refuses it, and no plan is left.
    xi = np.ones((2, 3), np.int32)
    bad = (abi.EtrtArg * 2)(_arg(keep, xi, True, dtype=3), _arg(keep, y, False))
    with pytest.raises(ArgumentError, match="dtype"):
        executor.execute(bad, 2)
    assert executor.native_plan() is None
    # A wrong shape too.
    x4 = np.ones((4, 3), np.float32)
    with pytest.raises(ArgumentError, match="shape"):
        executor.execute((abi.EtrtArg * 2)(_arg(keep, x4, True, shape=(4, 3)),
                                           _arg(keep, y, False)), 2)
    assert executor.native_plan() is None
    executor.close()


def test_dynamic_outputs_publish_a_copy_out_plan_and_disabled_plans_none(add_blob,
                                                                         monkeypatch):
    keep: list = []
    x, y = np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32)
    args = (abi.EtrtArg * 2)(_arg(keep, x, True), _arg(keep, y, False))
    dynamic = OnnxRuntimeExecutor(add_blob)
    dynamic.fixed_outputs = False  # onnxruntime allocates outputs, Python copies them in
    dynamic.execute(args, 2)
    plan = dynamic.native_plan()
    assert np.all(y == 2) and plan is not None
    # The output's entry is NULL: the adapter copies it out (and counts the bytes).
    assert plan.num_outputs == 1 and not plan.outputs[0] and plan.num_state_values == 0
    assert plan.ort_release_value and plan.copied_bytes and plan.num_position_checks == 0
    monkeypatch.setenv(PLAN_ENV, "0")
    disabled = OnnxRuntimeExecutor(add_blob)
    disabled.execute(args, 2)
    assert disabled.native_plan() is None


_CLOSE_AT_EXIT = textwrap.dedent("""
    import sys, torch
    import executorch_tensorrt
    from executorch.runtime import Runtime
    from executorch_tensorrt.runtime import callbacks

    method = Runtime.get().load_program(sys.argv[1]).load_method("forward")
    x = torch.randn(2, 3)
    method.execute([x]); method.execute([x])  # the second ran the plan
    callbacks._executors.close_all()  # what atexit does, before the method is freed
    try:
        method.execute([x])
    except RuntimeError:
        print("refused", flush=True)
""")


def test_executors_closed_at_exit_withdraw_their_plans(programs, tmp_path):
    """close_all (at interpreter exit) releases sessions while methods may still
    be alive; a plan pointing at a released session must not run again: the
    call goes to Python, which refuses it (without withdrawal: a use-after-free)."""
    import os

    env = dict(os.environ, EXECUTORCH_TENSORRT_FALLBACK="onnxruntime")
    done = subprocess.run([sys.executable, "-c", _CLOSE_AT_EXIT, str(programs["add"][2])],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and "refused" in done.stdout, done.stderr[-2000:]
    assert "closed at exit" in done.stderr  # Python answered, not the stale plan


def test_a_traced_call_that_replaces_the_session_drops_plans_over_the_old_one(add_blob,
                                                                              monkeypatch):
    """With per-node profiling, a traced call ends the profile and replaces the
    onnxruntime session; a plan cached for the old session must not be handed
    to the adapter again (it would run Run on a released session)."""
    from executorch_tensorrt.runtime import profiling

    class Recorder:
        def event(self, name: str, start: int, end: int) -> None:
            pass

    monkeypatch.setenv(profiling.PROFILE_NODES_ENV, "1")
    executor = OnnxRuntimeExecutor(add_blob)
    keep: list = []
    x, y = np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32)
    args = (abi.EtrtArg * 2)(_arg(keep, x, True), _arg(keep, y, False))
    executor.execute(args, 2)  # untraced: a plan over the first session
    assert executor.native_plan().session == executor.session.session.value
    monkeypatch.setattr(profiling, "begin_call", lambda: Recorder())
    executor.execute(args, 2)  # traced: the session is replaced
    monkeypatch.setattr(profiling, "begin_call", lambda: None)
    executor.execute(args, 2)  # untraced again
    assert executor.native_plan().session == executor.session.session.value
    assert np.array_equal(y, x + 1)
    executor.close()
