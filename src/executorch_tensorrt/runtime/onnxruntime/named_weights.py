"""Feeds a partition's named-data weights to onnxruntime without copying them.

The weightless ONNX declares each weight as an EXTERNAL initializer at the
sentinel location (onnx_safety.py checked that). Each weight that stays where
it lies (the named data's own memory, mapped from the .pte/.ptd by
ExecuTorch, or our upcast/decoded copy) is handed over as one logical "file
in memory" (AddExternalInitializersFromFilesInMemory) under a location of its
own, which `located` writes into the session's copy of the model, with
"session.use_external_initializer_file_buffers_directly" set: onnxruntime
then builds its initializer over that buffer and copies nothing, not even
while the session is built. The earlier way, AddInitializer together with
AddExternalInitializers, also ran over the caller's buffer afterwards, but
AddExternalInitializers first made a full copy of every weight for the
length of session creation, so the peak resident memory of a load was twice
the weights (docs/llm.md, "Memory"; tools/bench/ort_memory.py measures it).

Trade-off: prepacking ("session.disable_prepacking" unset) makes MatMul/Gemm
kernels keep one packed copy of their weights per session, which costs their
size in memory but runs faster than packing them on every call. So a
partition whose MatMul/Gemm weights total at most PREPACK_LIMIT is packed, a
bigger one is not; EXECUTORCH_TENSORRT_ORT_PREPACK=1 or 0 decides for every
partition.

onnxruntime's transpose optimizer (the level-1 "TransposeOptimizer" and the
per-EP "TransposeOptimizer_CPUExecutionProvider") pushes a Transpose through
an elementwise node by transposing or reshaping that node's constant input
(a ViTDet/SAM position embedding, a bias or norm read in NHWC) and replaces
the initializer under the same name. Over a file in memory it reads our
buffer and builds the new tensor in memory of its own: our buffer is never
written (ExecuTorch maps it read-only) and another session over the same
named data (a second method, a second partition) still reads it as stored.
tests/runtime/onnxruntime/test_named_weights.py checks both.

FP4 weights are decoded into float16 arrays owned here (fp4.py: onnxruntime
has no FLOAT4E2M1 kernels). onnxruntime folds each one's dequantizing Mul into
a float32 constant of its own while it builds the session, so those arrays
are freed once the executor's session is built (release_decoded_fp4;
tests/quantization/test_fp4.py poisons them first and compares with eager).

fp16/bf16 weights of a partition that the fallback upcasts (upcast.py;
onnxruntime's CPU kernels lack fp16) are converted into float32 arrays owned
here, unless they are cast where used (where_used.py): those are
model inputs with no initializer, fed as they are on every run (`fed`,
OrtSession.run): onnxruntime's layout rewrites never touch an input.
"""
from __future__ import annotations

import ctypes
import math
import os

import numpy as np
import onnx

from ...errors import ArgumentError
from ...blob.format import NAMED_DATA_LOCATION
from ..named_data import WeightBuffer
from ..onnx_safety import ONNX_DTYPES
from .fp4 import FP4_DTYPE, decode_e2m1

__all__ = ["PREPACK_ENV", "PREPACK_LIMIT", "OrtNamedWeights", "packable",
           "prepacking_requested"]

PREPACK_ENV = "EXECUTORCH_TENSORRT_ORT_PREPACK"
_FLOAT = ONNX_DTYPES["float32"]
_FLOAT16 = ONNX_DTYPES["float16"]
_EMPTY = ctypes.c_uint64(0)  # onnxruntime refuses a NULL buffer, even for an empty tensor


# fp32 kernels whose constant B onnxruntime's CPU provider packs once at session
# creation unless prepacking is off (its MatMul and Gemm PrePack).
_PACKED_BY = frozenset({"MatMul", "Gemm"})
#: With PREPACK_ENV unset, prepacking is on when a partition's MatMul/Gemm
#: weights total at most this: small models (LeViT-128S: 33 MB) run up to 1.2x
#: faster packed (docs/benchmarks.md), and the packed copy costs at most this
#: much memory per partition; bigger ones (LLMs) keep one copy of their weights.
PREPACK_LIMIT = 48 << 20


