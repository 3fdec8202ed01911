// Greedy decoding for the C++ runner (--decode N --prompt 3,4,5): the twin of
// executorch_tensorrt.greedy_decode. The method must be an exported LLM step
// `forward(tokens int64 [B, S], positions int64 [S]) -> logits float [B, S, V]`
// with a dynamic S (transformers' TorchExportableModuleForDecoderOnlyLM, or
// a decoder with register_buffer caches and input_pos). The prompt goes in
// chunks of at most the method's largest S (its planned input size, which is
// what llm.export records as get_max_seq_len), then one token per call. A
// program exported with a static batch of B > 1 rows takes B prompts of equal
// length separated by '|', decoded together. The KV cache stays inside the
// program (in the TensorRT delegate for our partitions). Prints
//   tokens: t0, t1, ...            (a batch: "tokens[r]: ..." per row)
//   decode: <microseconds> us/token over <n-1> calls
#pragma once

#include <executorch/extension/module/module.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>

#include <algorithm>
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

// The method's static batch B and largest sequence S, from its planned input 0.
inline bool step_limits(executorch::runtime::Method& method, int32_t* batch, int32_t* max_seq,
                        std::string* why) {
  auto meta = method.method_meta().input_tensor_meta(0);
  if (!meta.ok() || meta->sizes().size() != 2) {
    *why = "the method's input 0 is not int64 tokens [B, S]";
    return false;
  }
  *batch = meta->sizes()[0];
  *max_seq = meta->sizes()[1];
  if (*batch < 1 || *max_seq < 1) {
    *why = "the method's input 0 is planned for [" + std::to_string(*batch) + ", " +
           std::to_string(*max_seq) + "] tokens: no room for a token";
    return false;
  }
  return true;
}

// One step: `tokens` holds B rows of `len` ids (row-major) at positions
// [pos, pos + len); `next` gets each row's argmax of its last logits row.
inline bool decode_step(executorch::runtime::Method& method, const std::vector<int64_t>& tokens,
                        int32_t batch, int64_t pos, std::vector<int64_t>* next,
                        std::string* why) {
  using executorch::runtime::EValue;
  using executorch::runtime::etensor::Tensor;
  const int32_t n = static_cast<int32_t>(tokens.size()) / batch;
  std::vector<int64_t> positions(n);
  for (int32_t i = 0; i < n; ++i) positions[i] = pos + i;
  LongTensor ids(tokens, {batch, n}), at(positions, {n});
  if (method.set_input(EValue(Tensor(ids.impl.get())), 0) != executorch::runtime::Error::Ok ||
      method.set_input(EValue(Tensor(at.impl.get())), 1) != executorch::runtime::Error::Ok) {
    *why = "the method does not take (tokens int64 [B, S], positions int64 [S]) inputs";
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
      out.toTensor().dim() != 3 || out.toTensor().size(0) != batch) {
    *why = "output 0 is not float logits [B, S, V]";
    return false;
  }
  const Tensor logits = out.toTensor();
  const int64_t seq = logits.size(1), vocab = logits.size(2);
  next->assign(batch, 0);
  for (int32_t b = 0; b < batch; ++b) {
    const float* last = logits.const_data_ptr<float>() + ((b + 1) * seq - 1) * vocab;
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; ++v)
      if (last[v] > last[best]) best = v;
    (*next)[b] = best;
  }
  return true;
}

// `rows`: B prompts of equal length (B = the method's batch).
inline int run_decode(executorch::runtime::Method& method,
                      const std::vector<std::vector<int64_t>>& rows, int n) {
  std::string why;
  int32_t batch = 0, max_seq = 0;
  if (!step_limits(method, &batch, &max_seq, &why)) {
    std::fprintf(stderr, "error: %s\n", why.c_str());
    return 1;
  }
  if (static_cast<int32_t>(rows.size()) != batch) {
    std::fprintf(stderr, "error: the program decodes a batch of %d row(s); --prompt gave %zu "
                         "(rows of one batch are separated by '|')\n", batch, rows.size());
    return 2;
  }
  const size_t len = rows[0].size();
  for (const auto& row : rows)
    if (row.size() != len) {
      std::fprintf(stderr, "error: the rows of a batch need prompts of equal length "
                           "(got %zu and %zu tokens)\n", len, row.size());
      return 2;
    }
  std::vector<std::vector<int64_t>> generated(batch);
  std::vector<int64_t> next;
  int64_t pos = 0;
  for (size_t first = 0; first < len; first += max_seq) {  // prefill, in chunks
    const size_t count = std::min(len - first, static_cast<size_t>(max_seq));
    std::vector<int64_t> chunk;
    for (const auto& row : rows) chunk.insert(chunk.end(), row.begin() + first,
                                              row.begin() + first + count);
    if (!decode_step(method, chunk, batch, pos, &next, &why)) {
      std::fprintf(stderr, "error: prefill of tokens %zu..%zu: %s\n", first,
                   first + count - 1, why.c_str());
      return 1;
    }
    pos += static_cast<int64_t>(count);
  }
  for (int32_t b = 0; b < batch; ++b) generated[b].push_back(next[b]);
  double seconds = 0;
  for (int i = 1; i < n; ++i, ++pos) {
    auto t0 = std::chrono::steady_clock::now();
    if (!decode_step(method, next, batch, pos, &next, &why)) {
      std::fprintf(stderr, "error: decode step %d: %s\n", i, why.c_str());
      return 1;
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int32_t b = 0; b < batch; ++b) generated[b].push_back(next[b]);
  }
  for (int32_t b = 0; b < batch; ++b) {
    if (batch == 1)
      std::printf("tokens:");
    else
      std::printf("tokens[%d]:", b);
    for (size_t i = 0; i < generated[b].size(); ++i)
      std::printf("%s %lld", i ? "," : "", static_cast<long long>(generated[b][i]));
    std::printf("\n");
  }
  std::printf("decode: %.1f us/token over %d calls\n",
              n > 1 ? 1e6 * seconds / (n - 1) : 0.0, n - 1);
  return 0;
}

// --decode N --prompt "3,4,5[;6,7]": each prompt (';'-separated) decodes N tokens
// from the initial state; within a prompt, '|' separates the rows of a batch
// ("1,2,3|4,5,6" for a program exported with batch_size=2). `reload()` unloads
// and loads the method again, which destroys the delegates and their state (the
// C++ form of executorch_tensorrt.reset_state); it returns nullptr after
// printing why it failed.
template <typename Reload>
inline int run_decode_mode(executorch::runtime::Method& method, const std::string& count_text,
                           const std::string& prompt_text, Reload reload) {
  std::vector<std::vector<std::vector<int64_t>>> prompts;
  const int n = std::atoi(count_text.c_str());
  bool ok = n >= 1;
  for (size_t start = 0; ok;) {
    const size_t end = prompt_text.find(';', start);
    const std::string prompt = prompt_text.substr(
        start, end == std::string::npos ? std::string::npos : end - start);
    prompts.emplace_back();
    for (size_t row = 0; ok;) {
      const size_t bar = prompt.find('|', row);
      prompts.back().emplace_back();
      ok = parse_prompt(prompt.substr(row, bar == std::string::npos ? std::string::npos
                                                                   : bar - row),
                        &prompts.back().back());
      if (bar == std::string::npos) break;
      row = bar + 1;
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (!ok) {
    std::fprintf(stderr, "error: --decode takes a token count >= 1 and --prompt a "
                         "comma-separated list of token ids (prompts separated by ';', "
                         "rows of a batch by '|'), e.g. --prompt 3,4,5\n");
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
