"""Exceptions raised by executorch_tensorrt. Each message says what failed,
the cause, and what to do."""


class ExecuTorchTensorRTError(RuntimeError):
    """Base class of this package's errors."""


class TensorRTNotInstalledError(ExecuTorchTensorRTError, ImportError):
    """Neither `tensorrt` nor `tensorrt_rtx` can be imported."""


class EngineBuildError(ExecuTorchTensorRTError):
    """TensorRT rejected a partition or failed to build its engine."""


class ExportError(ExecuTorchTensorRTError):
    """The program cannot be exported so that the installed runtime runs it."""