def _nodes(graph: onnx.GraphProto):
    """Every node of the graph and of its subgraphs (If/Loop/Scan bodies)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _nodes(sub)


def packable(model: bytes, names: list[str]) -> frozenset[str]:
    """The weights in `names` that a MatMul or Gemm reads: what prepacking copies."""
    wanted = set(names)
    graph = onnx.load_model_from_string(model).graph
    return frozenset(name for node in _nodes(graph) if node.op_type in _PACKED_BY
                     for name in node.input if name in wanted)


def prepacking_requested() -> bool | None:
    """PREPACK_ENV: True (1/on), False (0/off), None when unset (by size)."""
    text = os.environ.get(PREPACK_ENV, "").strip().lower()
    if not text:
        return None
    if text in ("1", "on", "true", "yes"):
        return True
    if text in ("0", "off", "false", "no"):
        return False
    raise ArgumentError(f"{PREPACK_ENV}={text!r} is not a prepacking choice: set 1 (pack "
                        "every partition's MatMul/Gemm weights), 0 (never; one copy of the "
                        "weights) or leave it unset (pack partitions whose MatMul/Gemm "
                        f"weights are {PREPACK_LIMIT >> 20} MiB or less)")


def _as_float32(w: WeightBuffer) -> np.ndarray:
    """The upcast copy of an fp16/bf16 weight."""
    if w.dtype == "float16":
        return np.frombuffer(w.view, dtype=np.float16).astype(np.float32).reshape(w.shape)
    bits = np.frombuffer(w.view, dtype=np.uint16).astype(np.uint32) << 16  # bfloat16
    return bits.view(np.float32).reshape(w.shape)


class OrtNamedWeights:
    """OrtValues over the weights; `configure` is OrtSession's hook. Keep this
    object (and the named data) alive as long as any session made with it."""

    def __init__(self, api, weights: list[WeightBuffer], upcast: bool,
                 prepack: bool | None = None, packable: frozenset[str] = frozenset(),
                 where_used: frozenset[str] = frozenset()):
        self.api = api
        self.where_used = where_used  # fp16/bf16 weights the graph casts itself: no copy
        # What prepacking would copy (packable()), counted as fp32, which it computes in.
        self.packable_bytes = sum(math.prod(w.shape) * 4 for w in weights if w.name in packable)
        if prepack is None:
            prepack = prepacking_requested()
        self.prepack = self.packable_bytes <= PREPACK_LIMIT if prepack is None else prepack
        self.copied_bytes = 0  # bytes the upcast copied (0 for fp32 partitions)
        self._owned: dict[str, np.ndarray] = {}  # our copies (upcast, fp4 decoded), by name
        self._sealed = False  # release_decoded_fp4 ran: no further session
        self._weights = weights  # keeps the views' exporters alive
        self.values: list[ctypes.c_void_p] = []
        self._buffers: list[tuple[int, int]] = []  # (address, nbytes) each value is over
        try:
            for w in weights:
                self.values.append(self._value(w, upcast))
        except BaseException:
            self.release()
            raise
        self._names = (ctypes.c_char_p * len(weights))(*(w.name.encode() for w in weights))
        # Handed over in place, each as a file in memory of its own (`located`):
        # every weight but those fed as inputs (`where_used`); an empty one has
        # no buffer to lend.
        direct = [i for i, w in enumerate(weights)
                  if w.name not in where_used and self._buffers[i][1]]
        self.locations = {weights[i].name: f"{NAMED_DATA_LOCATION}.{k}"
                          for k, i in enumerate(direct)}
        self._files = (ctypes.c_char_p * len(direct))(
            *(self.locations[weights[i].name].encode() for i in direct))
        self._file_buffers = (ctypes.c_void_p * len(direct))(*(self._buffers[i][0] for i in direct))
        self._file_lengths = (ctypes.c_size_t * len(direct))(*(self._buffers[i][1] for i in direct))
        # Empty weights, which onnxruntime copies (AddExternalInitializers).
        copied = [(n, v.value) for n, v in zip(self._names, self.values)
                  if n.decode() not in self.locations and n.decode() not in where_used]
        self._copied_names = (ctypes.c_char_p * len(copied))(*(n for n, _ in copied))
        self._copied = (ctypes.c_void_p * len(copied))(*(v for _, v in copied))
        #: (name, OrtValue) of the weights cast where used: the model's last
        #: inputs (upcast.upcast_to_fp32), which OrtSession feeds on every run.
        self.fed = [(n, v) for n, v in zip(self._names, self.values) if n.decode() in where_used]

    def located(self, model: bytes) -> bytes:
        """The model with each weight handed over in place pointing at its own
        file in memory (`locations`); what OrtSession creates its session from."""
        if not self.locations:
            return model
        proto = onnx.load_model_from_string(model)
        for tensor in proto.graph.initializer:
            location = self.locations.get(tensor.name)
            if location is not None:
                del tensor.external_data[:]
                tensor.external_data.add(key="location", value=location)
        return proto.SerializeToString()

    def _value(self, w: WeightBuffer, upcast: bool) -> ctypes.c_void_p:
        if w.dtype == FP4_DTYPE:  # its values as float16 (fp4.py rewrites after any upcast)
            address, nbytes = self._own(w, decode_e2m1(w.view, w.shape))
            element = _FLOAT16
        elif upcast and w.dtype in ("float16", "bfloat16") and w.name not in self.where_used:
            address, nbytes = self._own(w, _as_float32(w))
            element = _FLOAT
        else:
            address, nbytes, element = w.address, w.nbytes, ONNX_DTYPES[w.dtype]
        self._buffers.append((address, nbytes))
        return self.api.tensor(address or ctypes.addressof(_EMPTY), nbytes, w.shape, element)

    def _own(self, w: WeightBuffer, array: np.ndarray) -> tuple[int, int]:
        self._owned[w.name] = array
        self.copied_bytes += array.nbytes
        return array.ctypes.data, array.nbytes

    def release_decoded_fp4(self) -> int:
        """Frees our float16 copies of the FP4 weights: onnxruntime folded each
        into a float32 constant of its own when it built the session (module
        docstring), so nothing reads ours again. Call it once the last session
        made with this object is built (configure refuses afterwards); returns
        the bytes freed."""
        freed = 0
        for i, w in enumerate(self._weights):
            if w.dtype == FP4_DTYPE and w.name in self._owned:
                self.api.ReleaseValue(self.values[i])
                self.values[i] = None
                freed += self._owned.pop(w.name).nbytes
        self._sealed = True
        return freed

    def configure(self, api, options) -> None:
        if self._sealed:
            raise RuntimeError("these weights' decoded FP4 copies were released after their "
                               "session was built; a further session needs a new OrtNamedWeights")
        if not self.prepack:
            api.check(api.AddSessionConfigEntry(options, b"session.disable_prepacking", b"1"),
                      "AddSessionConfigEntry(session.disable_prepacking)")
        if self.where_used:
            # The casts' fp32 values (an LLM head's: 2.1 GB at a 128k vocabulary)
            # go back to the system after their last use: onnxruntime's arena
            # and memory patterns would keep the largest of each call shape.
            api.check(api.DisableCpuMemArena(options), "DisableCpuMemArena")
            api.check(api.DisableMemPattern(options), "DisableMemPattern")
        if len(self._files):
            api.check(api.AddSessionConfigEntry(
                options, b"session.use_external_initializer_file_buffers_directly", b"1"),
                "AddSessionConfigEntry(session.use_external_initializer_file_buffers_directly)")
            api.check(api.AddExternalInitializersFromFilesInMemory(
                options, self._files, self._file_buffers, self._file_lengths, len(self._files)),
                "AddExternalInitializersFromFilesInMemory")
        if len(self._copied):
            api.check(api.AddExternalInitializers(options, self._copied_names, self._copied,
                                                  len(self._copied)), "AddExternalInitializers")

    def release(self) -> None:
        """After every session made with these values is released."""
        for value in self.values:
            if value is not None:
                self.api.ReleaseValue(value)
        self.values = []
        self._owned = {}
        self._weights = []
