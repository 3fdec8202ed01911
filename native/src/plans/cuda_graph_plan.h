/*
 * executorch-tensorrt: the TensorRT executor's native plan (executor_table.h,
 * ETRT_PLAN_CUDA_GRAPH): the captured enqueue replayed by the adapter with
 * cuGraphLaunch, with the staging copies and the event ordering of the
 * executor's own path, so a steady-state call on the GPU runs no Python.
 */
#ifndef EXECUTORCH_TENSORRT_CUDA_GRAPH_PLAN_H
#define EXECUTORCH_TENSORRT_CUDA_GRAPH_PLAN_H

#include <executorch_tensorrt/executor_table.h>

#include "plan_signature.h"
#include "position_checks.h"

#include <cstdint>
#include <vector>

namespace etrt {

class CudaGraphPlan {
 public:
  /* Takes the executor's plan for a call of num_args arguments (copies its
   * signature and staging list). Returns false, holding no plan, for any
   * plan this adapter cannot run safely (another kind, a wrong argument
   * count, a NULL handle, a staging copy that does not fit its argument, a
   * position check on anything but a staged int64 host input). */
  bool adopt(const etrt_native_plan* plan, uint64_t num_args);
  void clear();
  bool empty() const {
    return plan_ == nullptr;
  }
  /* True when the plan is live (not withdrawn, its epochs unchanged) and
   * every argument equals its signature, field by field. */
  bool matches(const etrt_arg* args, uint64_t num_args) const;
  /* Runs the plan on the arguments matches() accepted: the cache positions
   * are checked first (nothing is copied or launched for a refused call).
   * Returns 0 or an Error code with the cause in last_error (a position
   * outside the cache, no CUDA driver, a failed launch). */
  int32_t run(const etrt_arg* args) const;

 private:
  bool adopt_state(const etrt_native_plan& plan, const etrt_cuda_graph_plan& g, uint64_t num_args);

  const etrt_native_plan* plan_ = nullptr;
  const etrt_cuda_graph_plan* graph_ = nullptr;
  PlanSignature signature_; // exact: addresses included
  std::vector<etrt_staged_copy> in_, out_;
  PositionChecks positions_; // a stateful partition's cache positions
  const volatile uint64_t* state_epoch_ = nullptr;
  uint64_t state_epoch_at_plan_ = 0;
};

} // namespace etrt

#endif
