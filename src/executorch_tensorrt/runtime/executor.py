"""The executor interface, and the ordered list init chooses from.

An executor runs one partition: `inputs`/`outputs` are its bindings,
`execute(args, num_args)` runs one call on ExecuTorch's arguments (checked by
arguments.check_args first), `close()` releases what its constructor
acquired (the adapter's destroy calls it). Factories are tried in order:
TensorRT first, then onnxruntime on the CPU when the caller allowed the
fallback. A factory that cannot serve this process raises EngineUnavailable
and the next one is tried; any other error is the answer.
"""
from __future__ import annotations

import abc
import os
import sys
from typing import Callable, Sequence

from ..blob import Blob
from ..errors import ArgumentError, EngineUnavailable
from .adapter import abi
from .arguments import Binding
from .named_data import NamedData

FALLBACK_ENV = "EXECUTORCH_TENSORRT_FALLBACK"
FALLBACK_ONNXRUNTIME = "onnxruntime"


class Executor(abc.ABC):
    """Runs one partition on ExecuTorch's arguments."""

    kind: str
    inputs: list[Binding]
    outputs: list[Binding]

    @abc.abstractmethod
    def execute(self, args: Sequence[abi.EtrtArg], num_args: int | None = None) -> None:
        """One call: `args` holds the inputs then the outputs (`num_args` of
        them; len(args) when None). Raises ArgumentError for arguments that do
        not match the bindings, before touching their memory."""

    def close(self) -> None:
        """Releases what the executor holds; further execute calls raise."""

    def native_plan(self) -> "abi.EtrtNativePlan | None":
        """The plan for the call execute just made (executor_table.h, "Native
        plans"), or None: every call then comes to execute. A returned plan and
        what it points to must stay alive until the next execute or close."""
        return None

    def withdraw_native_plan(self) -> None:
        """Stops the adapter from running a plan handed out earlier, outside
        execute/destroy (interpreter exit); keeps the plan's memory readable."""


NATIVE_PLAN_ENV = "EXECUTORCH_TENSORRT_NATIVE_PLAN"


def native_plans_enabled() -> bool:
    """False when EXECUTORCH_TENSORRT_NATIVE_PLAN=0: every call then runs the
    Python executor (for debugging an executor, or comparing both paths)."""
    return os.environ.get(NATIVE_PLAN_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


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
    factories: list[tuple[str, ExecutorFactory]] = [("tensorrt", _tensorrt)]
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
