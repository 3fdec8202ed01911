"""The callback table: executors chosen in order, destroy closes them, and an
exception maps to the ExecuTorch Error code its class carries."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import executorch_tensorrt
from executorch_tensorrt import errors
from executorch_tensorrt.blob import BlobError, write_blob
from executorch_tensorrt.runtime.adapter import abi
from executorch_tensorrt.runtime.callbacks import PythonExecutors
from executorch_tensorrt.runtime.choose import executor_factories
from executorch_tensorrt.runtime.executor import Executor
from executorch_tensorrt.program.references import ExpectedError
from helpers import identity_blob


def init(executors: PythonExecutors, blob: bytes, fallback: bytes | None = b"onnxruntime"):
    buf = ctypes.create_string_buffer(blob, len(blob))
    args = abi.EtrtInitArgs(ctypes.sizeof(abi.EtrtInitArgs), 0,
                            ctypes.cast(buf, ctypes.c_void_p), len(blob), None, 0, b"forward",
                            fallback)
    handle, nin, nout = ctypes.c_uint64(), ctypes.c_uint32(), ctypes.c_uint32()
    code = executors._init(ctypes.pointer(args), ctypes.pointer(handle), ctypes.pointer(nin),
                           ctypes.pointer(nout))
    return code, handle.value, (nin.value, nout.value)


@pytest.mark.parametrize("cls, code", [
    (errors.ArgumentError, 0x12), (BlobError, 0x23), (errors.InvalidProgramError, 0x23),
    (errors.EngineUnavailable, 0x30), (errors.RebuildImpossible, 0x30),
    (errors.TensorRTNotInstalledError, 0x30), (errors.EngineBuildError, 0x01),
    (ExpectedError, 0x01), (KeyError, 0x01), (ZeroDivisionError, 0x01)])
def test_error_codes(cls, code):
    assert errors.error_code(cls("x")) == code
    if cls not in (KeyError, ZeroDivisionError):
        assert issubclass(cls, errors.ExecuTorchTensorRTError)


def test_mixins_callers_rely_on():
    assert issubclass(errors.ArgumentError, ValueError)
    assert issubclass(BlobError, ValueError) and issubclass(ExpectedError, ValueError)
    assert issubclass(errors.EngineUnavailable, RuntimeError)
    assert issubclass(errors.TensorRTNotInstalledError, ImportError)


def test_order_tensorrt_first_onnxruntime_only_when_allowed():
    assert [n for n, _ in executor_factories(None)] == ["tensorrt"]
    assert [n for n, _ in executor_factories("onnxruntime")] == ["tensorrt", "onnxruntime"]


def test_init_execute_destroy_close(monkeypatch):
    executors = PythonExecutors()
    code, handle, counts = init(executors, identity_blob())
    assert code == 0 and counts == (1, 1)
    executor = executors.handles[handle]
    assert isinstance(executor, Executor) and executor.kind == "onnxruntime"
    closed = []
    monkeypatch.setattr(executor, "close", lambda: closed.append(handle))
    executors._destroy(handle)
    assert closed == [handle] and handle not in executors.handles


def test_failures_map_to_codes_and_record_the_cause(no_fallback):
    executors = PythonExecutors()
    code, _, _ = init(executors, b"TR01 not a blob")
    assert code == 0x23 and "TensorRTBackend init" in executorch_tensorrt.last_error()
    code, _, _ = init(executors, identity_blob(), fallback=None)
    assert code == 0x30 and "EXECUTORCH_TENSORRT_FALLBACK" in executorch_tensorrt.last_error()
    code, _, _ = init(executors, identity_blob(), fallback=b"tensorflow")
    assert code == 0x12 and "unknown fallback 'tensorflow'" in executorch_tensorrt.last_error()
    # An exception nobody anticipated: Internal, with its traceback recorded.
    assert executors._execute(12345, None, 2) == 0x01
    cause = executorch_tensorrt.last_error()
    assert "KeyError" in cause and "Traceback" in cause and "handle 12345" in cause


def test_wrong_arguments_through_the_table_are_invalid_argument():
    executors = PythonExecutors()
    code, handle, _ = init(executors, identity_blob())
    assert code == 0
    x, out = np.ones(6, np.float32), np.zeros(6, np.uint8)
    keep = []

    def arg(buf, is_input, dtype):
        sizes, order = (ctypes.c_int32 * 2)(2, 3), (ctypes.c_uint8 * 2)(0, 1)
        keep.extend([sizes, order])
        return abi.EtrtArg(ctypes.sizeof(abi.EtrtArg), abi.ETRT_ARG_TENSOR, is_input, dtype,
                           buf.ctypes.data, buf.nbytes, 2, abi.ETRT_DEVICE_CPU, 0, 0,
                           ctypes.cast(sizes, ctypes.POINTER(ctypes.c_int32)),
                           ctypes.cast(order, ctypes.POINTER(ctypes.c_uint8)), 0, 0.0, None)

    args = (abi.EtrtArg * 2)(arg(x, 1, 6), arg(out, 0, 0))
    assert executors._execute(handle, args, 2) == 0x12
    assert "output 0 ('y') has dtype torch.uint8" in executorch_tensorrt.last_error()
    assert (out == 0).all()
