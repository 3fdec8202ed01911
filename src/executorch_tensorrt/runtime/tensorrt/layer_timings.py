"""TensorRT per-layer times for ETDump (docs/profiling.md).

GPU-only and unverified: no machine that runs the tests can execute an
engine. TensorRT calls an IProfiler's report_layer_time(name, ms) for each
layer after an execution finishes; the layers ran one after another, so they
are laid out back to back from the moment the engine was enqueued. Layer names
are the ONNX node names the parser gave them (fused layers join several names
and map to no node).
"""
from __future__ import annotations


def attach_layer_timings(trt, context):
    """Sets a collecting IProfiler on the execution context; returns it."""

    class LayerTimes(trt.module.IProfiler):
        def __init__(self) -> None:
            super().__init__()
            self.layers: list[tuple[str, float]] = []

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            self.layers.append((layer_name, ms))

        def drain(self, start_ns: int) -> list[tuple[str, int, int]]:
            events, t = [], start_ns
            for name, ms in self.layers:
                end = t + int(ms * 1e6)
                events.append((name, t, end))
                t = end
            self.layers.clear()
            return events

    profiler = LayerTimes()
    context.profiler = profiler
    return profiler
