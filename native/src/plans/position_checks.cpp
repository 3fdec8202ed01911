#include "position_checks.h"

#include "last_error.h"

#include <new>

namespace etrt {

using executorch::runtime::Error;

namespace {

constexpr int32_t kScalarTypeLong = 4; // ExecuTorch ScalarType::Long (int64)

/* Python's repr of the first (up to) 8 positions, as the executor quotes them. */
std::string first_positions(const int64_t* positions, int64_t count) {
  std::string text = "[";
  for (int64_t i = 0; i < count && i < 8; ++i) {
    text += (i ? ", " : "") + std::to_string(positions[i]);
  }
  return text + "]";
}

} // namespace

bool PositionChecks::adopt(const etrt_position_check* checks, uint64_t count,
                           const PlanSignature& signature, uint64_t num_user_inputs,
                           bool any_address, bool bounded) {
  clear();
  if (count > 0 && checks == nullptr) {
    return false;
  }
  try {
    for (uint64_t c = 0; c < count; ++c) {
      const etrt_position_check& check = checks[c];
      if (check.struct_size < sizeof(etrt_position_check) || check.arg_index >= num_user_inputs ||
          check.capacity < 0 || check.what == nullptr) {
        clear();
        return false;
      }
      // The positions are read before every run: int64 host memory whose size
      // the signature pins (a call with another shape or address never runs here).
      const PlanSignature::Arg& a = signature.arg(check.arg_index);
      if (a.dtype != kScalarTypeLong || a.device_type != ETRT_DEVICE_CPU) {
        clear();
        return false;
      }
      // With bounds the signature pins dtype and device only: the count is each call's.
      const int64_t n = bounded ? -1 : a.ndim > 0 ? signature.sizes(check.arg_index)[0] : 1;
      if (!bounded && (n < 0 || (n > 0 && a.data == nullptr && !any_address) ||
                       static_cast<uint64_t>(n) > a.nbytes / sizeof(int64_t))) {
        clear();
        return false;
      }
      checks_.push_back(Check{check.arg_index, n, check.capacity, check.in_place != 0, check.what});
    }
  } catch (const std::bad_alloc&) {
    clear();
    return false;
  }
  return true;
}

int32_t PositionChecks::check(const etrt_arg* args) const {
  for (const Check& c : checks_) {
    const etrt_arg& arg = args[c.arg];
    const auto* positions = static_cast<const int64_t*>(arg.data);
    const char* what = c.what.c_str();
    int64_t count = c.count;
    if (count < 0) { // a plan with bounds: this call's count, within the bytes it passed
      count = arg.ndim > 0 ? arg.sizes[0] : 1;
      if (count < 0 || static_cast<uint64_t>(count) > arg.nbytes / sizeof(int64_t) ||
          (count > 0 && positions == nullptr)) {
        return fail(Error::InvalidArgument,
                    "TensorRTBackend execute: the positions input holds %llu bytes, fewer than "
                    "its %lld positions need; pass a contiguous int64 tensor",
                    static_cast<unsigned long long>(arg.nbytes), static_cast<long long>(count));
      }
    }
    if (count > c.capacity) {
      return fail(Error::InvalidArgument,
                  "TensorRTBackend execute: a sequence of %lld tokens is longer than the cache: "
                  "%s; split the prompt or export with a larger cache",
                  static_cast<long long>(count), what);
    }
    for (int64_t i = 0; i < count; ++i) {
      const int64_t position = positions[i];
      if (position < 0 || position >= c.capacity) {
        return fail(Error::InvalidArgument,
                    "TensorRTBackend execute: cache position %lld (index %lld of the positions "
                    "input) is outside the cache: %s, valid positions are 0..%lld; reset the "
                    "state (executorch_tensorrt.reset_state) or shorten the sequence",
                    static_cast<long long>(position), static_cast<long long>(i), what,
                    static_cast<long long>(c.capacity - 1));
      }
      // positions[0] is inside the cache here, so the sum cannot overflow.
      if (c.in_place && position != positions[0] + i) {
        return fail(Error::InvalidArgument,
                    "TensorRTBackend execute: cache positions must be contiguous (the cache is "
                    "updated in place from position %lld), got %s for %s",
                    static_cast<long long>(positions[0]),
                    first_positions(positions, count).c_str(), what);
      }
    }
  }
  return 0;
}

} // namespace etrt
