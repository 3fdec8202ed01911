/*
 * executorch-tensorrt: a CUDA DeviceAllocator for ExecuTorch.
 *
 * Programs whose memory plan places buffers on a CUDA device (the et_copy
 * ops' device buffers, tensors between two CUDA delegates) need a
 * DeviceAllocator registered for DeviceType::CUDA, or loading them fails.
 * libexecutorch.so exports register_device_allocator, so the adapter
 * provides one. CUDA is reached through the driver API (libcuda.so.1),
 * dlopened on first use: the adapter has no link-time CUDA dependency and
 * registering costs nothing on a machine without a GPU; there, allocate()
 * fails with a message saying why (and the adapter's last error holds it).
 */
#ifndef EXECUTORCH_TENSORRT_CUDA_ALLOCATOR_H
#define EXECUTORCH_TENSORRT_CUDA_ALLOCATOR_H

#include <string>

namespace etrt {

/* Records a failure where the adapter keeps its last error. */
using ReportFn = void (*)(const std::string& message);

/* Registers the allocator unless another library already registered one for
 * CUDA (ExecuTorch aborts on a second registration) or kNoCudaAllocatorEnv is
 * set. Call once, from static initialization. Returns what happened, for the
 * adapter's registration message. */
std::string register_cuda_allocator(ReportFn report);

/* Set to 1 to not register (e.g. when a library loaded later registers its
 * own CUDA allocator: ExecuTorch aborts on the second registration). */
constexpr const char* kNoCudaAllocatorEnv = "EXECUTORCH_TENSORRT_NO_CUDA_ALLOCATOR";

} // namespace etrt

#endif
