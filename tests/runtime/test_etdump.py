"""ETDump profiling (docs/profiling.md): the adapter records each TensorRT
partition's stages (and, when asked, its ONNX nodes) as ExecuTorch delegate
events, which executorch.devtools.Inspector reads back and maps to the
exported ATen nodes through preprocess's debug_handle_map.

Runs the two-partition `bitwise` example through the onnxruntime fallback."""
from __future__ import annotations

import ctypes
import gc
import glob
import os
import tempfile
import time
import warnings

import pytest

from executorch_tensorrt.runtime import profiling
from executorch_tensorrt.runtime.adapter.loader import adapter_path

CALLS = 3
ORT_STAGES = ["check+bind", "run", "copy out"]


@pytest.fixture(scope="module")
def bitwise(tmp_path_factory):
    """The bitwise example exported with its ETRecord: (pte, etrecord, inputs)."""
    from executorch_tensorrt.aot.export import export_program
    from executorch_tensorrt.examples.models import example

    out = tmp_path_factory.mktemp("etdump")
    model, inputs = example("bitwise")
    result = export_program(model, inputs, out / "bitwise.pte",
                            etrecord_path=out / "bitwise.etrecord", progress=None)
    assert result.backends["forward"] == ["TensorRTBackend", "TensorRTBackend"]
    return result.path, out / "bitwise.etrecord", inputs


def _profile(pte, etrecord, inputs, tmp_path, calls=CALLS):
    """Runs `calls` calls with ETDump on; Inspector's Execute-block events."""
    from executorch.devtools import Inspector
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    module = _load_for_executorch(str(pte), enable_etdump=True)
    for _ in range(calls):
        module.forward(inputs)
    etdump = tmp_path / "run.etdp"
    module.write_etdump_result_to_file(str(etdump))
    del module
    gc.collect()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inspector = Inspector(etdump_path=str(etdump), etrecord=str(etrecord))
    (block,) = [b for b in inspector.event_blocks if b.name == "Execute"]
    return block.events


def _partitions(events):
    """instruction id -> (delegate events in order, the DELEGATE_CALL event)."""
    parts: dict[int, list] = {}
    calls = {}
    for e in events:
        if e.is_delegated_op:
            parts.setdefault(e._instruction_id, []).append(e)
        elif e.name == "DELEGATE_CALL":
            calls[e._instruction_id] = e
    return {k: (parts[k], calls[k]) for k in sorted(parts)}


def test_stage_events_per_call_per_partition(bitwise, tmp_path, allow_fallback, monkeypatch):
    monkeypatch.delenv(profiling.PROFILE_NODES_ENV, raising=False)
    parts = _partitions(_profile(*bitwise, tmp_path))
    assert len(parts) == 2, "one set of events per TensorRT partition"
    expected_ops = [{"aten.sin.default", "aten.mul.Tensor"},
                    {"aten.div.Tensor", "aten.add.Tensor", "aten.cos.default"}]
    for (events, call), ops in zip(parts.values(), expected_ops):
        assert [e.name for e in events] == ORT_STAGES  # no node events unless asked
        for e in events:
            assert e.delegate_backend_name == "TensorRTBackend"
            assert len(e.perf_data.raw) == CALLS, f"{e.name}: one event per call"
            assert e.debug_handles, f"{e.name} maps to no exported node"
            # A stage covers its whole partition: exactly the partition's ops.
            assert ops <= set(e.op_types) and "aten.bitwise_and.Scalar" not in e.op_types
        for name in ("check+bind", "run"):
            assert all(d > 0 for d in next(e for e in events if e.name == name).perf_data.raw)
        # Same clock, origin and unit as ExecuTorch's own DELEGATE_CALL: the
        # stages of each call lie inside it, one after the other.
        for k in range(CALLS):
            stages = sum(e.perf_data.raw[k] for e in events)
            assert 0 < stages <= call.perf_data.raw[k]
            call_start = call.start_time[k]
            call_end = call_start + call.perf_data.raw[k] * 1e6  # ms -> ticks (ns)
            starts = [e.start_time[k] for e in events]
            assert starts == sorted(starts)
            assert call_start <= starts[0] and starts[-1] <= call_end, (call_start, starts)


def test_node_events_map_to_their_exported_nodes(bitwise, tmp_path, allow_fallback,
                                                 monkeypatch):
    monkeypatch.setenv(profiling.PROFILE_NODES_ENV, "1")
    profile_dirs = set(glob.glob(os.path.join(tempfile.gettempdir(),
                                              "executorch_tensorrt_ort_profile_*")))
    parts = _partitions(_profile(*bitwise, tmp_path, calls=2))
    by_name = {}
    for events, _ in parts.values():
        assert [e.name for e in events[:3]] == ORT_STAGES
        nodes = events[3:]
        assert nodes, "per-node profiling was asked for"
        for e in nodes:
            assert len(e.perf_data.raw) == 2 and all(d >= 0 for d in e.perf_data.raw)
            assert 1 <= len(e.debug_handles) < len(events[0].debug_handles)
            by_name[e.name] = set(e.op_types)
    sin = [ops for name, ops in by_name.items() if "sin" in name]
    cos = [ops for name, ops in by_name.items() if "cos" in name]
    assert sin == [{"aten.sin.default"}] and cos == [{"aten.cos.default"}], by_name
    # The executors removed the trace files' directories when they were destroyed.
    left = set(glob.glob(os.path.join(tempfile.gettempdir(),
                                      "executorch_tensorrt_ort_profile_*"))) - profile_dirs
    assert not left


def test_profiling_is_off_outside_a_traced_call():
    assert profiling.begin_call() is None
    lib = ctypes.PyDLL(str(adapter_path()))
    lib.etrt_log_event.restype = ctypes.c_int32
    lib.etrt_log_event.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint64]
    assert lib.etrt_log_event(b"run", 1, 2) == 1  # no tracer attached: dropped
    assert lib.etrt_log_event(b"run", 2, 1) != 0  # and a bad event is refused
    assert lib.etrt_profiling_abi_version() == 1


def test_ticks_are_the_monotonic_clock():
    """Python executors time with time.monotonic_ns; ExecuTorch's PAL clock must agree."""
    lib = ctypes.PyDLL(str(adapter_path()))
    lib.etrt_current_ticks.restype = ctypes.c_uint64
    # The PAL counts from its first use; the offset to monotonic_ns is constant.
    offsets = []
    for _ in range(3):
        before = time.monotonic_ns()
        ticks = lib.etrt_current_ticks()
        after = time.monotonic_ns()
        offsets.append((ticks - before, ticks - after))
        time.sleep(0.01)
    high = min(hi for hi, _ in offsets)
    low = max(lo for _, lo in offsets)
    assert low <= high, f"ticks drift from time.monotonic_ns: {offsets}"
