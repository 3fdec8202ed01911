// Tensor files (format ETTENSR1, docs/verification.md): named tensors, whole,
// little-endian. The C++ twin of src/executorch_tensorrt/program/tensor_file.py.
//
//   "ETTENSR1"  u32 version (1)  u32 count
//   per tensor: u32 name length, name, u32 dtype (ExecuTorch ScalarType code),
//               u32 rank, rank x i64 sizes, u64 byte count, bytes (row-major)
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace etrt_runner {

constexpr char kTensorFileMagic[8] = {'E', 'T', 'T', 'E', 'N', 'S', 'R', '1'};
constexpr uint32_t kTensorFileVersion = 1;
constexpr uint32_t kMaxRank = 16;
constexpr uint32_t kMaxName = 1024;

struct StoredTensor {
  std::string name;
  uint32_t dtype = 0;  // ExecuTorch ScalarType code
  std::vector<int64_t> sizes;
  std::vector<uint8_t> data;  // row-major
};

// Element size of a ScalarType code this format holds, 0 for any other.
inline size_t stored_element_size(uint32_t code) {
  switch (code) {
    case 0: case 1: case 11: return 1;    // uint8, int8, bool
    case 2: case 5: case 15: return 2;    // int16, float16, bfloat16
    case 3: case 6: return 4;             // int32, float32
    case 4: case 7: return 8;             // int64, float64
    default: return 0;
  }
}

// Reads every tensor of `path`; on failure returns false with `error` set.
inline bool read_tensor_file(const std::string& path, std::vector<StoredTensor>* out,
                             std::string* error) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    *error = path + " cannot be opened";
    return false;
  }
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
  std::fclose(f);
  size_t pos = 0;
  auto take = [&](void* dst, size_t len, const std::string& what) {
    if (len > bytes.size() - pos) {
      *error = path + ": truncated at byte " + std::to_string(pos) + " (" + what + ")";
      return false;
    }
    if (dst != nullptr) std::memcpy(dst, bytes.data() + pos, len);
    pos += len;
    return true;
  };
  char magic[8];
  if (!take(magic, 8, "magic") || std::memcmp(magic, kTensorFileMagic, 8) != 0) {
    *error = path + " is not a tensor file (no ETTENSR1 magic)";
    return false;
  }
  uint32_t version = 0, count = 0;
  if (!take(&version, 4, "version") || !take(&count, 4, "count")) return false;
  if (version != kTensorFileVersion) {
    *error = path + ": tensor file version " + std::to_string(version) + ", expected 1";
    return false;
  }
  for (uint32_t i = 0; i < count; ++i) {
    StoredTensor t;
    uint32_t name_len = 0, rank = 0;
    if (!take(&name_len, 4, "name length")) return false;
    if (name_len > kMaxName) {
      *error = path + ": a tensor name of " + std::to_string(name_len) + " bytes";
      return false;
    }
    t.name.resize(name_len);
    if (!take(&t.name[0], name_len, "name") || !take(&t.dtype, 4, "dtype") ||
        !take(&rank, 4, "rank")) {
      return false;
    }
    const size_t elem = stored_element_size(t.dtype);
    if (elem == 0 || rank > kMaxRank) {
      *error = path + ": tensor " + t.name + " has dtype code " + std::to_string(t.dtype) +
               " and rank " + std::to_string(rank) + ", which this format does not hold";
      return false;
    }
    t.sizes.resize(rank);
    if (!take(t.sizes.data(), rank * sizeof(int64_t), "sizes")) return false;
    uint64_t numel = 1;
    for (int64_t s : t.sizes) {
      if (s < 0 || (s > 0 && numel > UINT64_MAX / static_cast<uint64_t>(s) / elem)) {
        *error = path + ": tensor " + t.name + " has an invalid size";
        return false;
      }
      numel *= static_cast<uint64_t>(s);
    }
    uint64_t nbytes = 0;
    if (!take(&nbytes, 8, "byte count")) return false;
    if (nbytes != numel * elem) {
      *error = path + ": tensor " + t.name + " records " + std::to_string(nbytes) +
               " bytes, its shape needs " + std::to_string(numel * elem);
      return false;
    }
    if (nbytes > bytes.size() - pos) {
      *error = path + ": truncated in tensor " + t.name + "'s data";
      return false;
    }
    t.data.assign(bytes.begin() + pos, bytes.begin() + pos + nbytes);
    pos += nbytes;
    out->push_back(std::move(t));
  }
  if (pos != bytes.size()) {
    *error = path + ": " + std::to_string(bytes.size() - pos) + " stray bytes after the last tensor";
    return false;
  }
  return true;
}

inline bool write_tensor_file(const std::string& path, const std::vector<StoredTensor>& tensors,
                              std::string* error) {
  std::vector<uint8_t> out(kTensorFileMagic, kTensorFileMagic + 8);
  auto put = [&](const void* p, size_t len) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + len);
  };
  const uint32_t version = kTensorFileVersion;
  const uint32_t count = static_cast<uint32_t>(tensors.size());
  put(&version, 4);
  put(&count, 4);
  for (const auto& t : tensors) {
    const uint32_t name_len = static_cast<uint32_t>(t.name.size());
    const uint32_t rank = static_cast<uint32_t>(t.sizes.size());
    const uint64_t nbytes = t.data.size();
    put(&name_len, 4);
    put(t.name.data(), name_len);
    put(&t.dtype, 4);
    put(&rank, 4);
    put(t.sizes.data(), rank * sizeof(int64_t));
    put(&nbytes, 8);
    put(t.data.data(), t.data.size());
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(out.data(), 1, out.size(), f) != out.size()) {
    if (f != nullptr) std::fclose(f);
    *error = "cannot write " + path;
    return false;
  }
  return std::fclose(f) == 0 || (*error = "cannot write " + path, false);
}

// The input.N tensors of a file, in order; false (with `error`) when they are
// not numbered 0..n-1.
inline bool select_inputs(const std::vector<StoredTensor>& all, std::vector<StoredTensor>* inputs,
                          std::string* error) {
  for (size_t i = 0;; ++i) {
    const std::string want = "input." + std::to_string(i);
    const StoredTensor* found = nullptr;
    for (const auto& t : all) {
      if (t.name == want) found = &t;
    }
    if (found == nullptr) break;
    inputs->push_back(*found);
  }
  size_t named_inputs = 0;
  for (const auto& t : all) named_inputs += t.name.rfind("input.", 0) == 0 ? 1 : 0;
  if (named_inputs != inputs->size()) {
    *error = "the input tensors are not numbered input.0 .. input.n-1";
    return false;
  }
  return true;
}

// The runners' deterministic fill with no short period (cli/runner.py
// pattern_values): h = (i * 2654435761 + 12345) mod 2^32, k = (h >> 8) mod 251;
// floats (k - 125) / 128 (7 significant bits: exact in every float type),
// integers k mod 16, bools k odd.
inline int pattern_k(size_t i) {
  const uint64_t h = (static_cast<uint64_t>(i) * 2654435761ull + 12345ull) & 0xFFFFFFFFull;
  return static_cast<int>((h >> 8) % 251);
}

// IEEE binary16 bits of a float that binary16 represents exactly.
inline uint16_t exact_float_to_half(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  if ((bits & 0x7fffffff) == 0) return sign;
  const int exp = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
  return static_cast<uint16_t>(sign | (exp << 10) | ((bits >> 13) & 0x3ff));
}

inline uint16_t float_to_bfloat16_bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace etrt_runner
