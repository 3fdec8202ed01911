// A library that is not executorch_tensorrt but registers "TensorRTBackend"
// when loaded: the adapter must then refuse to load and name this file.
// With FOREIGN_BACKEND_SKIP_TRT set it registers nothing at load, and
// foreign_fill_registry() fills ExecuTorch's fixed-size registry instead.
#include <executorch/runtime/backend/interface.h>

#include <cstdio>
#include <cstdlib>

namespace et = ::executorch::runtime;

namespace {
class ForeignBackend final : public et::BackendInterface {
 public:
  bool is_available() const override { return true; }
  et::Result<et::DelegateHandle*> init(
      et::BackendInitContext&, et::FreeableBuffer*,
      et::ArrayRef<et::CompileSpec>) const override {
    return et::Error::NotSupported;
  }
  et::Error execute(et::BackendExecutionContext&, et::DelegateHandle*,
                    et::Span<et::EValue*>) const override {
    return et::Error::NotSupported;
  }
};

ForeignBackend g_foreign;
const et::Backend g_entry{"TensorRTBackend", &g_foreign};
const int g_status = std::getenv("FOREIGN_BACKEND_SKIP_TRT") != nullptr
    ? -1
    : static_cast<int>(et::register_backend(g_entry));
} // namespace

// 0 if this library registered "TensorRTBackend", -1 if it was told not to.
extern "C" int foreign_backend_status() { return g_status; }

// Registers filler backends until the registry refuses one; returns how many
// were added.
extern "C" int foreign_fill_registry() {
  static char names[64][16];
  static et::Backend entries[64];
  int added = 0;
  for (int i = 0; i < 64; ++i) {
    std::snprintf(names[i], sizeof(names[i]), "Filler%d", i);
    entries[i] = et::Backend{names[i], &g_foreign};
    if (et::register_backend(entries[i]) != et::Error::Ok) {
      break;
    }
    ++added;
  }
  return added;
}
