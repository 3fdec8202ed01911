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

namespace {
constexpr int32_t kMaxRank = 16; // ExecuTorch's kTensorDimensionLimit
} // namespace

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
            sizes_.size(), 0, ETRT_OUTPUT_IN_PLACE, 0};
      sizes_.insert(sizes_.end(), s.sizes, s.sizes + s.ndim);
      dim_order_.insert(dim_order_.end(), s.dim_order, s.dim_order + s.ndim);
      if (match == Match::kBounded) {
        const etrt_arg_bounds& b = bounds[i];
        if (b.struct_size < sizeof(etrt_arg_bounds) || b.ndim != s.ndim || b.element_size == 0 ||
            (b.output_rule != ETRT_OUTPUT_IN_PLACE && b.output_rule != ETRT_OUTPUT_ALLOCATED &&
             b.output_rule != ETRT_OUTPUT_FOLLOWS) ||
            (s.ndim > 0 && (b.min == nullptr || b.max == nullptr)) ||
            (b.output_rule == ETRT_OUTPUT_FOLLOWS && s.ndim > 0 && b.follows == nullptr)) {
          clear();
          return false;
        }
        if (b.output_rule == ETRT_OUTPUT_FOLLOWS) {
          // Each size from an earlier argument's dimension (the inputs come
          // first), or a static size.
          a.follows_at = follows_.size();
          for (int32_t d = 0; d < s.ndim; ++d) {
            const int32_t source = b.follows[2 * d], value = b.follows[2 * d + 1];
            const bool ok = source == -1 ? value >= 0
                                         : source >= 0 && static_cast<uint64_t>(source) < i &&
                                               value >= 0 && value < args_[source].ndim;
            if (!ok) {
              clear();
              return false;
            }
            follows_.push_back(source);
            follows_.push_back(value);
          }
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

bool PlanSignature::adopt_equal_dims(const etrt_equal_dim* entries, uint64_t count) {
  equal_dims_.clear();
  if (count > 0 && entries == nullptr) {
    return false;
  }
  try {
    for (uint64_t i = 0; i < count; ++i) {
      const etrt_equal_dim& e = entries[i];
      if (e.struct_size < sizeof(etrt_equal_dim) || e.arg_a >= args_.size() ||
          e.arg_b >= args_.size() || e.dim_a < 0 || e.dim_b < 0 ||
          e.dim_a >= args_[e.arg_a].ndim || e.dim_b >= args_[e.arg_b].ndim) {
        equal_dims_.clear();
        return false;
      }
      equal_dims_.push_back(EqualDim{e.arg_a, e.arg_b, e.dim_a, e.dim_b});
    }
  } catch (const std::bad_alloc&) {
    equal_dims_.clear();
    return false;
  }
  return true;
}

void PlanSignature::clear() {
  equal_dims_.clear();
  follows_.clear();
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
    if (!matches_one(args, i)) {
      return false;
    }
  }
  // Ranks matched above, so each dimension named here exists in the call.
  for (const EqualDim& e : equal_dims_) {
    if (args[e.arg_a].sizes[e.dim_a] != args[e.arg_b].sizes[e.dim_b]) {
      return false;
    }
  }
  return true;
}

void PlanSignature::followed_sizes(const etrt_arg* args, uint64_t k, int32_t* sizes) const {
  const Arg& s = args_[k];
  for (int32_t d = 0; d < s.ndim; ++d) {
    const int32_t source = follows_[s.follows_at + 2 * d], value = follows_[s.follows_at + 2 * d + 1];
    sizes[d] = source == -1 ? value : args[source].sizes[value];
  }
}

bool PlanSignature::matches_one(const etrt_arg* args, uint64_t k) const {
  const etrt_arg& a = args[k];
  const Arg& s = args_[k];
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
  // An output that follows the inputs is judged by the shape it will get
  // (its sources matched first: they come before it); its buffer is checked
  // after the adapter resizes it (native_plan.cpp bind), as a resize can
  // grow it up to the memory plan's bound.
  int32_t followed[kMaxRank];
  const int32_t* sizes = a.sizes;
  if (s.output_rule == ETRT_OUTPUT_FOLLOWS) {
    if (s.ndim > kMaxRank) {
      return false;
    }
    followed_sizes(args, k, followed);
    sizes = followed;
  }
  for (int32_t d = 0; d < s.ndim; ++d) {
    if (sizes[d] < min_[s.shape_at + d] || sizes[d] > max_[s.shape_at + d]) {
      return false;
    }
  }
  uint64_t needed = 0;
  if (!element_bytes(sizes, s.ndim, s.element_size, &needed)) {
    return false;
  }
  if (s.output_rule == ETRT_OUTPUT_FOLLOWS) {
    return true;
  }
  return needed <= a.nbytes && (needed == 0 || a.data != nullptr);
}

} // namespace etrt
