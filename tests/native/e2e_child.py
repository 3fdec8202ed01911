"""Runs in a child interpreter (see test_adapter_e2e.py): drives the adapter's
TensorRTBackend through libadapter_driver.so (which calls init/execute/
destroy exactly as an ExecuTorch Method does) with a tiny executor table
written in Python with ctypes, and reports each scenario's outcome as JSON.

The last scenario loads a real exported program through executorch.runtime
with the package's own executors.

Environment: EXECUTORCH_TENSORRT_ADAPTER (the adapter under test),
ETRT_TEST_DRIVER (libadapter_driver.so) and ETRT_TEST_PTE (a program with a
TensorRT partition, exported by the parent).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import tempfile
import threading
import traceback

# Load the adapter ourselves, without the package's own executors.
os.environ["EXECUTORCH_TENSORRT_SKIP_REGISTRATION"] = "1"
from executorch_tensorrt import blob as blob_format  # noqa: E402
from executorch_tensorrt.runtime.adapter import loader, abi  # noqa: E402

del os.environ["EXECUTORCH_TENSORRT_SKIP_REGISTRATION"]
lib = loader.load_adapter()

OK, INTERNAL, NOT_SUPPORTED, INVALID_ARGUMENT, INVALID_PROGRAM, INCOMPATIBLE = (
    0x0, 0x1, 0x10, 0x12, 0x23, 0x30)
FLOAT = 6  # ScalarType::Float

drv = ctypes.CDLL(os.environ["ETRT_TEST_DRIVER"])
drv.drv_is_available.restype = ctypes.c_int32
drv.drv_init.restype = ctypes.c_int32
drv.drv_init.argtypes = [
    ctypes.c_void_p, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int32,
    ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_void_p),
    ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint64,
    ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_void_p)]
drv.drv_init_option.restype = ctypes.c_int32
drv.drv_init_option.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_char_p,
                                ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p)]
drv.drv_execute.restype = ctypes.c_int32
drv.drv_execute.argtypes = [
    ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int32, ctypes.c_int64,
    ctypes.POINTER(ctypes.c_float), ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
    ctypes.POINTER(ctypes.c_int32)]
drv.drv_destroy.restype = None
drv.drv_destroy.argtypes = [ctypes.c_void_p]

BLOB = blob_format.write_blob(b"not-a-real-engine", {"io_bindings": [
    {"name": "x", "dtype": "float32", "shape": [-1], "is_input": True},
    {"name": "scale", "dtype": "int64", "shape": [], "is_input": True},
    {"name": "y", "dtype": "float32", "shape": [-1], "is_input": False},
]})


class Executors:
    """A tiny executor: y = x * scale, resizing y to x's shape. Records what
    it saw so the scenarios can check the adapter passed it on faithfully."""

    def __init__(self, available=1, init_error=None, init_message=None,
                 execute_error=None, execute_message=None, resize_to=None):
        self.available = available
        self.init_error, self.init_message = init_error, init_message
        self.execute_error, self.execute_message = execute_error, execute_message
        self.resize_to = resize_to
        self.inits, self.executes, self.destroyed = [], [], []
        self.next_handle = 100
        self.table = abi.make_table(self._is_available, self._init, self._execute, self._destroy)

    def _is_available(self):
        return self.available

    def _init(self, args_p, handle_p, nin_p, nout_p):
        try:
            a = args_p.contents
            self.inits.append({
                "struct_size": a.struct_size,
                "blob": a.blob_bytes(),
                "specs": a.compile_spec_dict(),
                "method": a.method_name.decode() if a.method_name else None,
                "fallback": a.fallback.decode() if a.fallback else None,
                "device": a.device_option(),
            })
            if self.init_error is not None:
                if self.init_message:
                    loader.set_last_error(self.init_message)
                return self.init_error
            self.next_handle += 1
            handle_p[0] = self.next_handle
            nin_p[0], nout_p[0] = 2, 1
            return OK
        except BaseException:
            loader.set_last_error("test executor init raised: " + traceback.format_exc())
            return INTERNAL

    def _execute(self, handle, args, num_args):
        try:
            seen = []
            for i in range(num_args):
                a = args[i]
                seen.append({
                    "struct_size": a.struct_size, "kind": a.kind, "is_input": a.is_input,
                    "dtype": a.dtype, "nbytes": a.nbytes, "ndim": a.ndim,
                    "shape": list(a.shape()) if a.kind == abi.ETRT_ARG_TENSOR else None,
                    "dim_order": [a.dim_order[d] for d in range(a.ndim)],
                    "device_type": a.device_type, "device_index": a.device_index,
                    "int_value": a.int_value, "has_tensor": bool(a.tensor),
                })
            self.executes.append({"handle": handle, "num_args": num_args, "args": seen})
            if self.execute_error is not None:
                if self.execute_message:
                    loader.set_last_error(self.execute_message)
                return self.execute_error
            x, scale, y = args[0], args[1], args[2]
            n = x.shape()[0]
            rc = loader.resize_tensor(ctypes.pointer(y), [self.resize_to or n])
            if rc != 0:
                return rc
            seen[2]["after_resize"] = {"nbytes": y.nbytes, "shape": list(y.shape())}
            src = ctypes.cast(x.data, ctypes.POINTER(ctypes.c_float))
            dst = ctypes.cast(y.data, ctypes.POINTER(ctypes.c_float))
            for i in range(n):
                dst[i] = src[i] * scale.int_value
            return OK
        except BaseException:
            loader.set_last_error("test executor execute raised: " + traceback.format_exc())
            return INTERNAL

    def _destroy(self, handle):
        self.destroyed.append(handle)


class StderrCapture:
    """Captures what C code writes to fd 2."""

    def __enter__(self):
        sys.stderr.flush()
        self.file = tempfile.TemporaryFile()
        self.saved = os.dup(2)
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc):
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.seek(0)
        self.text = self.file.read().decode(errors="replace")
        self.file.close()


def init(blob=BLOB, specs=None, method=b"forward", fallback=None, fallback_int=0):
    specs = specs or {}
    keys = (ctypes.c_char_p * max(1, len(specs)))(*specs.keys())
    bufs = [ctypes.create_string_buffer(v, len(v)) for v in specs.values()]
    vals = (ctypes.c_void_p * max(1, len(specs)))(*[ctypes.addressof(b) for b in bufs])
    sizes = (ctypes.c_uint64 * max(1, len(specs)))(*[len(v) for v in specs.values()])
    freed = ctypes.c_int32(0)
    handle = ctypes.c_void_p()
    with StderrCapture() as err:
        rc = drv.drv_init(blob, len(blob), method, fallback, fallback_int, keys, vals, sizes,
                          len(specs), ctypes.byref(freed), ctypes.byref(handle))
    return rc, handle, freed.value, err.text


def execute(handle, xs, scale, cap, num_args=3, cuda=0):
    x = (ctypes.c_float * len(xs))(*xs)
    y = (ctypes.c_float * cap)(*([-1.0] * cap))
    out_n = ctypes.c_int32(-1)
    with StderrCapture() as err:
        rc = drv.drv_execute(handle, x, len(xs), scale, y, cap, num_args, cuda,
                             ctypes.byref(out_n))
    return rc, list(y), out_n.value, err.text


def install(ex):
    loader.install_executor_table(ex.table if ex is not None else None)


# ---------------------------------------------------------------- scenarios

def scenario_no_executor():
    install(None)
    assert drv.drv_is_available() == 0
    rc, _, freed, err = init()
    assert rc == NOT_SUPPORTED, hex(rc)
    assert "[executorch_tensorrt] TensorRTBackend init failed: no executor installed: " \
        "import executorch_tensorrt" in err, err
    assert "no executor installed" in loader.last_error()
    assert freed == 1, "processed blob not freed after a failed init"


def scenario_install_rejects_bad_tables():
    ex = Executors()
    for field, value, needle in (("abi_version", 99, "abi_version 99"),
                                 ("struct_size", 8, "struct_size is 8")):
        bad = abi.make_table(ex._is_available, ex._init, ex._execute, ex._destroy)
        setattr(bad, field, value)
        try:
            loader.install_executor_table(bad)
        except RuntimeError as e:
            assert needle in str(e), e
        else:
            raise AssertionError(f"a table with {field}={value} was installed")
    # A table written before native_plan was appended (struct_size ends at
    # destroy) is still accepted: the slot is optional.
    old = abi.make_table(ex._is_available, ex._init, ex._execute, ex._destroy)
    old.struct_size = abi.EtrtExecutorTable.native_plan.offset
    loader.install_executor_table(old)
    loader.install_executor_table(None)
    bad = abi.make_table(ex._is_available, ex._init, ex._execute, ex._destroy)
    bad.struct_size = abi.EtrtExecutorTable.native_plan.offset - 1
    try:
        loader.install_executor_table(bad)
    except RuntimeError as e:
        assert "struct_size" in str(e), e
    else:
        raise AssertionError("a table ending inside destroy was installed")
    bad = abi.make_table(ex._is_available, ex._init, ex._execute, ex._destroy)
    bad.execute = abi.ExecuteFn()  # NULL
    try:
        loader.install_executor_table(bad)
    except RuntimeError as e:
        assert "function pointer" in str(e), e
    else:
        raise AssertionError("a table with a NULL function pointer was installed")


def scenario_roundtrip():
    ex = Executors()
    install(ex)
    assert drv.drv_is_available() == 1
    from executorch.runtime import Runtime
    assert Runtime.get().backend_registry.is_available("TensorRTBackend")
    specs = {b"precision": b"fp16", b"device_id": b"\x00\x01"}
    rc, handle, freed, err = init(specs=specs, fallback=b"onnxruntime")
    assert rc == OK, (hex(rc), err)
    assert freed == 1, "processed blob not freed after init"
    seen = ex.inits[-1]
    assert seen["blob"] == BLOB
    assert seen["specs"] == {"precision": b"fp16", "device_id": b"\x00\x01"}, seen["specs"]
    assert seen["method"] == "forward" and seen["fallback"] == "onnxruntime", seen
    assert seen["struct_size"] == ctypes.sizeof(abi.EtrtInitArgs)

    rc, y, out_n, err = execute(handle, [1.0, 2.0, 3.0], 2, cap=8)
    assert rc == OK, (hex(rc), err, loader.last_error())
    assert out_n == 3 and y[:3] == [2.0, 4.0, 6.0] and y[3:] == [-1.0] * 5, (out_n, y)
    call = ex.executes[-1]
    assert call["handle"] == ex.next_handle and call["num_args"] == 3
    x, s, o = call["args"]
    assert all(a["struct_size"] == ctypes.sizeof(abi.EtrtArg) for a in call["args"])
    assert (x["kind"], x["is_input"], x["dtype"], x["nbytes"], x["ndim"], x["shape"]) == \
        (abi.ETRT_ARG_TENSOR, 1, FLOAT, 12, 1, [3]), x
    assert x["dim_order"] == [0] and x["device_type"] == abi.ETRT_DEVICE_CPU and x["has_tensor"]
    assert (s["kind"], s["is_input"], s["int_value"]) == (abi.ETRT_ARG_INT, 1, 2), s
    assert (o["kind"], o["is_input"], o["nbytes"], o["shape"]) == \
        (abi.ETRT_ARG_TENSOR, 0, 32, [8]), o
    assert o["after_resize"] == {"nbytes": 12, "shape": [3]}, o

    # Again, with other data: the reused argument array is refilled.
    rc, y, out_n, _ = execute(handle, [5.0], 3, cap=8)
    assert rc == OK and out_n == 1 and y[0] == 15.0, (rc, out_n, y)
    assert ex.executes[-1]["args"][0]["shape"] == [1]

    drv.drv_destroy(handle)
    assert ex.destroyed == [ex.next_handle]


def scenario_device_tag():
    ex = Executors()
    install(ex)
    rc, handle, _, _ = init()
    assert rc == OK
    rc, _, _, err = execute(handle, [1.0], 1, cap=4, cuda=1)
    assert rc == OK, err
    x = ex.executes[-1]["args"][0]
    assert (x["device_type"], x["device_index"]) == (abi.ETRT_DEVICE_CUDA, 1), x
    drv.drv_destroy(handle)


def scenario_wrong_arity():
    ex = Executors()
    install(ex)
    rc, handle, _, _ = init()
    assert rc == OK
    rc, _, _, err = execute(handle, [1.0], 1, cap=4, num_args=2)
    assert rc == INVALID_ARGUMENT, hex(rc)
    assert "TensorRTBackend execute failed: ExecuTorch passed 2 arguments but the " \
        "partition has 2 inputs and 1 outputs" in err, err
    assert not ex.executes, "the executor ran with the wrong number of arguments"
    drv.drv_destroy(handle)


def scenario_executor_init_error():
    ex = Executors(init_error=INCOMPATIBLE,
                   init_message="engine built for SM89 but this GPU is SM90")
    install(ex)
    rc, _, freed, err = init()
    assert rc == INCOMPATIBLE, hex(rc)
    assert "[executorch_tensorrt] TensorRTBackend init failed: engine built for SM89 but " \
        "this GPU is SM90" in err, err
    assert loader.last_error() == "engine built for SM89 but this GPU is SM90"
    assert freed == 1
    # Without a recorded cause, the adapter says so instead of repeating a stale one.
    install(Executors(init_error=INCOMPATIBLE))
    rc, _, _, err = init()
    assert rc == INCOMPATIBLE
    assert "returned error 0x30 without recording a cause" in err, err
    assert "SM89" not in loader.last_error(), "the cause of an earlier call leaked into this one"


def scenario_executor_execute_error():
    ex = Executors(execute_error=INTERNAL, execute_message="enqueueV3 failed: out of memory")
    install(ex)
    rc, handle, _, _ = init()
    assert rc == OK
    rc, _, _, err = execute(handle, [1.0], 1, cap=4)
    assert rc == INTERNAL, hex(rc)
    assert "TensorRTBackend execute failed: enqueueV3 failed: out of memory" in err, err
    drv.drv_destroy(handle)


def scenario_resize_past_capacity():
    ex = Executors(resize_to=9)
    install(ex)
    rc, handle, _, _ = init()
    assert rc == OK
    rc, _, _, err = execute(handle, [1.0], 1, cap=4)
    assert rc != OK
    assert "etrt_resize_tensor" in err and "capacity" in err, err
    drv.drv_destroy(handle)


def scenario_invalid_blob():
    ex = Executors()
    install(ex)
    bad = b"TR01" + BLOB[4:12] + (10**6).to_bytes(4, "little") + BLOB[16:]  # engine offset out of range
    for blob in (b"definitely not a blob", bad):
        rc, _, freed, err = init(blob=blob)
        assert rc == INVALID_PROGRAM, hex(rc)
        assert "TensorRTBackend init failed: invalid TensorRT blob: " in err, err
        assert freed == 1
    assert not ex.inits, "the executor saw an invalid blob"


def scenario_fallback_wrong_type():
    ex = Executors()
    install(ex)
    rc, _, _, err = init(fallback_int=1)
    assert rc == INVALID_ARGUMENT, hex(rc)
    assert '"fallback" must be a string' in err, err


def scenario_device_option():
    """The load-time option "device" reaches the executor's init as text."""
    ex = Executors()
    install(ex)
    handle = ctypes.c_void_p()
    for text, number, seen in ((b"cuda:1", 0, "cuda:1"), (None, 2, "2")):
        with StderrCapture() as err:
            rc = drv.drv_init_option(BLOB, len(BLOB), b"device", text, number,
                                     ctypes.byref(handle))
        assert rc == OK, (hex(rc), err.text)
        assert ex.inits[-1]["device"] == seen, ex.inits[-1]
        drv.drv_destroy(handle)
    rc, _, _, _ = init()
    assert rc == OK and ex.inits[-1]["device"] is None, ex.inits[-1]


