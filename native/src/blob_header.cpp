/*
 * The adapter's blob header check (see blob_header.h). Every region is
 * checked as `offset <= size && length <= size - offset`, which cannot
 * overflow whatever the header says.
 */
#include "blob_header.h"

#include <executorch_tensorrt/executor_table.h>

#include "etrt_blob_constants.h" // generated from the Python format module

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace etrt {
namespace {

using ull = unsigned long long;

__attribute__((format(printf, 3, 4))) bool reject(char* err, size_t err_len,
                                                  const char* fmt, ...) {
  if (err != nullptr && err_len > 0) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
  }
  return false;
}

uint64_t read_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) {
    v = (v << 8) | p[i];
  }
  return v;
}

/* The magic as printable text, with \xNN for other bytes. */
void show_bytes(const uint8_t* p, size_t n, char* out, size_t out_len) {
  size_t k = 0;
  for (size_t i = 0; i < n && k + 5 <= out_len; ++i) {
    const uint8_t c = p[i];
    if (c >= 0x20 && c < 0x7F && c != '\\' && c != '\'') {
      out[k++] = static_cast<char>(c);
    } else {
      k += static_cast<size_t>(std::snprintf(out + k, out_len - k, "\\x%02x", c));
    }
  }
  out[k < out_len ? k : out_len - 1] = '\0';
}

} // namespace

bool parse_blob_header(const void* data, uint64_t size, BlobHeader* out,
                       char* err, size_t err_len) {
  using namespace blob;
  if (err != nullptr && err_len > 0) {
    err[0] = '\0';
  }
  if (size < kHeaderSize) {
    return reject(err, err_len,
                  "truncated blob: %llu bytes, fewer than the %llu-byte TR01 header",
                  static_cast<ull>(size), static_cast<ull>(kHeaderSize));
  }
  if (data == nullptr) {
    return reject(err, err_len, "blob data pointer is NULL");
  }
  const auto* p = static_cast<const uint8_t*>(data);
  if (std::memcmp(p + kMagicAt, kMagic, kMagicSize) != 0 &&
      std::memcmp(p + kMagicAt, kMagicAliased, kMagicSize) != 0) {
    char found[4 * kMagicSize + 1];
    char wanted[4 * kMagicSize + 1];
    show_bytes(p + kMagicAt, kMagicSize, found, sizeof(found));
    show_bytes(reinterpret_cast<const uint8_t*>(kMagic), kMagicSize, wanted, sizeof(wanted));
    return reject(err, err_len, "bad magic '%s' (expected '%s' or TR02): not a TensorRT blob "
                  "this delegate reads", found, wanted);
  }
  const uint64_t meta_off = read_le(p + kMetadataOffsetAt, 4);
  const uint64_t meta_size = read_le(p + kMetadataSizeAt, 4);
  const uint64_t eng_off = read_le(p + kEngineOffsetAt, 4);
  const uint64_t eng_size = read_le(p + kEngineSizeAt, 8);
  if (meta_off < kHeaderSize) {
    return reject(err, err_len, "metadata offset %llu overlaps the %llu-byte header",
                  static_cast<ull>(meta_off), static_cast<ull>(kHeaderSize));
  }
  if (eng_off % kAlignment != 0) {
    return reject(err, err_len, "engine offset %llu is not %llu-byte aligned",
                  static_cast<ull>(eng_off), static_cast<ull>(kAlignment));
  }
  // An empty engine region is legal ("engine": "none" in the metadata, which
  // the Python reader checks): the executor builds the engine at load.
  if (meta_off > size || meta_size > size - meta_off) {
    return reject(err, err_len,
                  "metadata region at %llu of %llu bytes is out of bounds (blob has %llu bytes)",
                  static_cast<ull>(meta_off), static_cast<ull>(meta_size), static_cast<ull>(size));
  }
  if (eng_off > size || eng_size > size - eng_off) {
    return reject(err, err_len,
                  "engine region at %llu of %llu bytes is out of bounds (blob has %llu bytes)",
                  static_cast<ull>(eng_off), static_cast<ull>(eng_size), static_cast<ull>(size));
  }
  // Both regions are inside the blob now, so their ends cannot wrap.
  const uint64_t meta_end = meta_off + meta_size;
  const uint64_t eng_end = eng_off + eng_size;
  if (meta_off < eng_end && eng_off < meta_end) {
    return reject(err, err_len,
                  "metadata region [%llu, %llu) overlaps the engine region [%llu, %llu)",
                  static_cast<ull>(meta_off), static_cast<ull>(meta_end),
                  static_cast<ull>(eng_off), static_cast<ull>(eng_end));
  }
  if (meta_off > eng_off) {
    return reject(err, err_len,
                  "metadata region [%llu, %llu) must precede the engine region [%llu, %llu)",
                  static_cast<ull>(meta_off), static_cast<ull>(meta_end),
                  static_cast<ull>(eng_off), static_cast<ull>(eng_end));
  }
  if (meta_size == 0) {
    return reject(err, err_len, "metadata is empty: expected a JSON object with 'io_bindings'");
  }
  if (out != nullptr) {
    *out = BlobHeader{meta_off, meta_size, eng_off, eng_size};
  }
  return true;
}

} // namespace etrt

extern "C" int32_t etrt_validate_blob(const void* data, uint64_t size, char* err,
                                      uint64_t err_len) {
  // vsnprintf's size is an int in spirit: keep it there.
  const size_t len = err_len > 0x7fffffffu ? 0x7fffffffu : static_cast<size_t>(err_len);
  return etrt::parse_blob_header(data, size, nullptr, err, len) ? 0 : 1;
}
