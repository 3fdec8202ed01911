// Inputs the reference runner makes when none are stored: the same
// deterministic pattern (or ones) as the Python runner (cli/runner.py
// pattern_values), and the logical-to-memory index mapping both the inputs
// and the written outputs go through.
#pragma once

#include <executorch/runtime/core/exec_aten/exec_aten.h>

#include "tensor_file.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace etrt_runner {

using executorch::aten::ScalarType;
using executorch::runtime::etensor::TensorImpl;

// Logical (row-major) element `index` -> its position in memory through `strides`.
inline size_t memory_index(const std::vector<TensorImpl::SizesType>& sizes,
                    const std::vector<TensorImpl::StridesType>& strides, size_t index) {
  size_t i = 0;
  for (size_t d = sizes.size(); d-- > 0;) {
    const size_t size = static_cast<size_t>(sizes[d]);
    i += (index % size) * static_cast<size_t>(strides[d]);
    index /= size;
  }
  return i;
}

// Fills `count` elements (row-major) of type t with the runners' pattern or
// with one. False if the type is not handled.
inline bool fill_generated(ScalarType t, bool ones, uint8_t* p, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const int k = etrt_runner::pattern_k(i);
    const float f = ones ? 1.0f : static_cast<float>((k - 125) / 128.0);
    const int64_t n = ones ? 1 : k % 16;
    switch (t) {
      case ScalarType::Float: reinterpret_cast<float*>(p)[i] = f; break;
      case ScalarType::Double: reinterpret_cast<double*>(p)[i] = f; break;
      case ScalarType::Half: reinterpret_cast<uint16_t*>(p)[i] = etrt_runner::exact_float_to_half(f); break;
      case ScalarType::BFloat16: reinterpret_cast<uint16_t*>(p)[i] = etrt_runner::float_to_bfloat16_bits(f); break;
      case ScalarType::Byte: reinterpret_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(n); break;
      case ScalarType::Char: reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(n); break;
      case ScalarType::Short: reinterpret_cast<int16_t*>(p)[i] = static_cast<int16_t>(n); break;
      case ScalarType::Int: reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(n); break;
      case ScalarType::Long: reinterpret_cast<int64_t*>(p)[i] = n; break;
      case ScalarType::Bool: reinterpret_cast<bool*>(p)[i] = ones || (k % 2 == 1); break;
      default: return false;
    }
  }
  return true;
}

}  // namespace etrt_runner