def scenario_executor_unavailable():
    install(Executors(available=0))
    assert drv.drv_is_available() == 0


def scenario_handles_outlive_reinstall():
    first = Executors()
    install(first)
    rc, handle, _, _ = init()
    assert rc == OK
    second = Executors()
    install(second)
    rc, _, out_n, _ = execute(handle, [2.0], 2, cap=2)
    assert rc == OK and out_n == 1
    assert first.executes and not second.executes, "a delegate switched executors"
    drv.drv_destroy(handle)
    assert first.destroyed and not second.destroyed


def scenario_last_error_and_validate():
    loader.set_last_error("ünïcode ✓ message")
    assert loader.last_error() == "ünïcode ✓ message"
    assert loader.validate_blob(BLOB) is None
    assert loader.validate_blob(b"TR02" + BLOB[4:]) is None  # aliased_io: the reader's call
    reason = loader.validate_blob(b"TR03" + BLOB[4:])
    assert reason and "magic" in reason.lower(), reason
    assert loader.validate_blob(BLOB[:20])


def scenario_last_error_is_scoped_to_the_call():
    """A failing init, then successful calls: each call starts and ends with
    no stale cause."""
    ex = Executors()
    install(ex)
    rc, handle, _, _ = init()
    assert rc == OK
    install(Executors(init_error=INCOMPATIBLE, init_message="engine built for SM89"))
    rc, _, _, _ = init()
    assert rc == INCOMPATIBLE and loader.last_error() == "engine built for SM89"
    rc, _, _, err = execute(handle, [1.0], 1, cap=4)
    assert rc == OK, err
    assert loader.last_error() == "", loader.last_error()
    # An executor that records something and still succeeds leaves nothing either.
    ex.execute_message = "a note, not a failure"
    loader.set_last_error("stale")
    rc, _, _, _ = execute(handle, [1.0], 1, cap=4)
    assert rc == OK and loader.last_error() == "", loader.last_error()
    install(ex)
    assert drv.drv_is_available() == 1 and loader.last_error() == ""
    drv.drv_destroy(handle)


