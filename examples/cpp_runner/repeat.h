// --repeat N: the method run N more times back to back after the first call,
// five times over, for per-call timings of the steady state (docs/gpu-runtime.md).
// Each run of N calls ends with a synchronous copy of one byte of the first
// device output (ordered after the delegate's work on stream 0, as the
// device-resident contract says), so a run's time includes all its GPU work;
// with host outputs every call is synchronous already.
#pragma once

#include <executorch/runtime/core/device_allocator.h>
#include <executorch/runtime/executor/method.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace etrt_runner {

inline bool time_calls(executorch::runtime::Method& method, uint64_t calls) {
  using executorch::runtime::Error;
  using executorch::runtime::etensor::DeviceType;
  const executorch::aten::Tensor* device_out = nullptr;
  for (size_t i = 0; i < method.outputs_size() && device_out == nullptr; ++i) {
    const auto& v = method.get_output(i);
    if (v.isTensor() && v.toTensor().device_type() != DeviceType::CPU && v.toTensor().nbytes() > 0)
      device_out = &v.toTensor();
  }
  auto sync = [&]() {
    if (device_out == nullptr) return true;
    uint8_t byte = 0;
    return executorch::runtime::get_device_allocator(device_out->device_type())
               ->copy_device_to_host(&byte, device_out->const_data_ptr(), 1,
                                     device_out->device_index()) == Error::Ok;
  };
  double best = 1e300;
  for (int run = 0; run < 5; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t k = 0; k < calls; ++k) {
      const Error err = method.execute();
      if (err != Error::Ok) {
        std::fprintf(stderr, "error: call %llu of --repeat failed: ExecuTorch error 0x%x\n",
                     static_cast<unsigned long long>(k), static_cast<unsigned>(err));
        return false;
      }
    }
    if (!sync()) {
      std::fprintf(stderr, "error: --repeat could not read back the device output\n");
      return false;
    }
    const std::chrono::duration<double, std::micro> us = std::chrono::steady_clock::now() - t0;
    best = std::min(best, us.count() / static_cast<double>(calls));
  }
  std::fprintf(stderr, "timing: %llu calls back to back, best of 5 runs: %.2f us/call (%s I/O)\n",
               static_cast<unsigned long long>(calls), best, device_out ? "device" : "host");
  return true;
}

}  // namespace etrt_runner
