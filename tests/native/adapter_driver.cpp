// Test driver: plays ExecuTorch's part for the registered "TensorRTBackend".
// It calls the backend's init/execute/destroy exactly as a Method would
// (a FreeableBuffer for the blob, compile specs, load-time runtime specs,
// EValue arguments over real TensorImpls), so a test can drive the adapter
// with an executor table installed from Python, without a .pte file.
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace et = ::executorch::runtime;
using et::etensor::DeviceType;
using et::etensor::ScalarType;
using et::etensor::Tensor;
using et::etensor::TensorImpl;

namespace {
et::BackendInterface* backend() {
  return et::get_backend_class("TensorRTBackend");
}

void free_copy(void* context, void* data, size_t /*size*/) {
  std::free(data);
  if (context != nullptr) {
    *static_cast<int32_t*>(context) += 1;
  }
}

uint8_t g_runtime_pool[4096];
} // namespace

extern "C" {

// 1 if TensorRTBackend is registered and reports itself available, 0 if it
// is registered but unavailable, -1 if it is not registered.
int32_t drv_is_available(void) {
  et::BackendInterface* b = backend();
  return b == nullptr ? -1 : (b->is_available() ? 1 : 0);
}

// Runs init. The blob is copied into a malloc'd buffer whose free function
// increments *free_count, so the test sees whether the adapter freed it.
// fallback: NULL for no runtime spec; fallback_int != 0 passes the option
// "fallback" as an int instead (a type mistake the adapter must report).
int32_t drv_init(
    const void* blob,
    uint64_t size,
    const char* method_name,
    const char* fallback,
    int32_t fallback_int,
    const char* const* keys,
    const void* const* values,
    const uint64_t* value_sizes,
    uint64_t num_specs,
    int32_t* free_count,
    void** handle_out) {
  et::BackendInterface* b = backend();
  if (b == nullptr) {
    return -1;
  }
  void* copy = std::malloc(size > 0 ? size : 1);
  std::memcpy(copy, blob, size);
  et::FreeableBuffer processed(copy, size, free_copy, free_count);

  et::CompileSpec specs[16];
  if (num_specs > 16) {
    return -2;
  }
  for (uint64_t i = 0; i < num_specs; ++i) {
    specs[i].key = keys[i];
    specs[i].value.buffer = const_cast<void*>(values[i]);
    specs[i].value.nbytes = value_sizes[i];
  }

  et::BackendOption option;
  size_t num_options = 0;
  if (fallback != nullptr || fallback_int != 0) {
    std::strncpy(option.key, "fallback", sizeof(option.key) - 1);
    if (fallback_int != 0) {
      option.value = static_cast<int>(fallback_int);
    } else {
      std::array<char, et::kMaxOptionValueLength> value{};
      std::strncpy(value.data(), fallback, value.size() - 1);
      option.value = value;
    }
    num_options = 1;
  }

  et::MemoryAllocator allocator(sizeof(g_runtime_pool), g_runtime_pool);
  et::BackendInitContext context(
      &allocator,
      nullptr,
      method_name,
      nullptr,
      et::Span<const et::BackendOption>(&option, num_options));
  et::Result<et::DelegateHandle*> result = b->init(
      context, &processed, et::ArrayRef<et::CompileSpec>(specs, num_specs));
  if (!result.ok()) {
    return static_cast<int32_t>(result.error());
  }
  *handle_out = result.get();
  return 0;
}

// Runs init with one load-time backend option `key`: the string `text`, or
// the int `number` when text is NULL (the GPU runtime's "device" option).
int32_t drv_init_option(
    const void* blob,
    uint64_t size,
    const char* key,
    const char* text,
    int32_t number,
    void** handle_out) {
  et::BackendInterface* b = backend();
  if (b == nullptr) {
    return -1;
  }
  void* copy = std::malloc(size > 0 ? size : 1);
  std::memcpy(copy, blob, size);
  static int32_t freed = 0;  // the adapter frees the blob during init
  et::FreeableBuffer processed(copy, size, free_copy, &freed);
  et::BackendOption option;
  std::strncpy(option.key, key, sizeof(option.key) - 1);
  if (text == nullptr) {
    option.value = static_cast<int>(number);
  } else {
    std::array<char, et::kMaxOptionValueLength> value{};
    std::strncpy(value.data(), text, value.size() - 1);
    option.value = value;
  }
  et::MemoryAllocator allocator(sizeof(g_runtime_pool), g_runtime_pool);
  et::BackendInitContext context(
      &allocator, nullptr, "forward", nullptr,
      et::Span<const et::BackendOption>(&option, 1));
  et::Result<et::DelegateHandle*> result =
      b->init(context, &processed, et::ArrayRef<et::CompileSpec>());
  if (!result.ok()) {
    return static_cast<int32_t>(result.error());
  }
  *handle_out = result.get();
  return 0;
}

// Runs execute with the arguments (x: float[n] input, scale: int input,
// y: float output of capacity cap, dynamic-bound, initially [cap]). Passes
// only the first num_args of them (to test the arity check). in_device_cuda
// tags x as CUDA memory (the data stays on the host; the adapter only
// forwards the tag). *out_n receives y's element count afterwards.
int32_t drv_execute(
    void* handle,
    float* x,
    int32_t n,
    int64_t scale,
    float* y,
    int32_t cap,
    int32_t num_args,
    int32_t in_device_cuda,
    int32_t* out_n) {
  et::BackendInterface* b = backend();
  if (b == nullptr) {
    return -1;
  }
  TensorImpl::SizesType x_sizes[1] = {n};
  TensorImpl::DimOrderType x_order[1] = {0};
  TensorImpl::StridesType x_strides[1] = {1};
  TensorImpl x_impl(
      ScalarType::Float,
      1,
      x_sizes,
      x,
      x_order,
      x_strides,
      et::TensorShapeDynamism::STATIC,
      in_device_cuda ? DeviceType::CUDA : DeviceType::CPU,
      in_device_cuda ? 1 : 0);
  TensorImpl::SizesType y_sizes[1] = {cap};
  TensorImpl::DimOrderType y_order[1] = {0};
  TensorImpl::StridesType y_strides[1] = {1};
  TensorImpl y_impl(
      ScalarType::Float,
      1,
      y_sizes,
      y,
      y_order,
      y_strides,
      et::TensorShapeDynamism::DYNAMIC_BOUND);

  et::EValue values[3] = {
      et::EValue(Tensor(&x_impl)),
      et::EValue(scale),
      et::EValue(Tensor(&y_impl))};
  et::EValue* args[3] = {&values[0], &values[1], &values[2]};
  et::BackendExecutionContext context;
  const et::Error err = b->execute(
      context, handle, et::Span<et::EValue*>(args, static_cast<size_t>(num_args)));
  *out_n = static_cast<int32_t>(y_impl.numel());
  return static_cast<int32_t>(err);
}

void drv_destroy(void* handle) {
  et::BackendInterface* b = backend();
  if (b != nullptr) {
    b->destroy(handle);
  }
}

} // extern "C"
