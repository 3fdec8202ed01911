/*
 * executorch-tensorrt: the adapter's check of a blob's fixed TR01 header.
 *
 * The adapter reads no metadata field: it hands the blob to the executors,
 * whose reader (read_blob in the Python package) parses and validates the
 * JSON metadata and the section table. Before that, the adapter checks what
 * any reader needs to trust first: the 32-byte little-endian header
 * "<4sIIIQ8s" (magic, metadata offset, metadata size, engine offset aligned
 * to 16, engine size, reserved) and that the metadata and engine regions lie
 * inside the blob, after the header, in that order, without overlapping.
 * The constants come from the Python format module (etrt_blob_constants.h,
 * generated at build time); see docs/blob-format.md.
 */
#ifndef EXECUTORCH_TENSORRT_BLOB_HEADER_H
#define EXECUTORCH_TENSORRT_BLOB_HEADER_H

#include <cstddef>
#include <cstdint>

namespace etrt {

struct BlobHeader {
  uint64_t metadata_offset;
  uint64_t metadata_size;
  uint64_t engine_offset;
  uint64_t engine_size;
};

/* Parses and checks the header of data[0, size). Returns true and fills *out
 * if it is sound; otherwise false with a NUL-terminated reason in
 * err[0, err_len) (err may be NULL when err_len is 0). Reads nothing outside
 * data[0, size); never allocates. */
bool parse_blob_header(const void* data, uint64_t size, BlobHeader* out,
                       char* err, size_t err_len);

} // namespace etrt

#endif
