"""TR01 constants, the blob's dtype names and the parsed-blob types.

Every constant the C++ adapter shares (MAGIC, HEADER_FORMAT, HEADER_SIZE,
ALIGNMENT) is a plain literal at module level: the native build step reads
them from this file with ``ast``, without importing it. The C++ side reads
no dtype; the dtype names and codes here are views of dtypes.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..dtypes import DTYPES
from ..errors import InvalidProgramError

MAGIC = b"TR01"
MAGIC_ALIASED = b"TR02"  # Torch-TensorRT: the same layout, with "aliased_io" entries
HEADER_FORMAT = "<4sIIIQ8s"
HEADER_SIZE = 32  # struct.calcsize(HEADER_FORMAT); a test checks they agree
ALIGNMENT = 16
SCHEMA_VERSION = 1
SECTION_ONNX = "onnx"

#: Metadata JSON may nest at most this many arrays/objects (the top-level
#: object counts as one).
MAX_JSON_DEPTH = 64
#: The objects whose keys this format checks for repeats (the top-level
#: object, each io_bindings entry, each sections entry) may hold at most
#: this many keys.
MAX_OBJECT_KEYS = 128

#: Digest keys the writer adds: the engine's at the top level, each
#: section's in its "sections" entry. Values are lowercase hex SHA-256.
ENGINE_DIGEST_KEY = "engine_sha256"
SECTION_DIGEST_KEY = "sha256"

#: What the runtime reads besides io_bindings, with the values it understands.
PRECISIONS = ("fp32", "fp16", "bf16")
#: "engine": what the engine region holds. "full": a plan with its weights
#: (the default, and every upstream blob); "stripped": a weight-stripped plan
#: refitted at load from the named data; "none": no plan (engine size 0), the
#: executor builds one at load from the ONNX section and the named data.
ENGINE_KINDS = ("full", "stripped", "none")
#: "weights_location": where the ONNX graph's large initializers are.
#: "inline": inside the ONNX section (the default); "named_data": in the
#: program's named data (.pte or .ptd), listed in "weights".
WEIGHTS_LOCATIONS = ("inline", "named_data")
#: The external-data "location" of an ONNX initializer whose bytes are in the
#: program's named data (listed in "weights"). A sentinel, never a file: the
#: runtime refuses every other external-data reference.
NAMED_DATA_LOCATION = "etrt-named-data"
#: A named-data key is at most this many printable ASCII characters.
MAX_KEY_LENGTH = 256
TRT_FLAVORS = ("tensorrt", "tensorrt_rtx")

U32_MAX = 0xFFFFFFFF
U64_MAX = 0xFFFFFFFFFFFFFFFF
I64_MAX = 0x7FFFFFFFFFFFFFFF
I32_MIN, I32_MAX = -(2**31), 2**31 - 1

#: The dtype strings of io_bindings entries, as ExecuTorch's upstream
#: TensorRT delegate writes them (backends/nvidia/tensorrt/backend.py,
#: ``_trt_dtype_to_string``), with the ExecuTorch ScalarType code each one
#: corresponds to: the rows of dtypes.py that have a blob name. "float8" is
#: TensorRT's FP8, i.e. Float8_e4m3fn.
DTYPE_TO_SCALAR_TYPE = {d.blob_name: d.scalar_type for d in DTYPES if d.blob_name}
#: Bytes per element of each dtype above.
DTYPE_ITEMSIZE = {d.blob_name: d.itemsize for d in DTYPES if d.blob_name}
#: Dtypes a named-data weight (blob "weights") may have besides those above,
#: packed below a byte, with their ONNX TensorProto code: "int4" and
#: "float4_e2m1", two per byte (element 2j in the low nibble), the weights of
#: an INT4 / FP4 weight-only layer (docs/quantization.md). ExecuTorch has no
#: ScalarType for them, so they are no rows of dtypes.py: only named data and
#: the embedded ONNX graph carry them.
PACKED_WEIGHT_DTYPES = {"int4": 22, "float4_e2m1": 23}  # onnx.TensorProto.INT4, FLOAT4E2M1
WEIGHT_DTYPES = frozenset(DTYPE_ITEMSIZE) | frozenset(PACKED_WEIGHT_DTYPES)


def weight_nbytes(dtype: str, count: int) -> int:
    """Bytes of a named-data weight of `count` elements (ceil(count / 2) when packed)."""
    return (count + 1) // 2 if dtype in PACKED_WEIGHT_DTYPES else count * DTYPE_ITEMSIZE[dtype]


#: What write_blob accepts as a dtype: the names above, or "" for "not
#: recorded" (Torch-TensorRT's ExecuTorch path writes "").
WRITE_DTYPES = frozenset(DTYPE_TO_SCALAR_TYPE) | {""}
# read_blob also accepts str(torch.dtype) of every row, which an earlier
# Torch-TensorRT ExecuTorch helper wrote ("torch.float32").
READ_DTYPES = WRITE_DTYPES | {"torch." + d.torch for d in DTYPES}


class BlobError(InvalidProgramError):
    """A blob (or the input to write_blob) is malformed; the message says how."""


@dataclass(frozen=True)
class Section:
    """An extension section stored after the engine."""

    name: str
    offset: int
    size: int
    data: bytes = field(repr=False)
    sha256: str | None = None  # as recorded at export; None in blobs without digests


@dataclass(frozen=True)
class Blob:
    """A parsed blob.

    ``meta`` is the typed, checked metadata (blob/metadata.py) that runtime
    code reads. ``metadata`` and the list properties below are its JSON form
    (without the writer's own keys "sections" and "engine_sha256", so
    ``read_blob(write_blob(e, m)).metadata == m``), for tools that show or
    edit the JSON.
    """

    engine: bytes = field(repr=False)
    meta: "BlobMetadata"  # noqa: F821 - blob.metadata imports this module
    onnx: bytes | None = field(repr=False)
    sections: tuple[Section, ...] = ()
    metadata_offset: int = 0
    metadata_size: int = 0
    engine_offset: int = 0
    engine_size: int = 0
    reserved: bytes = b"\0" * 8
    engine_sha256: str | None = None  # None: the blob records no digests (Torch-TensorRT's)

    @property
    def metadata(self) -> dict:
        """The metadata as a JSON object (a fresh copy each time)."""
        return self.meta.to_json()

    @property
    def io_bindings(self) -> list:
        return self.metadata["io_bindings"]

    @property
    def schema_version(self) -> int:
        """Reserved byte 0 (1 for blobs written here and by Torch-TensorRT,
        0 for ExecuTorch's upstream delegate)."""
        return self.reserved[0]

    @property
    def engine_kind(self) -> str:
        """One of ENGINE_KINDS ("full" when the metadata does not say)."""
        return self.meta.engine_kind

    @property
    def state(self) -> list:
        """Delegate-owned state entries as JSON ([] when the partition has none)."""
        return [e.to_json() for e in self.meta.state or ()]

    @property
    def aliased_io(self) -> list:
        """Torch-TensorRT's in-place output pairs as JSON ([] for a TR01 blob)."""
        return [a.to_json() for a in self.meta.aliased_io or ()]

    @property
    def weights(self) -> list:
        """The named-data weights as JSON ([] when the weights are inline)."""
        return [w.to_json() for w in self.meta.weights or ()]

    @property
    def has_digests(self) -> bool:
        return self.engine_sha256 is not None

    def section(self, name: str) -> bytes | None:
        for s in self.sections:
            if s.name == name:
                return s.data
        return None


def align(n: int) -> int:
    return (n + ALIGNMENT - 1) & ~(ALIGNMENT - 1)


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def show(v: Any, limit: int = 40) -> str:
    """A value for an error message, cut to `limit` characters."""
    s = repr(v)
    return s if len(s) <= limit else s[: limit - 3] + "..."
