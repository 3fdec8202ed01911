/*
 * executorch-tensorrt: a delegate's native plan (executor_table.h, "Native
 * plans"): the steady-state call run by the adapter without the executor.
 */
#ifndef EXECUTORCH_TENSORRT_NATIVE_PLAN_H
#define EXECUTORCH_TENSORRT_NATIVE_PLAN_H

#include <executorch_tensorrt/executor_table.h>

#include "input_checks.h"
#include "plan_signature.h"
#include "position_checks.h"

#include <cstdint>
#include <string>
#include <vector>

namespace etrt {

class NativePlan {
 public:
  /* Takes the executor's plan for a call of num_args arguments (copies its
   * signature and position checks). Returns false, holding no plan, if the
   * plan is unusable (unknown kind, wrong argument count, missing pointers,
   * a position check this adapter cannot perform safely). */
  bool adopt(const etrt_native_plan* plan, uint64_t num_args);
  /* Forgets the plan (before the executor's execute or destroy). */
  void clear();
  bool empty() const {
    return plan_ == nullptr;
  }
  /* A plan for any address (made at init): it outlives calls, refused ones too. */
  bool any_address() const {
    return plan_ != nullptr && any_address_;
  }
  /* True when the plan is live and every argument equals its signature. */
  bool matches(const etrt_arg* args, uint64_t num_args) const;
  /* Runs the plan on the arguments matches() accepted: checks the cache
   * positions, runs, fills the outputs of dynamic shape. Returns 0 or an
   * Error code with the cause in last_error. */
  int32_t run(etrt_arg* args);

 private:
  bool adopt_appended(const etrt_native_plan& plan);
  int32_t bind(etrt_arg* args); // any_address plans: OrtValues over this call's memory
  int32_t copy_out(etrt_arg* args, void** outputs) const; // native_plan_outputs.cpp
  int32_t copy_one(void* value, etrt_arg& arg, uint64_t output) const;
  int32_t check_allocated(void* info, const int64_t* dims, size_t ndim, uint64_t output) const;

  const etrt_native_plan* plan_ = nullptr;
  uint64_t num_user_inputs_ = 0; // delegate inputs (the plan's inputs less its state)
  PlanSignature signature_;
  PositionChecks positions_; // KV-cache write positions (position_checks.h)
  IndexChecks index_checks_; // integer inputs' values (input_checks.h)
  std::vector<uint64_t> copy_out_; // delegate outputs onnxruntime allocates (NULL entries)
  // any_address plans: the adapter's own value arrays and the
  // OrtValues it made over each delegate argument's memory (with bounds: the
  // shape each was made for, laid out like the signature's sizes).
  bool any_address_ = false;
  bool bounded_ = false;
  std::vector<const void*> in_values_, alt_in_values_;
  std::vector<void*> out_values_, alt_out_values_;
  std::vector<const void*> bound_data_;
  std::vector<int32_t> bound_sizes_;
  std::vector<void*> owned_;
};

} // namespace etrt

#endif
