/*
 * executorch-tensorrt: the KV-cache position checks a native plan performs
 * before every run (executor_table.h, "Position checks"), shared by the
 * onnxruntime plan (native_plan.cpp) and the CUDA-graph plan
 * (cuda_graph_plan.cpp): the executor's own checks (runtime/state.py
 * check_positions) in its words, so a call fails the same way whichever side
 * runs it.
 */
#ifndef EXECUTORCH_TENSORRT_POSITION_CHECKS_H
#define EXECUTORCH_TENSORRT_POSITION_CHECKS_H

#include <executorch_tensorrt/executor_table.h>

#include "plan_signature.h"

#include <cstdint>
#include <string>
#include <vector>

namespace etrt {

class PositionChecks {
 public:
  /* Copies `count` checks. Returns false, holding none, for a check this
   * adapter cannot perform safely: a positions argument past the delegate
   * inputs, not int64 host memory, or whose element count the signature does
   * not pin (any_address plans pin everything but the address). With
   * `bounded` (a plan with bounds) the count is the call's first dimension,
   * read before every check against the bytes the call passed. */
  bool adopt(const etrt_position_check* checks, uint64_t count, const PlanSignature& signature,
             uint64_t num_user_inputs, bool any_address, bool bounded);
  void clear() {
    checks_.clear();
  }
  bool empty() const {
    return checks_.empty();
  }
  /* 0, or InvalidArgument with the cause in last_error, for arguments the
   * plan's signature accepted. */
  int32_t check(const etrt_arg* args) const;

 private:
  struct Check {
    uint64_t arg;   // delegate input holding the int64 positions
    int64_t count;  // how many (its first dimension, 1 for a 0-dim tensor); -1: the call's
    int64_t capacity;
    bool in_place;
    std::string what;
  };
  std::vector<Check> checks_;
};

} // namespace etrt

#endif
