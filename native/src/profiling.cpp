/*
 * Delegate profiling events (docs/profiling.md): executors report stage and
 * node timings; they go to the event tracer of the execute call running on
 * this thread, as ExecuTorch delegate events named by the executor. Inspector
 * maps each name to edge nodes through the debug_handle_map preprocess
 * returned (aot/debug_handles.py).
 */
#include "profiling.h"

#include <executorch_tensorrt/profiling.h>

#include "last_error.h"

#include <executorch/runtime/core/event_tracer_hooks_delegate.h>
#include <executorch/runtime/platform/platform.h>

#ifndef ET_EVENT_TRACER_ENABLED
#error "ET_EVENT_TRACER_ENABLED is not defined: the event tracer hooks would compile to nothing; build with the executorch package's compile definitions (native/CMakeLists.txt)"
#endif

namespace etrt {
namespace {
thread_local executorch::runtime::EventTracer* t_tracer = nullptr;
} // namespace

ProfilingScope::ProfilingScope(executorch::runtime::EventTracer* tracer) : previous_(t_tracer) {
  t_tracer = tracer;
}

ProfilingScope::~ProfilingScope() {
  t_tracer = previous_;
}

} // namespace etrt

extern "C" {

uint32_t etrt_profiling_abi_version(void) {
  return ETRT_PROFILING_ABI_VERSION;
}

uint32_t etrt_profiling_flags(void) {
  return etrt::t_tracer != nullptr ? ETRT_PROFILE_STAGES : 0u;
}

int32_t etrt_log_event(const char* name, uint64_t start_ticks, uint64_t end_ticks) {
  namespace et = ::executorch::runtime;
  if (name == nullptr || end_ticks < start_ticks) {
    return etrt::fail(et::Error::InvalidArgument,
                      "etrt_log_event: %s (the executor's profiling is wrong)",
                      name == nullptr ? "the event has no name" : "the event ends before it starts");
  }
  if (etrt::t_tracer == nullptr) {
    return 1;
  }
  // Named events: the name is the key of the delegate's debug_handle_map.
  et::event_tracer_log_profiling_delegate(etrt::t_tracer, name, et::kUnsetDelegateDebugIntId,
                                          static_cast<et_timestamp_t>(start_ticks),
                                          static_cast<et_timestamp_t>(end_ticks));
  return 0;
}

uint64_t etrt_current_ticks(void) {
  return static_cast<uint64_t>(executorch::runtime::pal_current_ticks());
}

} // extern "C"
