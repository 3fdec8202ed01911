"""A minimal binding of onnxruntime's C API whose calls keep the GIL.

Why: the executors run inside ExecuTorch's `Method.execute`, which holds the
GIL for the whole call; that is what keeps a second Python thread out of the
method's planned memory. onnxruntime's Python `run` releases the GIL, and
another thread then entered the same method mid-call. Calls made
through `ctypes.PyDLL` / `ctypes.PYFUNCTYPE` do not release it, so a session
run through this binding holds the GIL from start to end. onnxruntime's own
worker threads never touch Python, so its intra-op thread pool stays usable.

The library is the `libonnxruntime.so.*` shipped inside the onnxruntime wheel
(it exports only `OrtGetApiBase`); the Python module is not imported, so the
process does not carry two onnxruntime copies that both start thread pools.

`OrtApi` is a struct of function pointers that onnxruntime only ever appends
to; the indices below were counted in the public `onnxruntime_c_api.h` (the
functions used exist since API version 1, except the weight feeders,
marked, all within API_VERSION) and are checked at load time by a round trip
through CreateStatus / GetErrorCode / GetErrorMessage; the weight feeders'
indices are checked by the zero-copy tests (a wrong slot fails them).
"""
from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import threading
from ctypes import POINTER, byref, c_char_p, c_int, c_int64, c_size_t, c_uint32, c_void_p

from .threads import OrtThreads

from ...dtypes import DTYPES

API_VERSION = 18  # any version the library supports that has every slot below

_Status = c_void_p  # OrtStatus*: NULL means success
# name -> (index in OrtApi, result type, argument types)
_SLOTS: dict[str, tuple[int, object, tuple]] = {
    "CreateStatus": (0, c_void_p, (c_int, c_char_p)),
    "GetErrorCode": (1, c_int, (c_void_p,)),
    "GetErrorMessage": (2, c_char_p, (c_void_p,)),
    "CreateEnv": (3, _Status, (c_int, c_char_p, POINTER(c_void_p))),
    "CreateSessionFromArray": (8, _Status, (c_void_p, c_char_p, c_size_t, c_void_p,
                                            POINTER(c_void_p))),
    "Run": (9, _Status, (c_void_p, c_void_p, POINTER(c_char_p), POINTER(c_void_p), c_size_t,
                         POINTER(c_char_p), c_size_t, POINTER(c_void_p))),
    "CreateSessionOptions": (10, _Status, (POINTER(c_void_p),)),
    "EnableProfiling": (14, _Status, (c_void_p, c_char_p)),  # profiling: per-node times
    "DisableMemPattern": (17, _Status, (c_void_p,)),  # these two: cast-where-used sessions
    "DisableCpuMemArena": (19, _Status, (c_void_p,)),
    "SetSessionLogSeverityLevel": (22, _Status, (c_void_p, c_int)),
    "SetIntraOpNumThreads": (24, _Status, (c_void_p, c_int)),
    "SessionGetInputCount": (30, _Status, (c_void_p, POINTER(c_size_t))),
    "SessionGetOutputCount": (31, _Status, (c_void_p, POINTER(c_size_t))),
    "SessionGetInputTypeInfo": (33, _Status, (c_void_p, c_size_t, POINTER(c_void_p))),
    "SessionGetOutputTypeInfo": (34, _Status, (c_void_p, c_size_t, POINTER(c_void_p))),
    "SessionGetInputName": (36, _Status, (c_void_p, c_size_t, c_void_p, POINTER(c_void_p))),
    "SessionGetOutputName": (37, _Status, (c_void_p, c_size_t, c_void_p, POINTER(c_void_p))),
    "CreateTensorWithDataAsOrtValue": (49, _Status, (c_void_p, c_void_p, c_size_t,
                                                     POINTER(c_int64), c_size_t, c_int,
                                                     POINTER(c_void_p))),
    "GetTensorMutableData": (51, _Status, (c_void_p, POINTER(c_void_p))),
    "CastTypeInfoToTensorInfo": (55, _Status, (c_void_p, POINTER(c_void_p))),
    "GetTensorElementType": (60, _Status, (c_void_p, POINTER(c_int))),
    "GetDimensionsCount": (61, _Status, (c_void_p, POINTER(c_size_t))),
    "GetDimensions": (62, _Status, (c_void_p, POINTER(c_int64), c_size_t)),
    "GetTensorTypeAndShape": (65, _Status, (c_void_p, POINTER(c_void_p))),
    "CreateCpuMemoryInfo": (69, _Status, (c_int, c_int, POINTER(c_void_p))),
    "AllocatorFree": (76, _Status, (c_void_p, c_void_p)),
    "GetAllocatorWithDefaultOptions": (78, _Status, (POINTER(c_void_p),)),
    "ReleaseEnv": (92, None, (c_void_p,)),
    "ReleaseStatus": (93, None, (c_void_p,)),
    "ReleaseMemoryInfo": (94, None, (c_void_p,)),
    "ReleaseSession": (95, None, (c_void_p,)),
    "ReleaseValue": (96, None, (c_void_p,)),
    "ReleaseTypeInfo": (98, None, (c_void_p,)),
    "ReleaseTensorTypeAndShapeInfo": (99, None, (c_void_p,)),
    "ReleaseSessionOptions": (100, None, (c_void_p,)),
    "SessionEndProfiling": (110, _Status, (c_void_p, c_void_p, POINTER(c_void_p))),  # profiling
    # Weights from named data (named_weights.py). AddSessionConfigEntry
    # since API 2, AddExternalInitializers since 12, ...FromFilesInMemory since 18.
    "AddSessionConfigEntry": (130, _Status, (c_void_p, c_char_p, c_char_p)),
    "AddExternalInitializers": (210, _Status, (c_void_p, POINTER(c_char_p), POINTER(c_void_p),
                                               c_size_t)),
    "AddExternalInitializersFromFilesInMemory": (279, _Status, (
        c_void_p, POINTER(c_char_p), POINTER(c_void_p), POINTER(c_size_t), c_size_t)),
}

