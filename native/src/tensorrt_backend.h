/* executorch-tensorrt: the BackendInterface registered as "TensorRTBackend". */
#ifndef EXECUTORCH_TENSORRT_TENSORRT_BACKEND_H
#define EXECUTORCH_TENSORRT_TENSORRT_BACKEND_H

#include <executorch/runtime/backend/interface.h>

namespace etrt {

constexpr const char* kBackendId = "TensorRTBackend";

/* The one backend object (lives until the process exits). */
executorch::runtime::BackendInterface* tensorrt_backend();

} // namespace etrt

#endif
