// Greedy decoding for the C++ runner (--decode N --prompt 3,4,5): the twin of
// executorch_tensorrt.greedy_decode. The method must be an exported LLM step
// `forward(tokens int64 [1, S], positions int64 [S]) -> logits float [1, S, V]`
// with a dynamic S (transformers' TorchExportableModuleForDecoderOnlyLM, or
// a decoder with register_buffer caches and input_pos): the prompt goes in one
// call, then one token per call. The KV cache stays inside the program (in the
// TensorRT delegate for our partitions). Prints
//   tokens: t0, t1, ...
//   decode: <microseconds> us/token over <n-1> calls
#pragma once

#include <executorch/extension/module/module.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace etrt_runner {

// An int64 tensor over `values`, shaped `sizes` (contiguous).
struct LongTensor {
  std::vector<executorch::runtime::etensor::TensorImpl::SizesType> sizes;
  std::vector<executorch::runtime::etensor::TensorImpl::DimOrderType> dim_order;
  std::vector<executorch::runtime::etensor::TensorImpl::StridesType> strides;
  std::vector<int64_t> values;
  std::unique_ptr<executorch::runtime::etensor::TensorImpl> impl;

  LongTensor(std::vector<int64_t> v, std::vector<int32_t> shape) : values(std::move(v)) {
    sizes.assign(shape.begin(), shape.end());
    strides.assign(shape.size(), 1);
    for (size_t k = shape.size(); k-- > 1;) strides[k - 1] = strides[k] * sizes[k];
    for (size_t k = 0; k < shape.size(); ++k) dim_order.push_back(static_cast<uint8_t>(k));
    impl = std::make_unique<executorch::runtime::etensor::TensorImpl>(
        executorch::aten::ScalarType::Long, static_cast<ssize_t>(sizes.size()), sizes.data(),
        values.data(), dim_order.data(), strides.data(),
        executorch::runtime::TensorShapeDynamism::DYNAMIC_BOUND);
  }
};

inline bool parse_prompt(const std::string& text, std::vector<int64_t>* out) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    std::string item = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    char* stop = nullptr;
    long long v = std::strtoll(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || v < 0) return false;
    out->push_back(v);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return !out->empty();
}

// One step: tokens at positions [pos, pos + len); returns the argmax of the last logits row.
inline bool decode_step(executorch::runtime::Method& method, const std::vector<int64_t>& tokens,
                        int64_t pos, int64_t* next, std::string* why) {
  using executorch::runtime::EValue;
  using executorch::runtime::etensor::Tensor;
  const int32_t n = static_cast<int32_t>(tokens.size());
  std::vector<int64_t> positions(tokens.size());
  for (int32_t i = 0; i < n; ++i) positions[i] = pos + i;
  LongTensor ids(tokens, {1, n}), at(positions, {n});
  if (method.set_input(EValue(Tensor(ids.impl.get())), 0) != executorch::runtime::Error::Ok ||
      method.set_input(EValue(Tensor(at.impl.get())), 1) != executorch::runtime::Error::Ok) {
    *why = "the method does not take (tokens int64 [1, S], positions int64 [S]) inputs";
    return false;
  }
  auto err = method.execute();
  if (err != executorch::runtime::Error::Ok) {
    *why = "execute failed with error " + std::to_string(static_cast<int>(err)) +
           " (the backend's cause is printed above)";
    return false;
  }
  const EValue& out = method.get_output(0);
  if (!out.isTensor() || out.toTensor().scalar_type() != executorch::aten::ScalarType::Float ||
      out.toTensor().dim() != 3) {
    *why = "output 0 is not float logits [1, S, V]";
    return false;
  }
  const Tensor logits = out.toTensor();
  const int64_t vocab = logits.size(2);
  const float* last = logits.const_data_ptr<float>() + (logits.size(1) - 1) * vocab;
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; ++v)
    if (last[v] > last[best]) best = v;
  *next = best;
  return true;
}

inline int run_decode(executorch::runtime::Method& method, const std::vector<int64_t>& prompt,
                      int n) {
  std::vector<int64_t> generated;
  std::string why;
  int64_t next = 0;
  if (!decode_step(method, prompt, 0, &next, &why)) {
    std::fprintf(stderr, "error: prefill: %s\n", why.c_str());
    return 1;
  }
  generated.push_back(next);
  int64_t pos = static_cast<int64_t>(prompt.size());
  double seconds = 0;
  for (int i = 1; i < n; ++i, ++pos) {
    auto t0 = std::chrono::steady_clock::now();
    if (!decode_step(method, {next}, pos, &next, &why)) {
      std::fprintf(stderr, "error: decode step %d: %s\n", i, why.c_str());
      return 1;
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    generated.push_back(next);
  }
  std::printf("tokens:");
  for (size_t i = 0; i < generated.size(); ++i)
    std::printf("%s %lld", i ? "," : "", static_cast<long long>(generated[i]));
  std::printf("\ndecode: %.1f us/token over %d calls\n",
              n > 1 ? 1e6 * seconds / (n - 1) : 0.0, n - 1);
  return 0;
}

// --decode N --prompt "3,4,5[;6,7]": each prompt (';'-separated) decodes N tokens
// from the initial state. `reload()` unloads and loads the method again, which
// destroys the delegates and their state (the C++ form of
// executorch_tensorrt.reset_state); it returns nullptr after printing why it failed.
template <typename Reload>
inline int run_decode_mode(executorch::runtime::Method& method, const std::string& count_text,
                           const std::string& prompt_text, Reload reload) {
  std::vector<std::vector<int64_t>> prompts(1);
  const int n = std::atoi(count_text.c_str());
  bool ok = n >= 1;
  for (size_t start = 0; ok;) {
    const size_t end = prompt_text.find(';', start);
    prompts.back().clear();
    ok = parse_prompt(prompt_text.substr(start, end == std::string::npos ? std::string::npos
                                                                        : end - start),
                      &prompts.back());
    if (end == std::string::npos) break;
    prompts.emplace_back();
    start = end + 1;
  }
  if (!ok) {
    std::fprintf(stderr, "error: --decode takes a token count >= 1 and --prompt a "
                         "comma-separated list of token ids (prompts separated by ';'), "
                         "e.g. --prompt 3,4,5\n");
    return 2;
  }
  executorch::runtime::Method* current = &method;
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (p > 0 && (current = reload()) == nullptr) return 1;
    const int rc = run_decode(*current, prompts[p], n);
    if (rc != 0) return rc;
  }
  return 0;
}

}  // namespace etrt_runner
