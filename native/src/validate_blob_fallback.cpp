/*
 * Used only while native/src/blob_header.cpp (the full TR01 validator) is
 * absent from the tree; CMakeLists.txt picks one of the two. It checks just
 * enough for the adapter to refuse an obviously wrong blob: the 32-byte
 * header, the "TR01" magic, and that the metadata and engine sections lie
 * inside the blob.
 */
#include <executorch_tensorrt/executor_table.h>

#include <cstdio>
#include <cstring>

namespace {
uint64_t read_le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) {
    v = (v << 8) | p[i];
  }
  return v;
}

int32_t fail(char* err, uint64_t err_len, const char* why) {
  if (err != nullptr && err_len > 0) {
    std::snprintf(err, err_len, "%s", why);
  }
  return 1;
}
} // namespace

extern "C" int32_t etrt_validate_blob(
    const void* data,
    uint64_t size,
    char* err,
    uint64_t err_len) {
  const auto* p = static_cast<const unsigned char*>(data);
  if (p == nullptr || size < 32) {
    return fail(err, err_len, "blob shorter than the 32-byte TR01 header");
  }
  if (std::memcmp(p, "TR01", 4) != 0) {
    return fail(err, err_len, "blob does not start with the TR01 magic");
  }
  const uint64_t meta_off = read_le(p + 4, 4);
  const uint64_t meta_size = read_le(p + 8, 4);
  const uint64_t engine_off = read_le(p + 12, 4);
  const uint64_t engine_size = read_le(p + 16, 8);
  if (meta_off < 32 || meta_off > size || meta_size > size - meta_off) {
    return fail(err, err_len, "metadata section lies outside the blob");
  }
  if (engine_off > size || engine_size > size - engine_off) {
    return fail(err, err_len, "engine section lies outside the blob");
  }
  return 0;
}