# ONNXTensorElementDataType code -> numpy dtype name (dtypes.py's rows that numpy has).
ELEMENT_TYPE_NAMES = {d.onnxruntime: d.numpy for d in DTYPES
                      if d.numpy and d.onnxruntime is not None}
_ORT_LOGGING_LEVEL_ERROR = 3
_ORT_DEVICE_ALLOCATOR, _ORT_MEM_TYPE_DEFAULT = 0, 0


class OrtError(RuntimeError):
    """onnxruntime's C API returned an error; the message is onnxruntime's."""


def library_path() -> str:
    """The onnxruntime shared library inside the installed wheel (not imported)."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        raise OrtError("onnxruntime is not installed; the fallback needs it: "
                       "pip install onnxruntime")
    for folder in spec.submodule_search_locations:
        found = sorted(glob.glob(os.path.join(folder, "capi", "libonnxruntime.so*")))
        if found:
            return found[-1]
    raise OrtError(f"no libonnxruntime.so* under {list(spec.submodule_search_locations)}/capi; "
                   "this onnxruntime wheel does not ship the C library the fallback loads")


class OrtApi:
    """The loaded library, its function table (GIL-holding) and one OrtEnv."""

    _instance: "OrtApi | None" = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> "OrtApi":
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls(library_path())
            return cls._instance

    def __init__(self, path: str):
        self.path = path
        self.lib = ctypes.PyDLL(path)  # PyDLL: calls keep the GIL
        self.lib.OrtGetApiBase.restype = c_void_p
        self.lib.OrtGetApiBase.argtypes = []
        base = self.lib.OrtGetApiBase()
        if not base:
            raise OrtError(f"OrtGetApiBase returned NULL in {path}")
        get_api_ptr, version_ptr = (c_void_p * 2).from_address(base)
        self.version = ctypes.PYFUNCTYPE(c_char_p)(version_ptr)().decode()
        table = ctypes.PYFUNCTYPE(c_void_p, c_uint32)(get_api_ptr)(API_VERSION)
        if not table:
            raise OrtError(f"onnxruntime {self.version} ({path}) does not offer C API version "
                           f"{API_VERSION}; install an onnxruntime that does (1.18 or newer)")
        slots = (c_void_p * (max(i for i, _, _ in _SLOTS.values()) + 1)).from_address(table)
        for name, (index, result, args) in _SLOTS.items():
            if not slots[index]:
                raise OrtError(f"onnxruntime {self.version}: OrtApi.{name} is NULL")
            setattr(self, name, ctypes.PYFUNCTYPE(result, *args)(slots[index]))
        self._self_check()
        self.env = self._out(self.CreateEnv, "CreateEnv", _ORT_LOGGING_LEVEL_ERROR,
                             b"executorch_tensorrt")
        self.cpu_memory = self._out(self.CreateCpuMemoryInfo, "CreateCpuMemoryInfo",
                                    _ORT_DEVICE_ALLOCATOR, _ORT_MEM_TYPE_DEFAULT)
        self.allocator = self._out(self.GetAllocatorWithDefaultOptions,
                                   "GetAllocatorWithDefaultOptions")
        # Both live for the process: onnxruntime tears its environment down
        # in its own static destructors.

    def _self_check(self) -> None:
        """The slot indices are right: a status made by slot 0 reads back."""
        status = self.CreateStatus(2, b"executorch_tensorrt probe")
        if not status:
            raise OrtError(f"onnxruntime {self.version}: CreateStatus returned NULL")
        try:
            ok = (self.GetErrorCode(status) == 2
                  and self.GetErrorMessage(status) == b"executorch_tensorrt probe")
        finally:
            self.ReleaseStatus(status)
        if not ok:
            raise OrtError(f"onnxruntime {self.version} ({self.path}): the C API table does not "
                           "have the layout this binding expects")

    def check(self, status, what: str) -> None:
        """Raises OrtError with onnxruntime's message when `status` is not NULL."""
        if status:
            try:
                message = (self.GetErrorMessage(status) or b"").decode(errors="replace")
            finally:
                self.ReleaseStatus(status)
            raise OrtError(f"onnxruntime {what} failed: {message}")

    def _out(self, fn, what: str, *args) -> c_void_p:
        """Calls a function whose last argument is an output pointer; checks both."""
        out = c_void_p()
        self.check(fn(*args, byref(out)), what)
        if not out.value:
            raise OrtError(f"onnxruntime {what} returned no object")
        return out

    def tensor(self, data: int, nbytes: int, shape, element_type: int) -> c_void_p:
        """An OrtValue over caller-owned CPU memory (no copy); release it with ReleaseValue."""
        dims = (c_int64 * len(shape))(*shape)
        return self._out(self.CreateTensorWithDataAsOrtValue, "CreateTensorWithDataAsOrtValue",
                         self.cpu_memory, data, nbytes, dims, len(shape), element_type)

    def shape_of(self, value) -> tuple[tuple[int, ...], int]:
        """(dimensions, element type) of a tensor OrtValue."""
        info = self._out(self.GetTensorTypeAndShape, "GetTensorTypeAndShape", value)
        try:
            return self._dims(info), self._element_type(info)
        finally:
            self.ReleaseTensorTypeAndShapeInfo(info)

    def _dims(self, info) -> tuple[int, ...]:
        count = c_size_t()
        self.check(self.GetDimensionsCount(info, byref(count)), "GetDimensionsCount")
        dims = (c_int64 * count.value)()
        self.check(self.GetDimensions(info, dims, count.value), "GetDimensions")
        return tuple(dims)

    def _element_type(self, info) -> int:
        element = c_int()
        self.check(self.GetTensorElementType(info, byref(element)), "GetTensorElementType")
        return element.value

    def data_of(self, value) -> int:
        data = c_void_p()
        self.check(self.GetTensorMutableData(value, byref(data)), "GetTensorMutableData")
        return data.value or 0


