/*
 * executorch-tensorrt: the CUDA DeviceAllocator (see cuda_allocator.h).
 *
 * Uses the CUDA driver API from libcuda.so.1, dlopened on the first call
 * that needs it, and the device's primary context (the one the CUDA runtime,
 * PyTorch and TensorRT use), pushed for each call and popped after.
 */
#include "cuda_allocator.h"

#include <executorch/runtime/core/device_allocator.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "dl_symver.h"

namespace etrt {
namespace {

namespace et = ::executorch::runtime;
using et::Error;
using et::Result;
using DeviceType = ::executorch::runtime::etensor::DeviceType;
using DeviceIndex = ::executorch::runtime::etensor::DeviceIndex;

/* The few driver API types and functions used (cuda.h, stable ABI). */
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUdeviceptr = unsigned long long;

struct Driver {
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxPushCurrent)(CUcontext);
  CUresult (*cuCtxPopCurrent)(CUcontext*);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuGetErrorName)(CUresult, const char**);
};

constexpr int kMaxDevices = 64;
/* cuMemAlloc returns memory aligned to at least this. */
constexpr size_t kDriverAlignment = 256;

class CudaAllocator final : public et::DeviceAllocator {
 public:
  explicit CudaAllocator(ReportFn report) : report_(report) {}

