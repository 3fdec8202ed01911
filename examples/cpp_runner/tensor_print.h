// Printing outputs the way the Python runner does
//   output[i] shape=[d0,d1,...]
//     values: v0, v1, ...        (the first 8 values, 4 decimals)
// and copying an output whole, row-major, for --outputs.
#pragma once

#include <executorch/runtime/core/exec_aten/exec_aten.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>

#include "input_fill.h"
#include "tensor_file.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace etrt_runner {

using executorch::aten::ScalarType;
using executorch::runtime::etensor::Tensor;
using executorch::runtime::etensor::TensorImpl;

constexpr int kShownValues = 8;

inline double half_to_double(uint16_t h) {
  const int sign = (h >> 15) & 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = mant / 1024.0 / 16384.0;  // subnormal: mant * 2^-24
  } else if (exp == 31) {
    v = mant ? 0.0 / 0.0 : 1.0 / 0.0;
  } else {
    v = (1.0 + mant / 1024.0);
    for (int e = exp - 15; e > 0; --e) v *= 2.0;
    for (int e = exp - 15; e < 0; ++e) v /= 2.0;
  }
  return sign ? -v : v;
}

inline double bfloat16_to_double(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Element `index` (in logical, row-major order, as Python's flatten() sees
// it) of a tensor as a double (what Python's float(v) gives).
inline bool value_at(const Tensor& t, size_t index, double* out) {
  const void* p = t.const_data_ptr();
  size_t i = 0;  // the element's position in memory, through the strides
  size_t rest = index;
  for (ssize_t d = t.dim(); d-- > 0;) {
    const size_t size = static_cast<size_t>(t.size(d));
    i += (rest % size) * static_cast<size_t>(t.strides()[d]);
    rest /= size;
  }
  switch (t.scalar_type()) {
    case ScalarType::Float: *out = static_cast<const float*>(p)[i]; return true;
    case ScalarType::Double: *out = static_cast<const double*>(p)[i]; return true;
    case ScalarType::Half: *out = half_to_double(static_cast<const uint16_t*>(p)[i]); return true;
    case ScalarType::BFloat16: *out = bfloat16_to_double(static_cast<const uint16_t*>(p)[i]); return true;
    case ScalarType::Byte: *out = static_cast<const uint8_t*>(p)[i]; return true;
    case ScalarType::Char: *out = static_cast<const int8_t*>(p)[i]; return true;
    case ScalarType::Short: *out = static_cast<const int16_t*>(p)[i]; return true;
    case ScalarType::Int: *out = static_cast<const int32_t*>(p)[i]; return true;
    case ScalarType::Long: *out = static_cast<double>(static_cast<const int64_t*>(p)[i]); return true;
    case ScalarType::Bool: *out = static_cast<const bool*>(p)[i] ? 1.0 : 0.0; return true;
    default: return false;
  }
}

// Prints output `i` (shape and its first values); false after saying why
// its dtype cannot be printed.
inline bool print_output(size_t i, const Tensor& t) {
  std::string shape;
  for (ssize_t d = 0; d < t.dim(); ++d) {
    shape += (d ? "," : "") + std::to_string(t.size(d));
  }
  std::printf("output[%zu] shape=[%s]\n", i, shape.c_str());
  std::string values;
  const size_t n = std::min<size_t>(t.numel(), kShownValues);
  for (size_t k = 0; k < n; ++k) {
    double v = 0.0;
    if (!value_at(t, k, &v)) {
      std::fprintf(stderr, "error: output %zu has dtype %s, which the reference runner cannot print\n",
                   i, executorch::runtime::toString(t.scalar_type()));
      return false;
    }
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.4f", v);
    values += (k ? ", " : "") + std::string(buf);
  }
  std::printf("  values: %s\n", values.c_str());
  return true;
}

// Output `i` whole, in logical (row-major) order, as the tensor file stores it.
inline StoredTensor stored_output(size_t i, const Tensor& t) {
  StoredTensor s;
  s.name = "output." + std::to_string(i);
  s.dtype = static_cast<uint32_t>(t.scalar_type());
  const size_t elem = t.element_size();
  std::vector<TensorImpl::SizesType> sizes(t.sizes().begin(), t.sizes().end());
  std::vector<TensorImpl::StridesType> strides(t.strides().begin(), t.strides().end());
  for (auto d : sizes) s.sizes.push_back(d);
  s.data.resize(static_cast<size_t>(t.numel()) * elem);
  const auto* base = static_cast<const uint8_t*>(t.const_data_ptr());
  for (size_t k = 0; k < static_cast<size_t>(t.numel()); ++k) {
    std::memcpy(s.data.data() + k * elem, base + memory_index(sizes, strides, k) * elem, elem);
  }
  return s;
}

}  // namespace etrt_runner
