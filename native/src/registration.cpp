/*
 * Registers TensorRTBackend when the library is loaded (dlopen or program
 * start) and keeps the outcome for etrt_registration_status/_message, with
 * the real cause when the name is taken: which library holds it, or that
 * the registry is full.
 */
#include <executorch_tensorrt/executor_table.h>

#include "cuda_allocator.h"
#include "last_error.h"
#include "library_path.h"
#include "tensorrt_backend.h"

#include <executorch/runtime/backend/interface.h>

#include <cstdio>
#include <string>

namespace etrt {
namespace {

namespace et = ::executorch::runtime;

int32_t g_status = -1;
std::string g_message = "registration has not run";

std::string hex(unsigned value) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%x", value);
  return buf;
}

/* Why register_backend(TensorRTBackend) failed with `err`. */
std::string why_not_registered(et::Error err) {
  const std::string failed = std::string("register_backend(\"") + kBackendId +
      "\") failed with error " + hex(static_cast<unsigned>(err));
  et::BackendInterface* holder = et::get_backend_class(kBackendId);
  if (holder == nullptr) {
    return failed + " while " + std::to_string(et::get_num_registered_backends()) +
        " backends were registered; the ExecuTorch backend registry is probably full (it "
        "has a fixed capacity). Load fewer backend libraries in this process.";
  }
  // The holder is usually a static object; if it is on the heap, its vtable
  // still lives in the library that defined the class.
  std::string where = library_containing(holder);
  if (where.empty()) {
    where = library_containing(*reinterpret_cast<void* const*>(holder));
  }
  if (where.empty()) {
    where = "an unknown library (not found by dladdr)";
  }
  return failed + ": the name is already held by another backend, defined in " + where +
      ". This adapter (" + this_library() + ") cannot serve TensorRTBackend programs in "
      "this process. Load only one TensorRT delegate: stop loading " + where +
      " (or uninstall the package that provides it), then retry.";
}

struct Registrar {
  Registrar() {
    static const et::Backend entry{kBackendId, tensorrt_backend()};
    const et::Error err = et::register_backend(entry);
    g_status = static_cast<int32_t>(err);
    if (err != et::Error::Ok) {
      g_message = why_not_registered(err);
      return;
    }
    g_message = std::string(kBackendId) + " registered by " + this_library();
    // Device-resident and CUDA-planned programs need a CUDA allocator; CUDA
    // itself is loaded only when one is used (cuda_allocator.cpp).
    register_cuda_allocator(&set_last_error);
  }
};

Registrar g_registrar;

} // namespace
} // namespace etrt

extern "C" {

int32_t etrt_registration_status(void) {
  return etrt::g_status;
}

const char* etrt_registration_message(void) {
  return etrt::g_message.c_str();
}

} // extern "C"
