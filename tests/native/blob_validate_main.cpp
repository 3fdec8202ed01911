// Standalone driver for etrt_validate_blob (native/src/blob_header.cpp, the
// adapter's TR01 header check), built by tests/native/test_blob_header.py
// with -fsanitize=address,undefined.
//
//   blob_validate_main FILE...   validate each file; prints "OK" or "ERR <reason>"
//   blob_validate_main -         read records from stdin: an 8-byte
//                                little-endian length, then that many bytes;
//                                prints one line per record: "0" or "1 <reason>"
//
// Each blob is copied into a heap buffer of exactly its size, so that a read
// past its end lands in AddressSanitizer's redzone. Each call also gets an
// error buffer of a varying small size with a guard byte after it.
#include <executorch_tensorrt/executor_table.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

bool read_exact(FILE* f, void* buf, size_t n) {
  return n == 0 || std::fread(buf, 1, n, f) == n;
}

int validate(const std::vector<unsigned char>& bytes, char* reason, size_t reason_len) {
  // Exactly-sized allocation (at least 1 byte so malloc returns a pointer).
  const size_t n = bytes.size();
  unsigned char* copy = static_cast<unsigned char*>(std::malloc(n == 0 ? 1 : n));
  if (copy == nullptr) {
    std::fprintf(stderr, "out of memory\n");
    std::exit(2);
  }
  if (n) std::memcpy(copy, bytes.data(), n);
  const int32_t rc = etrt_validate_blob(n == 0 ? nullptr : copy, n, reason, reason_len);
  // The same call with tiny error buffers must stay inside them.
  for (uint64_t small : {0u, 1u, 2u, 7u}) {
    char buf[9];
    std::memset(buf, 0x5a, sizeof buf);
    const int32_t again = etrt_validate_blob(n == 0 ? nullptr : copy, n, small ? buf : nullptr, small);
    if ((again != 0) != (rc != 0)) {
      std::fprintf(stderr, "verdict changed with err_len=%llu\n", static_cast<unsigned long long>(small));
      std::exit(3);
    }
    for (size_t k = small; k < sizeof buf; ++k) {
      if (static_cast<unsigned char>(buf[k]) != 0x5a) {
        std::fprintf(stderr, "wrote past err_len=%llu\n", static_cast<unsigned long long>(small));
        std::exit(3);
      }
    }
    if (small && rc != 0 && std::memchr(buf, 0, small) == nullptr) {
      std::fprintf(stderr, "reason not NUL-terminated within err_len=%llu\n",
                   static_cast<unsigned long long>(small));
      std::exit(3);
    }
  }
  std::free(copy);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE... | -\n", argv[0]);
    return 2;
  }
  char reason[512];
  if (std::strcmp(argv[1], "-") == 0) {
    for (;;) {
      unsigned char len_le[8];
      const size_t got = std::fread(len_le, 1, 8, stdin);
      if (got == 0) break;
      if (got != 8) {
        std::fprintf(stderr, "short record header\n");
        return 2;
      }
      uint64_t len = 0;
      for (int i = 7; i >= 0; --i) len = (len << 8) | len_le[i];
      std::vector<unsigned char> bytes(static_cast<size_t>(len));
      if (!read_exact(stdin, bytes.data(), bytes.size())) {
        std::fprintf(stderr, "short record\n");
        return 2;
      }
      reason[0] = 0;
      if (validate(bytes, reason, sizeof reason) == 0) {
        std::printf("0\n");
      } else {
        for (char* c = reason; *c; ++c) {
          if (*c == '\n') *c = ' ';
        }
        std::printf("1 %s\n", reason);
      }
    }
    return 0;
  }
  int bad = 0;
  for (int a = 1; a < argc; ++a) {
    FILE* f = std::fopen(argv[a], "rb");
    if (f == nullptr) {
      std::fprintf(stderr, "%s: cannot open\n", argv[a]);
      return 2;
    }
    std::vector<unsigned char> bytes;
    unsigned char chunk[65536];
    size_t got;
    while ((got = std::fread(chunk, 1, sizeof chunk, f)) > 0) bytes.insert(bytes.end(), chunk, chunk + got);
    std::fclose(f);
    reason[0] = 0;
    if (validate(bytes, reason, sizeof reason) == 0) {
      std::printf("%s: OK\n", argv[a]);
    } else {
      std::printf("%s: ERR %s\n", argv[a], reason);
      bad = 1;
    }
  }
  return bad;
}
