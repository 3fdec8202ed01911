"""TR01 constants, the dtype table and the parsed-blob types.

Every constant the C++ adapter shares (MAGIC, HEADER_FORMAT, HEADER_SIZE,
ALIGNMENT, the dtype codes) is a plain literal at module level: the native
build step reads them from this file with ``ast``, without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
#: corresponds to. "float8" is TensorRT's FP8, i.e. Float8_e4m3fn.
DTYPE_TO_SCALAR_TYPE = {
    "uint8": 0,  # Byte
    "int8": 1,  # Char
    "int32": 3,  # Int
    "int64": 4,  # Long
    "float16": 5,  # Half
    "float32": 6,  # Float
    "bool": 11,  # Bool
    "bfloat16": 15,  # BFloat16
    "float8": 24,  # Float8_e4m3fn
}
#: Bytes per element of each dtype above.
DTYPE_ITEMSIZE = {"uint8": 1, "int8": 1, "int32": 4, "int64": 8, "float16": 2, "float32": 4,
                  "bool": 1, "bfloat16": 2, "float8": 1}
#: Dtypes a named-data weight (blob "weights") may have besides those above:
#: "int4", two per byte (element 2j in the low nibble), the weights of an INT4
#: weight-only layer (docs/quantization.md).
PACKED_WEIGHT_DTYPES = ("int4",)
WEIGHT_DTYPES = frozenset(DTYPE_ITEMSIZE) | frozenset(PACKED_WEIGHT_DTYPES)


def weight_nbytes(dtype: str, count: int) -> int:
    """Bytes of a named-data weight of `count` elements (ceil(count / 2) for int4)."""
    return (count + 1) // 2 if dtype == "int4" else count * DTYPE_ITEMSIZE[dtype]


#: What write_blob accepts as a dtype: the names above, or "" for "not
#: recorded" (Torch-TensorRT's ExecuTorch path writes "").
WRITE_DTYPES = frozenset(DTYPE_TO_SCALAR_TYPE) | {""}
# read_blob also accepts str(torch.dtype), which an earlier Torch-TensorRT
# ExecuTorch helper wrote ("torch.float32").
_TORCH_DTYPE_NAMES = ("uint8", "int8", "int16", "int32", "int64", "float16",
                      "float32", "float64", "bool", "bfloat16",
                      "float8_e4m3fn", "float8_e5m2")
READ_DTYPES = WRITE_DTYPES | {"torch." + n for n in _TORCH_DTYPE_NAMES}


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

    ``metadata`` is the JSON object without the writer's own keys ("sections",
    "engine_sha256"), so ``read_blob(write_blob(e, m)).metadata == m``.
    """

    engine: bytes = field(repr=False)
    metadata: dict
    onnx: bytes | None = field(repr=False)
    sections: tuple[Section, ...] = ()
    metadata_offset: int = 0
    metadata_size: int = 0
    engine_offset: int = 0
    engine_size: int = 0
    reserved: bytes = b"\0" * 8
    engine_sha256: str | None = None  # None: the blob records no digests (Torch-TensorRT's)

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
        return self.metadata.get("engine", "full")

    @property
    def state(self) -> list:
        """Delegate-owned state entries ([] when the partition has none)."""
        return self.metadata.get("state", [])

    @property
    def aliased_io(self) -> list:
        """Torch-TensorRT's in-place output pairs ([] for a TR01 blob)."""
        return self.metadata.get("aliased_io", [])

    @property
    def weights(self) -> list:
        """The named-data weights ([] when the weights are inline)."""
        return self.metadata.get("weights", [])

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
