/*
 * The program's named data (weights stored outside the blob, in the .pte's
 * named-data segment or a .ptd) handed to the executors through
 * etrt_init_args.get_named_data. Each buffer ExecuTorch returns is kept here,
 * in the delegate handle, until destroy, so executors can use the bytes in
 * place (ExecuTorch maps a file loaded from a path: no copy).
 */
#ifndef EXECUTORCH_TENSORRT_NAMED_DATA_H
#define EXECUTORCH_TENSORRT_NAMED_DATA_H

#include <executorch/runtime/core/freeable_buffer.h>
#include <executorch/runtime/core/named_data_map.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace etrt {

class NamedData {
 public:
  explicit NamedData(const executorch::runtime::NamedDataMap* map) : map_(map) {}
  NamedData(const NamedData&) = delete;
  NamedData& operator=(const NamedData&) = delete;

  /* etrt_get_named_data_fn: ctx is a NamedData*. */
  static int32_t lookup(void* ctx, const char* key, const void** data, uint64_t* nbytes);

  /* init has returned: the map may go away; the held buffers stay. */
  void end_init() {
    map_ = nullptr;
    init_done_ = true;
  }

 private:
  int32_t get(const char* key, const void** data, uint64_t* nbytes);

  const executorch::runtime::NamedDataMap* map_;
  bool init_done_ = false;
  bool map_checked_ = false;
  std::string map_damage_; // why the map's index is damaged (ptd_check.h), or empty
  struct Held {
    std::string key;
    std::unique_ptr<executorch::runtime::FreeableBuffer> buffer;
  };
  std::vector<Held> held_;
};

} // namespace etrt

#endif
