"""Exceptions raised by executorch_tensorrt, in one hierarchy. Each message says
what failed, the cause, and what to do.

Every class carries `et_error`, the ExecuTorch Error code (runtime/core/error.h)
that the backend returns to ExecuTorch when it escapes an executor callback
(runtime/callbacks.py looks it up with `error_code`). Built-in mixins
(ValueError, RuntimeError, ImportError) stay where callers catch those.
Imports nothing, so every layer can use it.
"""
from __future__ import annotations

# ExecuTorch Error codes (executorch/runtime/core/error.h).
ET_INTERNAL = 0x01
ET_INVALID_ARGUMENT = 0x12
ET_NOT_FOUND = 0x20
ET_INVALID_PROGRAM = 0x23
ET_DELEGATE_INVALID_COMPATIBILITY = 0x30


class ExecuTorchTensorRTError(Exception):
    """Base class of this package's errors."""

    et_error: int = ET_INTERNAL


class TensorRTNotInstalledError(ExecuTorchTensorRTError, ImportError, RuntimeError):
    """Neither `tensorrt` nor `tensorrt_rtx` can be imported."""

    et_error = ET_DELEGATE_INVALID_COMPATIBILITY


class EngineBuildError(ExecuTorchTensorRTError, RuntimeError):
    """TensorRT rejected a partition or failed to build its engine."""


class ExportError(ExecuTorchTensorRTError, RuntimeError):
    """The program cannot be exported so that the installed runtime runs it."""


class OutputWriteError(ExportError):
    """A file could not be written whole (disk full, read-only, permission, a
    vanished folder, ...); whatever was at its path is unchanged. `path`,
    `errno` and `needed` (bytes, where known) say which, why and how much."""

    def __init__(self, message: str, *, path: str, errno: int | None = None,
                 needed: int | None = None):
        super().__init__(message)
        self.path, self.errno, self.needed = path, errno, needed


class QuantizationError(ExportError):
    """A quantized layer or scheme that TensorRT cannot take as it is; the
    message names the layer or scheme, why, and what to do."""


class CheckpointError(QuantizationError):
    """A published checkpoint file (safetensors, GGUF, a transformers config)
    that is malformed, inconsistent or of a kind we refuse; the message names
    the file, the tensor or field, the value found and what to do. Raised
    before anything is read outside the file's bounds."""


class EngineUnavailable(ExecuTorchTensorRTError, RuntimeError):
    """The engine cannot run in this process (no GPU, no TensorRT, another
    compute capability and no rebuild possible); the message says why."""

    et_error = ET_DELEGATE_INVALID_COMPATIBILITY


class RebuildImpossible(ExecuTorchTensorRTError, RuntimeError):
    """The engine cannot be rebuilt here from the embedded ONNX; the message says why."""

    et_error = ET_DELEGATE_INVALID_COMPATIBILITY


class ArgumentError(ExecuTorchTensorRTError, ValueError):
    """ExecuTorch passed arguments that do not match the partition's bindings."""

    et_error = ET_INVALID_ARGUMENT


class InvalidProgramError(ExecuTorchTensorRTError, ValueError):
    """A blob or its embedded model is not one this runtime accepts (malformed,
    or referencing anything outside the blob)."""

    et_error = ET_INVALID_PROGRAM


class NamedDataError(InvalidProgramError):
    """The program's named data (the .pte's segment or the .ptd passed at load)
    lacks a weight the blob lists, or holds it with another size."""

    et_error = ET_NOT_FOUND


def error_code(error: BaseException) -> int:
    """The ExecuTorch Error code for an exception: its class's `et_error`, else
    Internal (an exception this package did not anticipate)."""
    return getattr(type(error), "et_error", ET_INTERNAL) if isinstance(
        error, ExecuTorchTensorRTError) else ET_INTERNAL