  Result<void*> allocate(size_t nbytes, DeviceIndex index, size_t alignment)
      override {
    char what[96];
    std::snprintf(what, sizeof(what), "allocate %zu bytes on cuda:%d", nbytes,
                  static_cast<int>(index));
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 ||
        alignment > kDriverAlignment) {
      char buf[160];
      std::snprintf(buf, sizeof(buf),
                    "alignment %zu is not supported (a power of two up to %zu, what "
                    "cuMemAlloc guarantees)", alignment, kDriverAlignment);
      fail(what, buf);
      return Error::InvalidArgument;
    }
    CUcontext ctx = nullptr;
    Error err = enter(index, what, &ctx);
    if (err != Error::Ok) {
      return err;
    }
    CUdeviceptr ptr = 0;
    const CUresult r = driver_.cuMemAlloc(&ptr, nbytes == 0 ? 1 : nbytes);
    leave();
    if (r != 0) {
      fail(what, "cuMemAlloc failed: " + name_of(r));
      return Error::MemoryAllocationFailed;
    }
    return reinterpret_cast<void*>(static_cast<uintptr_t>(ptr));
  }

  void deallocate(void* ptr, DeviceIndex index) override {
    if (ptr == nullptr) {
      return;
    }
    CUcontext ctx = nullptr;
    if (enter(index, "free device memory", &ctx) != Error::Ok) {
      return;
    }
    // At process exit the driver may already be shut down; nothing to do then.
    driver_.cuMemFree(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr)));
    leave();
  }

  Error copy_host_to_device(void* dst, const void* src, size_t nbytes,
                            DeviceIndex index) override {
    return copy(true, dst, src, nbytes, index);
  }

  Error copy_device_to_host(void* dst, const void* src, size_t nbytes,
                            DeviceIndex index) override {
    return copy(false, dst, src, nbytes, index);
  }

  DeviceType device_type() const override {
    return DeviceType::CUDA;
  }

 private:
  Error copy(bool to_device, void* dst, const void* src, size_t nbytes,
             DeviceIndex index) {
    char what[96];
    std::snprintf(what, sizeof(what), "copy %zu bytes %s cuda:%d", nbytes,
                  to_device ? "to" : "from", static_cast<int>(index));
    if (nbytes == 0) {
      return Error::Ok;
    }
    CUcontext ctx = nullptr;
    Error err = enter(index, what, &ctx);
    if (err != Error::Ok) {
      return err;
    }
    const CUresult r = to_device
        ? driver_.cuMemcpyHtoD(
              static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(dst)), src, nbytes)
        : driver_.cuMemcpyDtoH(
              dst, static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(src)), nbytes);
    leave();
    if (r != 0) {
      fail(what, std::string(to_device ? "cuMemcpyHtoD" : "cuMemcpyDtoH") +
                     " failed: " + name_of(r));
      return Error::Internal;
    }
    return Error::Ok;
  }

  /* Loads the driver once; returns "" or why CUDA cannot be used. */
  const std::string& load_driver() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (loaded_) {
      return load_error_;
    }
    loaded_ = true;
    void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = ::dlerror();
      load_error_ = std::string("no CUDA driver (libcuda.so.1 cannot be loaded: ") +
          (e != nullptr ? e : "unknown error") + ")";
      return load_error_;
    }
    struct {
      const char* name;
      void** slot;
    } const entries[] = {
        {"cuInit", reinterpret_cast<void**>(&driver_.cuInit)},
        {"cuDeviceGetCount", reinterpret_cast<void**>(&driver_.cuDeviceGetCount)},
        {"cuDeviceGet", reinterpret_cast<void**>(&driver_.cuDeviceGet)},
        {"cuDevicePrimaryCtxRetain",
         reinterpret_cast<void**>(&driver_.cuDevicePrimaryCtxRetain)},
        {"cuCtxPushCurrent_v2", reinterpret_cast<void**>(&driver_.cuCtxPushCurrent)},
        {"cuCtxPopCurrent_v2", reinterpret_cast<void**>(&driver_.cuCtxPopCurrent)},
        {"cuMemAlloc_v2", reinterpret_cast<void**>(&driver_.cuMemAlloc)},
        {"cuMemFree_v2", reinterpret_cast<void**>(&driver_.cuMemFree)},
        {"cuMemcpyHtoD_v2", reinterpret_cast<void**>(&driver_.cuMemcpyHtoD)},
        {"cuMemcpyDtoH_v2", reinterpret_cast<void**>(&driver_.cuMemcpyDtoH)},
        {"cuGetErrorName", reinterpret_cast<void**>(&driver_.cuGetErrorName)},
    };
    for (const auto& e : entries) {
      *e.slot = ::dlsym(lib, e.name);
      if (*e.slot == nullptr) {
        load_error_ = std::string("the CUDA driver libcuda.so.1 lacks ") + e.name +
            " (driver too old)";
        return load_error_;
      }
    }
    const CUresult r = driver_.cuInit(0);
    int count = 0;
    if (r != 0) {
      load_error_ = "the CUDA driver failed to initialise (" + name_of(r) + ")";
    } else if (driver_.cuDeviceGetCount(&count) != 0 || count == 0) {
      load_error_ = "the CUDA driver reports no GPU";
    }
    return load_error_;
  }

  /* Makes `index`'s primary context current (pushed; leave() pops it). */
  Error enter(DeviceIndex index, const char* what, CUcontext* ctx) {
    const std::string& why = load_driver();
    if (!why.empty()) {
      fail(what, why + "; this program keeps tensors in CUDA memory, which needs "
                       "an NVIDIA GPU and its driver");
      return Error::NotSupported;
    }
    if (index < 0 || index >= kMaxDevices) {
      fail(what, "device index out of range");
      return Error::InvalidArgument;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      *ctx = contexts_[index];
      if (*ctx == nullptr) {
        CUdevice dev = 0;
        CUresult r = driver_.cuDeviceGet(&dev, index);
        if (r == 0) {
          r = driver_.cuDevicePrimaryCtxRetain(ctx, dev);
        }
        if (r != 0) {
          fail(what, "no usable CUDA device " + std::to_string(index) + " (" +
                         name_of(r) + ")");
          return Error::NotSupported;
        }
        contexts_[index] = *ctx; // retained for the life of the process
      }
    }
    const CUresult r = driver_.cuCtxPushCurrent(*ctx);
    if (r != 0) {
      fail(what, "cuCtxPushCurrent failed: " + name_of(r));
      return Error::Internal;
    }
    return Error::Ok;
  }

  void leave() {
    CUcontext popped = nullptr;
    driver_.cuCtxPopCurrent(&popped);
  }

  std::string name_of(CUresult r) {
    const char* name = nullptr;
    if (driver_.cuGetErrorName != nullptr && driver_.cuGetErrorName(r, &name) == 0 &&
        name != nullptr) {
      return std::string(name) + " (" + std::to_string(r) + ")";
    }
    return "CUresult " + std::to_string(r);
  }

  void fail(const char* what, const std::string& why) {
    const std::string message =
        std::string("CUDA device allocator: cannot ") + what + ": " + why;
    if (report_ != nullptr) {
      report_(message);
    }
    std::fprintf(stderr, "[executorch_tensorrt] %s\n", message.c_str());
    std::fflush(stderr);
  }

  ReportFn report_;
  std::mutex mutex_;
  bool loaded_ = false;
  std::string load_error_;
  Driver driver_{};
  CUcontext contexts_[kMaxDevices] = {};
};

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

} // namespace

std::string register_cuda_allocator(ReportFn report) {
  if (env_set(kNoCudaAllocatorEnv)) {
    return std::string("CUDA device allocator not registered (") +
        kNoCudaAllocatorEnv + " is set)";
  }
  if (et::get_device_allocator(DeviceType::CUDA) != nullptr) {
    // Another library (e.g. ExecuTorch's CUDA backend) provides it; a second
    // registration would abort the process.
    return "CUDA device allocator already registered by another library";
  }
  // Never destroyed: the registry keeps the pointer until the process ends,
  // and buffers may be freed from other libraries' static destructors.
  auto* allocator = new (std::nothrow) CudaAllocator(report);
  if (allocator == nullptr) {
    return "CUDA device allocator not registered (out of memory)";
  }
  et::register_device_allocator(allocator);
  return "CUDA device allocator registered";
}

} // namespace etrt
