/*
 * executorch-tensorrt: a delegate's native plan (executor_table.h, "Native
 * plans"): the steady-state call run by the adapter without the executor.
 */
#ifndef EXECUTORCH_TENSORRT_NATIVE_PLAN_H
#define EXECUTORCH_TENSORRT_NATIVE_PLAN_H

#include <executorch_tensorrt/executor_table.h>

#include <cstdint>
#include <vector>

namespace etrt {

class NativePlan {
 public:
  /* Takes the executor's plan for a call of num_args arguments (copies its
   * signature). Returns false, holding no plan, if the plan is unusable
   * (unknown kind, wrong argument count, missing pointers). */
  bool adopt(const etrt_native_plan* plan, uint64_t num_args);
  /* Forgets the plan (before the executor's execute or destroy). */
  void clear();
  bool empty() const {
    return plan_ == nullptr;
  }
  /* True when the plan is live and every argument equals its signature. */
  bool matches(const etrt_arg* args, uint64_t num_args) const;
  /* Runs the plan; returns 0 or an Error code with the cause in last_error. */
  int32_t run() const;

 private:
  struct Arg {
    int32_t kind, dtype, ndim, device_type, device_index;
    const void* data;
    uint64_t nbytes;
    size_t shape_at; // index of its sizes in sizes_ and dim_order_
  };
  const etrt_native_plan* plan_ = nullptr;
  std::vector<Arg> args_;
  std::vector<int32_t> sizes_;
  std::vector<uint8_t> dim_order_;
};

} // namespace etrt

#endif
