/*
 * A native plan's argument signature (plan_signature.h): the one place that
 * decides whether a call's arguments are the ones a plan was checked and
 * bound for. Every per-call check the Python gate (runtime/arguments.py
 * check_args) makes for a planned partition is made here, before the plan
 * runs: kind, dtype, rank, sizes (equal, or within bounds), dim order,
 * device, byte capacity and memory. Anything else the call differs in
 * sends it to the executor, which checks it itself.
 */
#include "plan_signature.h"

#include <cstring>
#include <new>

namespace etrt {

bool element_bytes(const int32_t* sizes, int32_t ndim, uint64_t element_size, uint64_t* bytes) {
  uint64_t total = element_size;
  for (int32_t d = 0; d < ndim; ++d) {
    if (sizes[d] < 0) {
      return false;
    }
    const auto size = static_cast<uint64_t>(sizes[d]);
    if (size != 0 && total > UINT64_MAX / size) {
      return false;
    }
    total *= size;
  }
  *bytes = total;
  return true;
}

bool PlanSignature::adopt(const etrt_arg_signature* signature, const etrt_arg_bounds* bounds,
                          uint64_t num_args, Match match) {
  clear();
  if ((num_args > 0 && signature == nullptr) || (match == Match::kBounded && bounds == nullptr)) {
    return false;
  }
  match_ = match;
  try {
    args_.reserve(num_args);
    for (uint64_t i = 0; i < num_args; ++i) {
      const etrt_arg_signature& s = signature[i];
      // Tensors only: a scalar's value is not part of the signature.
      if (s.struct_size < sizeof(etrt_arg_signature) || s.kind != ETRT_ARG_TENSOR || s.ndim < 0 ||
          (s.ndim > 0 && (s.sizes == nullptr || s.dim_order == nullptr))) {
        clear();
        return false;
      }
      Arg a{s.kind, s.dtype, s.ndim, s.device_type, s.device_index, s.data, s.nbytes,
            sizes_.size(), 0, ETRT_OUTPUT_IN_PLACE};
      sizes_.insert(sizes_.end(), s.sizes, s.sizes + s.ndim);
      dim_order_.insert(dim_order_.end(), s.dim_order, s.dim_order + s.ndim);
      if (match == Match::kBounded) {
        const etrt_arg_bounds& b = bounds[i];
        if (b.struct_size < sizeof(etrt_arg_bounds) || b.ndim != s.ndim || b.element_size == 0 ||
            (b.output_rule != ETRT_OUTPUT_IN_PLACE && b.output_rule != ETRT_OUTPUT_ALLOCATED) ||
            (s.ndim > 0 && (b.min == nullptr || b.max == nullptr))) {
          clear();
          return false;
        }
        for (int32_t d = 0; d < s.ndim; ++d) {
          if (b.min[d] < 0 || b.min[d] > b.max[d]) {
            clear();
            return false;
          }
        }
        min_.insert(min_.end(), b.min, b.min + s.ndim);
        max_.insert(max_.end(), b.max, b.max + s.ndim);
        a.element_size = b.element_size;
        a.output_rule = b.output_rule;
      }
      args_.push_back(a);
    }
  } catch (const std::bad_alloc&) {
    clear();
    return false;
  }
  return true;
}

void PlanSignature::clear() {
  match_ = Match::kExact;
  args_.clear();
  sizes_.clear();
  dim_order_.clear();
  min_.clear();
  max_.clear();
}

bool PlanSignature::matches(const etrt_arg* args, uint64_t num_args) const {
  if (num_args != args_.size()) {
    return false;
  }
  for (uint64_t i = 0; i < num_args; ++i) {
    if (!matches_one(args[i], args_[i])) {
      return false;
    }
  }
  return true;
}

bool PlanSignature::matches_one(const etrt_arg& a, const Arg& s) const {
  if (a.kind != s.kind || a.dtype != s.dtype || a.ndim != s.ndim ||
      a.device_type != s.device_type || a.device_index != s.device_index) {
    return false;
  }
  if (s.ndim > 0 && (a.sizes == nullptr || a.dim_order == nullptr ||
                     std::memcmp(a.dim_order, &dim_order_[s.shape_at], s.ndim) != 0)) {
    return false;
  }
  if (match_ != Match::kBounded) {
    if (match_ == Match::kExact ? a.data != s.data : (a.nbytes > 0 && a.data == nullptr)) {
      return false;
    }
    return a.nbytes == s.nbytes &&
           (s.ndim == 0 ||
            std::memcmp(a.sizes, &sizes_[s.shape_at], sizeof(int32_t) * s.ndim) == 0);
  }
  for (int32_t d = 0; d < s.ndim; ++d) {
    if (a.sizes[d] < min_[s.shape_at + d] || a.sizes[d] > max_[s.shape_at + d]) {
      return false;
    }
  }
  uint64_t needed = 0;
  return element_bytes(a.sizes, s.ndim, s.element_size, &needed) && needed <= a.nbytes &&
         (needed == 0 || a.data != nullptr);
}

} // namespace etrt