class OrtSession:
    """One onnxruntime session over a model held in memory; run() keeps the GIL."""

    def __init__(self, model: bytes, threads: OrtThreads = OrtThreads(),
                 timings_prefix: str | None = None, weights=None):
        """`weights` (named_weights.OrtNamedWeights), when given, adds its
        initializers to the session options before the session is created,
        and its `fed` (name, OrtValue) pairs are the model's last inputs, fed
        on every run and hidden from `inputs`; what it hands onnxruntime must
        outlive this session. `threads`: threads.py (the executor reads it
        from the environment)."""
        self.api = api = OrtApi.get()
        self.session = None
        fed = list(weights.fed) if weights is not None else []
        if weights is not None:  # its weights' locations (named_weights.py)
            model = weights.located(model)
        options = api._out(api.CreateSessionOptions, "CreateSessionOptions")
        try:
            if weights is not None:
                weights.configure(api, options)
            # Four onnxruntime 1.32 rewrites compute something other than the
            # Q/DQ graph TensorRT sees (docs/quantization.md): QDQ propagation
            # moves an FP8 QuantizeLinear above a Relu (+ Reshape);
            # ReluQuantRewrite drops a Relu feeding a QuantizeLinear whose zero
            # point is 0 (right for uint8, wrong for fp8, which has negatives);
            # QDQS8ToU8Transformer turns int8 activations into uint8 for
            # kernels whose u8 x s8 products saturate on x86 (int8 W8A8 ViT:
            # 0.013 off); WeightBiasQuantization rounds a W8A8 Conv's float
            # bias to int32 steps of scale_x * scale_w. The list is ';'-separated.
            api.check(api.AddSessionConfigEntry(
                options, b"optimization.disable_specified_optimizers",
                b"QDQPropagationTransformer;ReluQuantRewrite;QDQS8ToU8Transformer;"
                b"WeightBiasQuantization"),
                "AddSessionConfigEntry(disable four Q/DQ rewrites)")
            # onnxruntime fuses DequantizeLinear + MatMul over constant int8/int4
            # weights (inline ONNX) into MatMulNBits, whose default accuracy
            # level 4 also quantizes the activations to int8: a weight-only
            # layer then computes something TensorRT does not (0.0024 off on a
            # small ViT). Level 1 keeps float activations.
            api.check(api.AddSessionConfigEntry(
                options, b"session.qdq_matmulnbits_accuracy_level", b"1"),
                "AddSessionConfigEntry(session.qdq_matmulnbits_accuracy_level)")
            if timings_prefix is not None:  # per-node times: a JSON file at end_profiling()
                api.check(api.EnableProfiling(options, timings_prefix.encode()), "EnableProfiling")
            api.check(api.SetSessionLogSeverityLevel(options, _ORT_LOGGING_LEVEL_ERROR),
                      "SetSessionLogSeverityLevel")
            threads.configure(api, options)
            self.session = api._out(api.CreateSessionFromArray, "CreateSessionFromArray",
                                    api.env, model, len(model), options)
        finally:
            api.ReleaseSessionOptions(options)
        self.inputs = self._describe(api.SessionGetInputCount, api.SessionGetInputName,
                                     api.SessionGetInputTypeInfo, "input")
        self.outputs = self._describe(api.SessionGetOutputCount, api.SessionGetOutputName,
                                      api.SessionGetOutputTypeInfo, "output")
        self._input_names = (c_char_p * len(self.inputs))(*(n.encode() for n, _, _ in self.inputs))
        self._output_names = (c_char_p * len(self.outputs))(
            *(n.encode() for n, _, _ in self.outputs))
        fed_values = {name.decode(): value.value for name, value in fed}
        last = [name for name, _, _ in self.inputs[len(self.inputs) - len(fed):]] if fed else []
        if sorted(last) != sorted(fed_values):
            self.close()
            raise OrtError(f"the model's last inputs are {last}; the weights fed to it are "
                           f"{sorted(fed_values)}")
        self._fed = [fed_values[name] for name in last]  # in the model's input order
        if fed:
            self.inputs = self.inputs[:-len(fed)]

    def _describe(self, count_fn, name_fn, type_fn, what: str):
        """[(name, element type, dims with -1 for symbolic)] of the inputs or outputs."""
        api = self.api
        count = c_size_t()
        api.check(count_fn(self.session, byref(count)), f"SessionGet{what.title()}Count")
        described = []
        for i in range(count.value):
            raw = api._out(name_fn, f"SessionGet{what.title()}Name", self.session, i,
                           api.allocator)
            try:
                name = ctypes.string_at(raw).decode()
            finally:
                api.check(api.AllocatorFree(api.allocator, raw), "AllocatorFree")
            type_info = api._out(type_fn, f"SessionGet{what.title()}TypeInfo", self.session, i)
            try:
                tensor_info = c_void_p()
                api.check(api.CastTypeInfoToTensorInfo(type_info, byref(tensor_info)),
                          "CastTypeInfoToTensorInfo")
                if not tensor_info.value:
                    raise OrtError(f"{what} {i} ({name}) of the embedded ONNX model is not a "
                                   "tensor; the fallback runs tensor models only")
                element, dims = api._element_type(tensor_info), api._dims(tensor_info)
            finally:
                api.ReleaseTypeInfo(type_info)
            described.append((name, element, tuple(d if d >= 0 else -1 for d in dims)))
        return described

    @staticmethod
    def values(items) -> ctypes.Array:
        """A ctypes array of OrtValue pointers (None: NULL) to pass to run()."""
        return (c_void_p * len(items))(*(getattr(v, "value", v) for v in items))

    def run(self, inputs: ctypes.Array, outputs: ctypes.Array) -> None:
        """Runs the model on arrays made by values(): one OrtValue per input and
        per output; NULL outputs are allocated by onnxruntime and written into
        `outputs` (the caller releases them with ReleaseValue)."""
        if len(inputs) != len(self.inputs) or len(outputs) != len(self.outputs):
            raise OrtError(f"run() got {len(inputs)} inputs and {len(outputs)} outputs; the model "
                           f"has {len(self.inputs)} and {len(self.outputs)}")
        if self._fed:
            inputs = (c_void_p * (len(inputs) + len(self._fed)))(*inputs, *self._fed)
        self.api.check(self.api.Run(self.session, None, self._input_names, inputs, len(inputs),
                                    self._output_names, len(outputs), outputs), "Run")

    def end_profiling(self) -> str:
        """Stops profiling (a session profiles once) and returns the path of the
        JSON trace onnxruntime wrote."""
        raw = self.api._out(self.api.SessionEndProfiling, "SessionEndProfiling", self.session,
                            self.api.allocator)
        try:
            return ctypes.string_at(raw).decode()
        finally:
            self.api.check(self.api.AllocatorFree(self.api.allocator, raw), "AllocatorFree")

    def close(self) -> None:
        if self.session is not None:
            self.api.ReleaseSession(self.session)
            self.session = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - finalizers must not raise (interpreter exit)
            pass
