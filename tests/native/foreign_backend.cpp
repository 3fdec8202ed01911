// A library that is not executorch_tensorrt but registers "TensorRTBackend"
// when loaded: the adapter must then refuse to load and name this file.
#include <executorch/runtime/backend/interface.h>

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
const et::Error g_status = et::register_backend(g_entry);
} // namespace

extern "C" int foreign_backend_status() { return static_cast<int>(g_status); }
