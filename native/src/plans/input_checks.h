/*
 * executorch-tensorrt: a native plan's index checks (executor_table.h,
 * "Index checks"): integer inputs whose values must lie in the range eager
 * PyTorch accepts, read before every run so that a refused call writes
 * nothing. The executor's Python gate makes the same checks in
 * the same words (runtime/input_checks.py).
 */
#ifndef EXECUTORCH_TENSORRT_INPUT_CHECKS_H
#define EXECUTORCH_TENSORRT_INPUT_CHECKS_H

#include <executorch_tensorrt/executor_table.h>

#include <cstdint>
#include <string>
#include <vector>

namespace etrt {

class IndexChecks {
 public:
  /* Copies the plan's checks; false if one cannot be performed safely: its
   * input is not one of the first num_user_inputs signature entries, or not
   * int32/int64 host memory whose signature covers its element count
   * (any_address: data may change per call, but not the shape; bounded: the
   * shape changes too, and each call's is the one read, checked when the plan
   * matched). */
  bool adopt(const etrt_native_plan& plan, uint64_t num_user_inputs, bool any_address,
             bool bounded);
  void clear() {
    checks_.clear();
  }
  /* 0, or InvalidArgument with the cause in last_error. */
  int32_t check(const etrt_arg* args) const;

 private:
  struct Check {
    uint64_t arg;
    bool is_int32;
    int64_t lo, hi;
    std::string what, advice;
  };
  std::vector<Check> checks_;
};

} // namespace etrt

#endif
