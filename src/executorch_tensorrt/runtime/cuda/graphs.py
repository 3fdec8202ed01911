"""CUDA graphs of a TensorRT context's enqueue (docs/gpu-runtime.md).

GPU-only: ran on a GPU with a labelled stand-in for TensorRT's execution
context (tests/runtime/tensorrt/test_tensorrt_graphs_gpu.py); never with a real engine.

A graph launch replaces the engine's many kernel launches with one, which is
what small partitions pay for per call. TensorRT documents a captured graph as
valid only for the input shapes and tensor addresses bound at capture, so:
- one graph per context, for one *binding generation* (the context bumps it
  whenever it sets a shape or an address; see tensorrt/context.py). Graphs for
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

import ctypes
import logging
import os

from .driver import driver
from .objects import Stream

__all__ = ["CUDA_GRAPHS_ENV", "EnqueueGraph", "cuda_graphs_enabled", "enqueue"]

CUDA_GRAPHS_ENV = "EXECUTORCH_TENSORRT_CUDA_GRAPHS"
_CAPTURE_THREAD_LOCAL = 1  # CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
log = logging.getLogger(__name__)


def cuda_graphs_enabled(option: str | None = None) -> bool:
    """Whether contexts capture their enqueue: a load-time option wins over
    the environment; on unless set to 0/off/false/no."""
    value = option if option else os.environ.get(CUDA_GRAPHS_ENV, "1")
    return value.strip().lower() not in ("0", "off", "false", "no")


def enqueue(context, stream: Stream) -> None:
    """One plain enqueue of the engine on `stream`."""
    if not context.execute_async_v3(stream.handle):
        raise RuntimeError("TensorRT failed to enqueue the engine; its log says why")


class EnqueueGraph:
    """The captured enqueue of one context, replayed while its bindings stay."""

    __slots__ = ("graph", "exec", "generation", "seen", "off_reason", "captures", "replays")

    def __init__(self) -> None:
        self.graph = 0  # the captured CUgraph (0: none)
        self.exec = 0  # its CUgraphExec, launched on the context's stream
        self.generation = -1  # the binding generation `graph` was captured for
        self.seen = -1  # the generation of the last plain enqueue
        self.off_reason: str | None = None  # why graphs are off for this context
        self.captures = 0
        self.replays = 0

    def launch(self, context, stream: Stream, generation: int) -> bool:
        """Runs the engine on `stream` for the bindings of `generation`: a
        replay, a capture and replay, or a plain enqueue. True when it ran
        as a graph replay (the call a native plan can repeat)."""
        if self.off_reason is None:
            if self.exec and generation == self.generation:
                self._replay(stream)
                return True
            if generation == self.seen and self._capture(context, stream, generation):
                self._replay(stream)
                return True
            self._release()  # stale: bound for another generation
            self.seen = generation
        enqueue(context, stream)
        return False

    def _replay(self, stream: Stream) -> None:
        status = driver().cuGraphLaunch(self.exec, stream.handle)
        if status != 0:
            raise RuntimeError(f"cuGraphLaunch failed (CUresult {status}) replaying the "
                               "captured TensorRT enqueue")
        self.replays += 1

    def _release(self) -> None:
        """Destroys the graph (a launched one keeps running: the driver defers)."""
        lib = driver() if self.graph or self.exec else None
        if self.exec:
            lib.cuGraphExecDestroy(self.exec)
        if self.graph:
            lib.cuGraphDestroy(self.graph)
        self.graph, self.exec = 0, 0

    def __del__(self) -> None:
        try:
            self._release()
        except Exception:  # noqa: BLE001 - finalizers must not raise (interpreter exit)
            pass

    def _turn_off(self, reason: str) -> bool:
        self.off_reason = reason
        self._release()
        log.debug("CUDA graphs off for this TensorRT context: %s; running plain enqueues",
                  reason)
        return False

    def _capture(self, context, stream: Stream, generation: int) -> bool:
        capturable = getattr(context, "is_stream_capturable", None)
        if capturable is not None and not capturable(stream.handle):
            return self._turn_off("TensorRT says the context is not stream capturable")
        lib = driver()
        # thread_local: only this thread's unsafe calls (a synchronize, an
        # allocation) during the capture fail it.
        status = lib.cuStreamBeginCapture_v2(stream.handle, _CAPTURE_THREAD_LOCAL)
        if status != 0:
            return self._turn_off(f"cuStreamBeginCapture failed (CUresult {status})")
        ok, error, graph = False, None, ctypes.c_void_p()
        try:
            ok = bool(context.execute_async_v3(stream.handle))
        except Exception as e:  # noqa: BLE001 - any capture failure means: do not capture
            error = e
        finally:
            ended = lib.cuStreamEndCapture(stream.handle, ctypes.byref(graph))
        self._release()
        self.graph = graph.value or 0
        if error is not None:
            return self._turn_off(f"capturing the enqueue failed: {error}")
        if ended != 0 or not self.graph:
            return self._turn_off(f"capturing the enqueue failed: cuStreamEndCapture returned "
                                  f"CUresult {ended}")
        if not ok:
            return self._turn_off("the enqueue returned false while being captured")
        exec_ = ctypes.c_void_p()
        status = lib.cuGraphInstantiateWithFlags(ctypes.byref(exec_), self.graph, 0)
        if status != 0 or not exec_.value:
            return self._turn_off(f"instantiating the captured graph failed (CUresult {status})")
        self.exec, self.generation = exec_.value, generation
        self.captures += 1
        log.debug("captured a CUDA graph of the enqueue (binding generation %d)", generation)
        return True
