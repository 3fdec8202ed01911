/*
 * A native plan's index checks (input_checks.h): the values of integer
 * inputs that index a dimension, checked against the range recorded at
 * export before onnxruntime sees them (ONNX Gather would wrap a negative
 * index where eager PyTorch raises).
 */
#include "input_checks.h"

#include "last_error.h"

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

namespace etrt {

using executorch::runtime::Error;

namespace {

constexpr int32_t kScalarTypeInt = 3;  // ExecuTorch ScalarType::Int (int32)
constexpr int32_t kScalarTypeLong = 4; // ExecuTorch ScalarType::Long (int64)

bool has_index_checks(const etrt_native_plan& plan) {
  return plan.struct_size >= offsetof(etrt_native_plan, num_index_checks) + sizeof(uint64_t);
}

/* Python's repr of a multi-index: "[0, 3]" (what the Python gate writes). */
std::string position_of(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] > 0) {
      index[d] = flat % shape[d];
      flat /= shape[d];
    }
  }
  std::string text = "[";
  for (size_t d = 0; d < index.size(); ++d) {
    text += (d ? ", " : "") + std::to_string(index[d]);
  }
  return text + "]";
}

} // namespace

bool IndexChecks::adopt(const etrt_native_plan& plan, uint64_t num_user_inputs,
                        bool any_address, bool bounded) {
  checks_.clear();
  if (!has_index_checks(plan) || plan.num_index_checks == 0) {
    return true;
  }
  if (plan.index_checks == nullptr || plan.signature == nullptr) {
    return false;
  }
  try {
    for (uint64_t c = 0; c < plan.num_index_checks; ++c) {
      const etrt_index_check& check = plan.index_checks[c];
      if (check.struct_size < sizeof(etrt_index_check) || check.arg_index >= num_user_inputs ||
          check.what == nullptr || check.advice == nullptr || !(check.lo < check.hi)) {
        return false;
      }
      const etrt_arg_signature& s = plan.signature[check.arg_index];
      if ((s.dtype != kScalarTypeInt && s.dtype != kScalarTypeLong) ||
          s.device_type != ETRT_DEVICE_CPU || s.ndim < 0 || (s.ndim > 0 && s.sizes == nullptr)) {
        return false;
      }
      Check kept{check.arg_index, s.dtype == kScalarTypeInt, check.lo, check.hi, check.what,
                 check.advice};
      if (!bounded) { // the signature's shape is every call's: its buffer must hold it
        int64_t count = 1;
        for (int32_t d = 0; d < s.ndim; ++d) {
          const int64_t size = s.sizes[d];
          if (size < 0 || (size > 0 && count > INT64_MAX / size)) {
            return false;
          }
          count *= size;
        }
        const uint64_t itemsize = kept.is_int32 ? sizeof(int32_t) : sizeof(int64_t);
        if (static_cast<uint64_t>(count) > s.nbytes / itemsize ||
            (count > 0 && s.data == nullptr && !any_address)) {
          return false;
        }
      }
      checks_.push_back(std::move(kept));
    }
  } catch (const std::bad_alloc&) {
    checks_.clear();
    return false;
  }
  return true;
}

int32_t IndexChecks::check(const etrt_arg* args) const {
  for (const Check& c : checks_) {
    // The call's own shape: a plan with bounds matches calls of other sizes
    // than its signature's, each within bounds and with a buffer that holds
    // its elements (the plan matched), so this count is safe to read.
    const etrt_arg& a = args[c.arg];
    int64_t count = 1;
    for (int32_t d = 0; d < a.ndim; ++d) {
      count *= a.sizes[d];
    }
    const void* data = a.data; // non-NULL when count > 0: the plan matched
    for (int64_t i = 0; i < count; ++i) {
      const int64_t value = c.is_int32 ? static_cast<const int32_t*>(data)[i]
                                       : static_cast<const int64_t*>(data)[i];
      if (value < c.lo || value >= c.hi) {
        const std::vector<int64_t> shape(a.sizes, a.sizes + a.ndim);
        return fail(Error::InvalidArgument,
                    "TensorRTBackend execute: %s holds %lld at position %s, outside its valid "
                    "range [%lld, %lld): %s",
                    c.what.c_str(), static_cast<long long>(value),
                    position_of(i, shape).c_str(), static_cast<long long>(c.lo),
                    static_cast<long long>(c.hi), c.advice.c_str());
      }
    }
  }
  return 0;
}

} // namespace etrt
