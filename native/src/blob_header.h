/*
 * executorch-tensorrt: validation of the delegate's processed blob (TR01
 * layout plus extension sections). See docs/blob-format.md for the format
 * and src/executorch_tensorrt/blob.py for the writer and Python reader,
 * which accepts and rejects the same blobs as this validator.
 *
 *   offset 0   header, 32 bytes, little-endian:
 *              char magic[4] = "TR01"; uint32 metadata_offset;
 *              uint32 metadata_size; uint32 engine_offset (multiple of 16);
 *              uint64 engine_size; uint8 reserved[8]
 *   metadata   UTF-8 JSON object with an "io_bindings" array
 *   engine     engine_size bytes at engine_offset
 *   sections   listed in the metadata's "sections" array
 *              ({"name", "offset", "size"}), after the engine, in order,
 *              each at a multiple of 16
 */
#ifndef EXECUTORCH_TENSORRT_BLOB_HEADER_H
#define EXECUTORCH_TENSORRT_BLOB_HEADER_H

#include <stdint.h>

#define ETRT_BLOB_MAGIC "TR01"
#define ETRT_BLOB_HEADER_SIZE 32u
#define ETRT_BLOB_ALIGNMENT 16u
/* Metadata JSON may nest at most this many arrays/objects. */
#define ETRT_BLOB_MAX_JSON_DEPTH 64
/* The top-level object and each io_bindings / sections entry may hold at
 * most this many keys, none of them twice. */
#define ETRT_BLOB_MAX_OBJECT_KEYS 128

#ifdef __cplusplus
extern "C" {
#endif

/* Validates a blob: header fields, bounds (overflow-safe), alignment,
 * non-overlap of header/metadata/engine/sections, strict JSON metadata
 * whose top level is an object with a well-formed "io_bindings" array, and
 * the "sections" table if present. Reads only data[0, size).
 * Returns 0 if valid; otherwise non-zero, and writes a NUL-terminated
 * reason into err (truncated to err_len bytes; err may be NULL or err_len
 * 0). Never allocates, never throws. Declared identically in
 * <executorch_tensorrt/executor_table.h>. */
int32_t etrt_validate_blob(const void* data, uint64_t size, char* err,
                           uint64_t err_len);

#ifdef __cplusplus
}
#endif

#endif
