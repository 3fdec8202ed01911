/*
 * executorch-tensorrt: a native plan's argument signature (executor_table.h,
 * "Native plans"), shared by every plan kind: the copy the adapter keeps of
 * the executor's signature, and the one check of a call's arguments against
 * it before a plan runs without the executor.
 */
#ifndef EXECUTORCH_TENSORRT_PLAN_SIGNATURE_H
#define EXECUTORCH_TENSORRT_PLAN_SIGNATURE_H

#include <executorch_tensorrt/executor_table.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace etrt {

class PlanSignature {
 public:
  enum class Match {
    kExact,      // every field, the data pointer included
    kAnyAddress, // every field but the data pointer (non-NULL when nbytes > 0)
    kBounded,    // kAnyAddress, with sizes within bounds and nbytes large enough
  };
  struct Arg {
    int32_t kind, dtype, ndim, device_type, device_index;
    const void* data;
    uint64_t nbytes;
    size_t shape_at; // index of its sizes in sizes/dim_order/min/max
    uint64_t element_size; // kBounded only
    int32_t output_rule;   // kBounded only (etrt_output_rule)
    size_t follows_at;     // ETRT_OUTPUT_FOLLOWS only: index into follows_
  };

  /* Copies num_args signature entries (and, for kBounded, their bounds).
   * Returns false, holding nothing, for a malformed entry: not a tensor, a
   * negative rank, missing arrays, bounds of another rank, min > max. */
  bool adopt(const etrt_arg_signature* signature, const etrt_arg_bounds* bounds,
             uint64_t num_args, Match match);
  void clear();
  /* Copies kBounded's equal-dimension constraints; false (holding none) for
   * an entry outside the signature's arguments or ranks. */
  bool adopt_equal_dims(const etrt_equal_dim* entries, uint64_t count);
  /* True when every argument passes the signature under its Match rule (and
   * the equal dimensions agree). */
  bool matches(const etrt_arg* args, uint64_t num_args) const;

  uint64_t size() const {
    return args_.size();
  }
  const Arg& arg(uint64_t k) const {
    return args_[k];
  }
  const int32_t* sizes(uint64_t k) const {
    return sizes_.data() + args_[k].shape_at;
  }
  const int32_t* min(uint64_t k) const {
    return min_.data() + args_[k].shape_at;
  }
  const int32_t* max(uint64_t k) const {
    return max_.data() + args_[k].shape_at;
  }
  /* ETRT_OUTPUT_FOLLOWS: argument k's shape for this call's inputs (rank
   * entries; matches() checked that it lies within its bounds). */
  void followed_sizes(const etrt_arg* args, uint64_t k, int32_t* sizes) const;
  Match match() const {
    return match_;
  }

 private:
  bool matches_one(const etrt_arg* args, uint64_t k) const; // argument k of the call

  Match match_ = Match::kExact;
  std::vector<Arg> args_;
  std::vector<int32_t> sizes_;
  std::vector<uint8_t> dim_order_;
  std::vector<int32_t> min_, max_;
  std::vector<int32_t> follows_; // 2 per dimension (ETRT_OUTPUT_FOLLOWS args only)
  struct EqualDim {
    uint64_t arg_a, arg_b;
    int32_t dim_a, dim_b;
  };
  std::vector<EqualDim> equal_dims_;
};

/* Bytes of `count` elements of `element_size` for the sizes given, or false
 * on a negative size or an overflow of uint64. */
bool element_bytes(const int32_t* sizes, int32_t ndim, uint64_t element_size, uint64_t* bytes);

} // namespace etrt

#endif
