"""The TensorRT delegate's processed blob: the TR01 layout plus extensions.

Layout (all integers little-endian; see docs/blob-format.md)::

    offset 0   header, 32 bytes, struct "<4sIIIQ8s":
               magic b"TR01", metadata offset (u32), metadata size (u32),
               engine offset (u32, multiple of 16), engine size (u64),
               8 reserved bytes (byte 0: schema version 1, the rest zero)
    offset 32  metadata: compact UTF-8 JSON object, "io_bindings" first
               zero padding to a multiple of 16
               engine bytes (the serialized TensorRT engine)
               for each extension section, in order: zero padding to a
               multiple of 16, then the section's bytes ("onnx" first)

The metadata lists the sections (``"sections": [{"name", "offset", "size",
"sha256"}, ...]``, absolute offsets) and the engine's SHA-256
(``"engine_sha256"``), so a parser that knows only TR01 still finds the
engine at the header's offset and ignores everything after it.

Modules: ``format`` (constants, dtype table, Blob/Section), ``metadata``
(``BlobMetadata``: the typed metadata, checked on write and read; with
``metadata_profiles``, ``metadata_entries``, ``metadata_state`` and the shared
``json_checks``), ``writer``, ``reader``. The C++
adapter (native/src/blob_header.cpp) checks the fixed header and regions only.
"""

from __future__ import annotations

from .format import (
    ALIGNMENT,
    DTYPE_TO_SCALAR_TYPE,
    ENGINE_DIGEST_KEY,
    HEADER_FORMAT,
    HEADER_SIZE,
    MAGIC,
    MAX_JSON_DEPTH,
    MAX_OBJECT_KEYS,
    PRECISIONS,
    READ_DTYPES,
    SCHEMA_VERSION,
    SECTION_DIGEST_KEY,
    SECTION_ONNX,
    TRT_FLAVORS,
    WRITE_DTYPES,
    Blob,
    BlobError,
    Section,
)
from .reader import read_blob
from .writer import write_blob

__all__ = [
    "ALIGNMENT",
    "Blob",
    "BlobError",
    "DTYPE_TO_SCALAR_TYPE",
    "ENGINE_DIGEST_KEY",
    "HEADER_FORMAT",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_JSON_DEPTH",
    "MAX_OBJECT_KEYS",
    "PRECISIONS",
    "READ_DTYPES",
    "SCHEMA_VERSION",
    "SECTION_DIGEST_KEY",
    "SECTION_ONNX",
    "Section",
    "TRT_FLAVORS",
    "WRITE_DTYPES",
    "read_blob",
    "write_blob",
]
