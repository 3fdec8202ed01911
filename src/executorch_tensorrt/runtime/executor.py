"""The executor interface that every executor implements (runtime/choose.py
picks one for a partition).

An executor runs one partition: `inputs`/`outputs` are its bindings,
`execute(args, num_args)` runs one call on ExecuTorch's arguments (checked by
arguments.check_args first), `close()` releases what its constructor
acquired (the adapter's destroy calls it).
"""
from __future__ import annotations

import abc
import os
from typing import Sequence

from .adapter import abi
from .arguments import Binding

FALLBACK_ENV = "EXECUTORCH_TENSORRT_FALLBACK"
# Names a TEST-ONLY stand-in for TensorRT's context (testing.py); doctor reports it.
STAND_IN_ENV = "EXECUTORCH_TENSORRT_TEST_STAND_IN"
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
