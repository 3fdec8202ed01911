// Memory the reference runner gives a device-resident program
// (docs/device-resident.md): device buffers from the allocator the adapter
// registers with ExecuTorch, and the host storage behind the tensors it makes.
#pragma once

#include <executorch/runtime/core/device_allocator.h>
#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>
#include <executorch_tensorrt/executor_table.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace etrt_runner {

using executorch::runtime::DeviceAllocator;
using executorch::runtime::Error;
using executorch::runtime::etensor::DeviceIndex;
using executorch::runtime::etensor::DeviceType;
using executorch::runtime::etensor::TensorImpl;

// Owns the storage behind one tensor the runner makes: its shape arrays,
// host bytes and, for a CUDA tensor, the device copy.
struct OwnedTensor {
  std::vector<TensorImpl::SizesType> sizes;
  std::vector<TensorImpl::DimOrderType> dim_order;
  std::vector<TensorImpl::StridesType> strides;
  std::vector<uint8_t> data;
  std::unique_ptr<TensorImpl> impl;
};

// Device memory from ExecuTorch's registered device allocator, freed with it.
class DeviceMemory {
 public:
  DeviceMemory(DeviceAllocator* allocator, void* ptr, DeviceIndex index)
      : allocator_(allocator), ptr_(ptr), index_(index) {}
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { allocator_->deallocate(ptr_, index_); }
  void* get() const { return ptr_; }

 private:
  DeviceAllocator* allocator_;
  void* ptr_;
  DeviceIndex index_;
};

inline std::string device_name(DeviceType type, DeviceIndex index) {
  if (type == DeviceType::CUDA) return "cuda:" + std::to_string(index);
  return "device type " + std::to_string(static_cast<int>(type)) + ":" + std::to_string(index);
}

inline void print_error(const std::string& what, Error err) {
  const char* cause = etrt_last_error();
  std::fprintf(stderr, "error: %s: ExecuTorch error 0x%x (%s).%s%s\n", what.c_str(),
               static_cast<unsigned>(err), executorch::runtime::to_string(err),
               cause != nullptr && cause[0] != '\0' ? " " : "",
               cause != nullptr ? cause : "");
}

// The allocator for `type`, or nullptr after saying why there is none.
inline DeviceAllocator* allocator_for(DeviceType type, const std::string& what) {
  DeviceAllocator* allocator = executorch::runtime::get_device_allocator(type);
  if (allocator == nullptr) {
    std::fprintf(stderr,
                 "error: %s is kept in %s memory by this program, but no device allocator for it "
                 "is registered with ExecuTorch. executorch_tensorrt registers a CUDA allocator "
                 "when its adapter loads, unless EXECUTORCH_TENSORRT_NO_CUDA_ALLOCATOR=1 is set "
                 "(then the library that set it must register one).\n",
                 what.c_str(), device_name(type, 0).c_str());
  }
  return allocator;
}

// `nbytes` of device memory for `what`, or nullptr after saying why not.
inline std::unique_ptr<DeviceMemory> allocate_on(DeviceType type, DeviceIndex index, size_t nbytes,
                                          const std::string& what) {
  DeviceAllocator* allocator = allocator_for(type, what);
  if (allocator == nullptr) return nullptr;
  auto ptr = allocator->allocate(std::max<size_t>(nbytes, 1), index);
  if (!ptr.ok()) {
    print_error("cannot allocate " + std::to_string(nbytes) + " bytes on " +
                    device_name(type, index) + " for " + what,
                ptr.error());
    return nullptr;
  }
  std::fprintf(stderr, "note: %s is in %s memory (%zu bytes at %p)\n", what.c_str(),
               device_name(type, index).c_str(), nbytes, ptr.get());
  return std::make_unique<DeviceMemory>(allocator, ptr.get(), index);
}

}  // namespace etrt_runner
