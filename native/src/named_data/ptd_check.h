/*
 * Checks a program's named data before anything reads through its index.
 *
 * ExecuTorch's FlatTensorDataMap (a .ptd) follows the flatbuffer's offsets
 * without a verifier: a flipped bit in the index makes get_data read outside
 * the file (SIGSEGV), and its segment bound check compares a relative offset
 * against an absolute end. A backend only sees a NamedDataMap*, so we
 * recognise ExecuTorch's concrete map types by their vtable (exported by
 * libexecutorch), reach the bytes ExecuTorch loaded through a mirror of the
 * class layout in the pinned headers (sizes static_asserted), and verify the
 * header, the whole index and every segment's bounds before the first lookup.
 */
#ifndef EXECUTORCH_TENSORRT_PTD_CHECK_H
#define EXECUTORCH_TENSORRT_PTD_CHECK_H

#include <executorch/runtime/core/named_data_map.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace etrt {

/* Why an index is damaged, or empty when it is sound. Checks every
 * FlatTensorDataMap reachable from `map` (through ExecuTorch's merged maps);
 * a .pte's own named data was verified with the program. Maps of other types
 * (an application's own NamedDataMap) cannot be seen into: `unchecked` is set. */
std::string check_named_data_map(const executorch::runtime::NamedDataMap* map, bool* unchecked);

/* The checks over raw bytes (exposed for tests and the fuzzer's replay):
 * `fb` is the loaded flatbuffer [0, fb_size), `file_size` the .ptd's size. */
std::string check_flat_tensor(const uint8_t* fb, size_t fb_size, uint64_t flatbuffer_offset,
                              uint64_t flatbuffer_size, uint64_t segment_base_offset,
                              uint64_t segment_data_size, uint64_t file_size);

} // namespace etrt

#endif
