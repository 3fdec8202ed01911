"""Which executor runs a partition: the ordered list init chooses from.

Factories are tried in order: TensorRT first, then onnxruntime on the CPU when
the caller allowed the fallback. A factory that cannot serve this process
raises EngineUnavailable and the next one is tried; any other error is the
answer. The concrete executors are imported when first chosen (onnxruntime's
import is slow and most processes never need it); they import executor.py,
never this module, so no import runs in a circle.
"""
from __future__ import annotations

import os
import sys
from typing import Callable

from ..blob import Blob
from ..errors import ArgumentError, EngineUnavailable
from .executor import FALLBACK_ENV, FALLBACK_ONNXRUNTIME, Executor
from .named_data import NamedData
from .testing import stand_in_factory  # None unless a test asks for the GPU stand-in

# (blob, the program's named data or None, the load-time "device" option or None)
ExecutorFactory = Callable[[Blob, "NamedData | None", "str | None"], Executor]


def _tensorrt(blob: Blob, named_data: NamedData | None, device: str | None) -> Executor:
    from .tensorrt.executor import TensorRTExecutor

    return TensorRTExecutor(blob, named_data, device=device)


def _onnxruntime(blob: Blob, named_data: NamedData | None, _device: str | None) -> Executor:
    from .onnxruntime.executor import OnnxRuntimeExecutor  # imports onnxruntime: only here

    return OnnxRuntimeExecutor(blob, named_data)


def fallback_requested(option: str | None) -> str | None:
    """The fallback the caller allowed: the load-time option wins over the env."""
    value = option if option else os.environ.get(FALLBACK_ENV, "")
    value = value.strip().lower()
    if value in ("", "0", "none", "off"):
        return None
    if value != FALLBACK_ONNXRUNTIME:
        source = "the load-time option" if option else FALLBACK_ENV
        raise ArgumentError(f"unknown fallback {value!r} (from {source}); "
                            f"the only fallback is {FALLBACK_ONNXRUNTIME!r}")
    return value


def executor_factories(fallback: str | None) -> list[tuple[str, ExecutorFactory]]:
    """The executors to try, in order, given the fallback the caller allowed."""
    factories: list[tuple[str, ExecutorFactory]] = [("tensorrt", stand_in_factory() or _tensorrt)]
    if fallback == FALLBACK_ONNXRUNTIME:
        factories.append((FALLBACK_ONNXRUNTIME, _onnxruntime))
    return factories


def create_executor(blob: Blob, fallback_option: str | None,
                    named_data: NamedData | None = None,
                    device: str | None = None) -> Executor:
    """The first executor in order that can run the blob here. `named_data`:
    where the blob's "weights" are (None: the program supplied none). `device`:
    the load-time backend option "device" (the TensorRT executor's GPU)."""
    causes: list[str] = []
    fallback = fallback_requested(fallback_option)
    for _name, factory in executor_factories(fallback):
        try:
            executor = factory(blob, named_data, device)
        except EngineUnavailable as e:
            causes.append(str(e))
            continue
        if causes:
            _note_fallback_once(causes[0])
        return executor
    if fallback is not None:
        raise EngineUnavailable(f"no executor can run this partition here: {'; '.join(causes)}")
    raise EngineUnavailable(
        f"the TensorRT engine cannot run here: {'; '.join(causes)}. To run this partition's "
        f"embedded ONNX model on the CPU with onnxruntime instead, set {FALLBACK_ENV}="
        f"{FALLBACK_ONNXRUNTIME} (or pass the load-time backend option "
        f"fallback={FALLBACK_ONNXRUNTIME}).")


_noted: set[str] = set()


def _note_fallback_once(cause: str) -> None:
    if cause not in _noted:
        _noted.add(cause)
        print(f"[executorch_tensorrt] running TensorRT partitions with onnxruntime on the CPU "
              f"({FALLBACK_ENV}={FALLBACK_ONNXRUNTIME}) because {cause}", file=sys.stderr)