def scenario_last_error_is_per_thread():
    """Like errno: a failure on one thread does not replace another thread's cause."""
    install(Executors(init_error=INCOMPATIBLE, init_message="failed on the worker"))
    loader.set_last_error("main thread's cause")
    seen = []

    def worker():
        rc, _, _, _ = init()
        seen.append((rc, loader.last_error()))

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [(INCOMPATIBLE, "failed on the worker")], seen
    assert loader.last_error() == "main thread's cause", loader.last_error()


def _ones(method):
    import torch

    meta = method.metadata
    return [torch.ones(list(meta.input_tensor_meta(i).sizes()))
            for i in range(meta.num_inputs())]


def scenario_real_runtime_last_error():
    """Through executorch.runtime with the package's executors: a load that
    fails (no GPU, fallback not allowed) records its cause; a later successful
    execute, and a failure ExecuTorch raises itself, leave no stale cause."""
    from executorch.runtime import Runtime

    from executorch_tensorrt.runtime import callbacks

    callbacks.install()
    runtime, pte = Runtime.get(), os.environ["ETRT_TEST_PTE"]
    os.environ["EXECUTORCH_TENSORRT_FALLBACK"] = "onnxruntime"
    method = runtime.load_program(pte).load_method("forward")
    inputs = _ones(method)
    del os.environ["EXECUTORCH_TENSORRT_FALLBACK"]
    with StderrCapture():
        try:  # a second program: a Program caches the methods it loaded
            runtime.load_program(pte).load_method("forward")
        except Exception:
            pass
        else:
            raise AssertionError("loaded without a GPU and without the fallback")
    cause = loader.last_error()
    assert "EXECUTORCH_TENSORRT_FALLBACK" in cause, cause
    method.execute(inputs)
    assert loader.last_error() == "", loader.last_error()
    with StderrCapture():
        try:
            method.execute(inputs + inputs)  # wrong arity: ExecuTorch refuses it itself
        except Exception:
            pass
        else:
            raise AssertionError("ExecuTorch accepted twice the inputs")
    assert loader.last_error() == "", loader.last_error()


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items()
             if name.startswith("scenario_")}


def main() -> None:
    results = {}  # every scenario that ran, in order, with "ok" or its traceback
    for name, fn in SCENARIOS.items():
        try:
            fn()
            results[name] = "ok"
        except BaseException:
            results[name] = traceback.format_exc()
    print("RESULTS " + json.dumps(results))


if __name__ == "__main__":
    main()
