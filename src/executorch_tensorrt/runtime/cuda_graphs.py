"""CUDA graphs of a TensorRT context's enqueue (docs/gpu-runtime.md).

GPU-only: ran on the H200 with a labelled stand-in for TensorRT's execution
context (tests/runtime/test_cuda_graphs_gpu.py); never with a real engine.

A graph launch replaces the engine's many kernel launches with one, which is
what small partitions pay for per call. TensorRT documents a captured graph as
valid only for the input shapes and tensor addresses bound at capture, so:
- one graph per context, for one *binding generation* (the context bumps it
  whenever it sets a shape or an address; see tensorrt_context.py). Graphs for
  several shapes of one context are not kept: replaying one after the context
  was re-bound for another shape would run with state TensorRT set for that
  other shape. Alternating shapes therefore run plain enqueues;
- a new generation first runs a plain enqueue (TensorRT wants one after a
  shape change, for its shape-dependent setup, before a capture), and the
  second call with the same generation captures, then replays;
- addresses are part of the generation: a new argument address re-captures.
  Copying arguments into fixed buffers instead would keep one graph for every
  address, but cost a device copy of every input and output per call; in
  ExecuTorch, memory-planned arguments keep their addresses from call to call,
  so re-captures are rare;
- a capture that fails (an engine with data-dependent shapes, loops, a
  context that says it is not capturable) turns graphs off for that context
  and says why in the debug log; that call and later ones run plain enqueues.

EXECUTORCH_TENSORRT_CUDA_GRAPHS=0 turns graphs off for contexts created after
it is set.
"""
from __future__ import annotations

import logging
import os

import torch

from .cuda_driver import graph_launcher

__all__ = ["CUDA_GRAPHS_ENV", "EnqueueGraph", "cuda_graphs_enabled", "enqueue"]

CUDA_GRAPHS_ENV = "EXECUTORCH_TENSORRT_CUDA_GRAPHS"
log = logging.getLogger(__name__)


def cuda_graphs_enabled(option: str | None = None) -> bool:
    """Whether contexts capture their enqueue: a load-time option wins over
    the environment; on unless set to 0/off/false/no."""
    value = option if option else os.environ.get(CUDA_GRAPHS_ENV, "1")
    return value.strip().lower() not in ("0", "off", "false", "no")


def enqueue(context, stream: torch.cuda.Stream) -> None:
    """One plain enqueue of the engine on `stream`."""
    if not context.execute_async_v3(stream.cuda_stream):
        raise RuntimeError("TensorRT failed to enqueue the engine; its log says why")


class EnqueueGraph:
    """The captured enqueue of one context, replayed while its bindings stay."""

    __slots__ = ("graph", "exec", "generation", "seen", "off_reason", "captures", "replays")

    def __init__(self) -> None:
        self.graph: torch.cuda.CUDAGraph | None = None
        self.exec = 0  # the graph's cudaGraphExec_t, launched through the driver
        self.generation = -1  # the binding generation `graph` was captured for
        self.seen = -1  # the generation of the last plain enqueue
        self.off_reason: str | None = None  # why graphs are off for this context
        self.captures = 0
        self.replays = 0

    def launch(self, context, stream: torch.cuda.Stream, generation: int) -> None:
        """Runs the engine on `stream` for the bindings of `generation`: a
        replay, a capture and replay, or a plain enqueue."""
        if self.off_reason is None:
            if self.graph is not None and generation == self.generation:
                self._replay(stream)
                return
            if generation == self.seen and self._capture(context, stream, generation):
                self._replay(stream)
                return
            self.graph, self.exec = None, 0  # stale: bound for another generation
            self.seen = generation
        enqueue(context, stream)

    def _replay(self, stream: torch.cuda.Stream) -> None:
        launch = graph_launcher()
        if self.exec and launch is not None:
            status = launch(self.exec, stream.cuda_stream)
            if status != 0:
                raise RuntimeError(f"cuGraphLaunch failed (CUresult {status}) replaying the "
                                   "captured TensorRT enqueue")
        else:
            with torch.cuda.stream(stream):  # replay() launches on the current stream
                self.graph.replay()
        self.replays += 1

    def _turn_off(self, reason: str) -> bool:
        self.off_reason = reason
        self.graph, self.exec = None, 0
        log.debug("CUDA graphs off for this TensorRT context: %s; running plain enqueues",
                  reason)
        return False

    def _capture(self, context, stream: torch.cuda.Stream, generation: int) -> bool:
        capturable = getattr(context, "is_stream_capturable", None)
        if capturable is not None and not capturable(stream.cuda_stream):
            return self._turn_off("TensorRT says the context is not stream capturable")
        graph = torch.cuda.CUDAGraph()
        ok = False
        try:
            with torch.cuda.stream(stream):
                # thread_local: only this thread's unsafe calls (a synchronize,
                # an allocation) during the capture fail it.
                graph.capture_begin(capture_error_mode="thread_local")
                try:
                    ok = bool(context.execute_async_v3(stream.cuda_stream))
                finally:
                    graph.capture_end()
        except Exception as e:  # noqa: BLE001 - any capture failure means: do not capture
            return self._turn_off(f"capturing the enqueue failed: {e}")
        if not ok:
            return self._turn_off("the enqueue returned false while being captured")
        self.graph, self.generation = graph, generation
        raw = getattr(graph, "raw_cuda_graph_exec", None)  # torch >= 2.7 (guarded)
        try:
            self.exec = int(raw()) if raw is not None else 0
        except (RuntimeError, TypeError):
            self.exec = 0
        self.captures += 1
        log.debug("captured a CUDA graph of the enqueue (binding generation %d)", generation)
        return True
