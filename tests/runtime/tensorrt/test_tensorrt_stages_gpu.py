"""The TensorRT executor's ETDump stage events on a real GPU (docs/profiling.md).

Uses the FAKE, labelled StandInContext of tests/test_tensorrt_executor_gpu.py
in place of TensorRT's IExecutionContext (no GPU reachable here runs a
TensorRT engine); the executor's stream, staging copies and synchronization
are real. The recorder is replaced by a list: the adapter's part is covered by
tests/runtime/test_etdump.py. Skips without CUDA PyTorch and a GPU.
"""
from __future__ import annotations

import pytest
import torch

from executorch_tensorrt.runtime import profiling

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs CUDA PyTorch and an NVIDIA GPU (streams to time)")


class ListRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []

    def event(self, name: str, start: int, end: int) -> None:
        self.events.append((name, start, end))


def test_stages_in_call_order_and_the_gpu_work_after_the_enqueue(monkeypatch):
    from test_tensorrt_executor_gpu import SHAPE, StandInContext, run  # tests/ is on sys.path

    recorder = ListRecorder()
    monkeypatch.setattr(profiling, "begin_call", lambda: recorder)
    x = torch.arange(6, dtype=torch.float32).view(SHAPE)  # host: staged and copied back
    y = torch.ones(SHAPE)
    out = torch.zeros(SHAPE)
    # The stand-in engine sleeps ~10M GPU cycles (~5 ms) on the stream: far more
    # than a first call's host work (~0.5 ms on the H200, the stand-in's views).
    run(x, y, out, StandInContext(sleep_cycles=10_000_000))
    assert torch.equal(out, 2 * x + y)
    names = [n for n, _, _ in recorder.events]
    assert names == list(profiling.TENSORRT_STAGES)
    for (_, _, end), (_, start, _) in zip(recorder.events, recorder.events[1:]):
        assert end <= start
    # The host waits for the GPU at its first blocking step after the enqueue:
    # the copy back into pageable host memory (measured on the H200), else the
    # stream wait. Either way the engine's time is not charged to bind/enqueue.
    took = {n: e - s for n, s, e in recorder.events}
    assert took["copies"] + took["wait"] > 100_000, recorder.events
    assert took["enqueue"] < took["copies"] + took["wait"], recorder.events


def test_no_events_when_not_traced(monkeypatch):
    from test_tensorrt_executor_gpu import SHAPE, run

    monkeypatch.setattr(profiling, "begin_call", lambda: None)
    out = torch.zeros(SHAPE)
    run(torch.ones(SHAPE), torch.ones(SHAPE), out)
    assert torch.equal(out, torch.full(SHAPE, 3.0))


def test_a_device_resident_call_records_the_stages_without_waiting(monkeypatch):
    """No copies and no host wait: the engine's GPU time is in no stage, and
    the call's events end long before the engine (docs/profiling.md)."""
    from test_tensorrt_executor_gpu import SHAPE, run

    recorder = ListRecorder()
    monkeypatch.setattr(profiling, "begin_call", lambda: recorder)
    x, y, out = (torch.full(SHAPE, v, device="cuda") for v in (1.0, 2.0, 0.0))
    run(x, y, out)  # the stand-in engine sleeps ~1M GPU cycles on the stream
    assert [n for n, _, _ in recorder.events] == list(profiling.TENSORRT_STAGES)
    took = {n: e - s for n, s, e in recorder.events}
    assert took["copies"] == 0, recorder.events
    assert torch.equal(out.cpu(), torch.full(SHAPE, 4.0))
