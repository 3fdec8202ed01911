#include "named_data.h"

#include "last_error.h"
#include "ptd_check.h"

#include <cinttypes>
#include <new>

namespace etrt {

namespace et = ::executorch::runtime;

namespace {
constexpr const char* kPassThePtd =
    "pass the .ptd (Runtime.load_program(pte, data_path=...), C++ Module(pte, ptd), "
    "runner --data)";
} // namespace

int32_t NamedData::lookup(void* ctx, const char* key, const void** data, uint64_t* nbytes) {
  if (ctx == nullptr || key == nullptr || data == nullptr || nbytes == nullptr) {
    return fail(et::Error::InvalidArgument,
                "get_named_data was called with a NULL context, key or result pointer");
  }
  return static_cast<NamedData*>(ctx)->get(key, data, nbytes);
}

int32_t NamedData::get(const char* key, const void** data, uint64_t* nbytes) {
  *data = nullptr;
  *nbytes = 0;
  for (const Held& h : held_) {
    if (h.key == key) { // the same key again (weights shared inside a partition)
      *data = h.buffer->data();
      *nbytes = h.buffer->size();
      return 0;
    }
  }
  if (init_done_) {
    return fail(et::Error::InvalidState,
                "named data key '%s' was asked for after init returned; executors read "
                "named data during init only",
                key);
  }
  if (map_ == nullptr) {
    return fail(et::Error::NotFound,
                "the program's weights are in named data that was not supplied (key '%s'): %s",
                key, kPassThePtd);
  }
  if (!map_checked_) { // once per init, before anything reads through the index
    bool unchecked = false;
    map_damage_ = check_named_data_map(map_, &unchecked);
    map_checked_ = true;
  }
  if (!map_damage_.empty()) {
    return fail(et::Error::InvalidExternalData,
                "%s; named data key '%s' was not read. Re-export the program, or pass the "
                ".ptd exported with this .pte unchanged",
                map_damage_.c_str(), key);
  }
  et::Result<et::FreeableBuffer> found = map_->get_data(key);
  if (!found.ok()) {
    if (found.error() == et::Error::NotFound) {
      et::Result<uint32_t> count = map_->get_num_keys();
      return fail(et::Error::NotFound,
                  "the program's named data (%" PRIu32
                  " keys) has no key '%s': its weights are in a .ptd that was not passed, or "
                  "the .ptd passed belongs to another program; %s",
                  count.ok() ? count.get() : 0u, key, kPassThePtd);
    }
    return fail(found.error(),
                "reading named data key '%s' failed with ExecuTorch error 0x%" PRIx32
                " (a truncated or damaged .ptd?)",
                key, static_cast<uint32_t>(found.error()));
  }
  auto buffer = std::unique_ptr<et::FreeableBuffer>(
      new (std::nothrow) et::FreeableBuffer(std::move(found.get())));
  if (buffer == nullptr) {
    return fail(et::Error::MemoryAllocationFailed, "out of memory holding named data '%s'", key);
  }
  if (buffer->size() > 0 && buffer->data() == nullptr) {
    return fail(et::Error::InvalidProgram,
                "named data key '%s' has %zu bytes but no data pointer", key, buffer->size());
  }
  *data = buffer->data();
  *nbytes = buffer->size();
  held_.push_back(Held{key, std::move(buffer)});
  return 0;
}

} // namespace etrt
