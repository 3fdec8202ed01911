/*
 * executorch-tensorrt: the execute call's event tracer, per thread, for
 * etrt_log_event (include/executorch_tensorrt/profiling.h).
 */
#ifndef EXECUTORCH_TENSORRT_SRC_PROFILING_H
#define EXECUTORCH_TENSORRT_SRC_PROFILING_H

#include <executorch/runtime/core/event_tracer.h>

namespace etrt {

/* Attaches `tracer` (may be NULL: profiling off) to this thread for the
 * lifetime of the scope; restores the previous one after (nesting-safe). */
class ProfilingScope {
 public:
  explicit ProfilingScope(executorch::runtime::EventTracer* tracer);
  ~ProfilingScope();
  ProfilingScope(const ProfilingScope&) = delete;
  ProfilingScope& operator=(const ProfilingScope&) = delete;

 private:
  executorch::runtime::EventTracer* previous_;
};

} // namespace etrt

#endif
