/*
 * executorch-tensorrt: etrt_validate_blob, the C++ validator of the
 * delegate's blob (see blob_header.h and docs/blob-format.md).
 *
 * It must agree with read_blob() in src/executorch_tensorrt/blob.py on
 * which blobs are valid; tests/test_blob.py checks both on the same cases
 * and on random mutations.
 *
 * Two passes over the metadata, neither recursive:
 *  1. strict UTF-8, then strict JSON syntax (RFC 8259) with an explicit,
 *     fixed-size nesting stack;
 *  2. on text known to be valid JSON, a cursor walks the top-level object
 *     and checks io_bindings, aliased_io, hardware_compatible, device_id
 *     and sections.
 * Every read goes through a bounds-checked accessor; nothing is allocated.
 */
#include "blob_header.h"

#if defined(__has_include)
#if __has_include(<executorch_tensorrt/executor_table.h>)
// Included so that the compiler checks the two declarations agree.
#include <executorch_tensorrt/executor_table.h>
#endif
#endif

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>

namespace {

constexpr uint64_t kHeaderSize = ETRT_BLOB_HEADER_SIZE;
constexpr uint64_t kAlign = ETRT_BLOB_ALIGNMENT;
constexpr int kMaxDepth = ETRT_BLOB_MAX_JSON_DEPTH;
constexpr int kMaxKeys = ETRT_BLOB_MAX_OBJECT_KEYS;
constexpr uint64_t kNone = ~static_cast<uint64_t>(0);

// ---------------------------------------------------------------- errors

struct Err {
  char* buf;
  uint64_t len;
};

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
int32_t
fail(Err& e, const char* fmt, ...) {
  if (e.buf != nullptr && e.len > 0) {
    const size_t n = e.len > 0x7fffffffu ? 0x7fffffffu : static_cast<size_t>(e.len);
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(e.buf, n, fmt, ap);
    va_end(ap);
  }
  return 1;
}

uint64_t read_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) {
    v = (v << 8) | p[i];
  }
  return v;
}

// ---------------------------------------------------------------- UTF-8

// Strict UTF-8 as Python's bytes.decode("utf-8") reads it: no overlong
// forms, no surrogates, nothing above U+10FFFF. Returns the offset of the
// first bad byte, or kNone.
uint64_t utf8_invalid_at(const uint8_t* p, uint64_t n) {
  uint64_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (static_cast<uint64_t>(len) > n - i) {
      return i;
    }
    if (p[i + 1] < lo || p[i + 1] > hi) {
      return i;
    }
    for (uint64_t k = 2; k < static_cast<uint64_t>(len); ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) {
        return i;
      }
    }
    i += static_cast<uint64_t>(len);
  }
  return kNone;
}

// ---------------------------------------------------------------- JSON text

struct Json {
  const uint8_t* p;
  uint64_t n;

  // Bounds-checked read: 0 past the end (0 is never valid JSON text).
  uint8_t at(uint64_t i) const { return i < n ? p[i] : 0; }

  static bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
  static bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
  static bool is_hex(uint8_t c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  }
  static int hexval(uint8_t c) {
    return is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : c - 'A' + 10;
  }

  uint64_t ws(uint64_t i) const {
    while (i < n && is_ws(p[i])) ++i;
    return i;
  }
};

// Pass 1: syntax. Returns 0 or fails with the reason.
int32_t check_syntax(const Json& j, Err& e) {
  enum Expect { kValue, kValueOrClose, kKeyOrClose, kKey, kColon, kCommaOrClose, kEnd };
  uint8_t stack[kMaxDepth];  // '{' or '['
  int depth = 0;
  Expect expect = kValue;
  uint64_t i = 0;
  for (;;) {
    i = j.ws(i);
    if (i >= j.n) {
      if (expect == kEnd) return 0;
      return fail(e, "metadata is not valid JSON: unexpected end of text at metadata byte %llu",
                  static_cast<unsigned long long>(i));
    }
    const uint8_t c = j.p[i];
    bool value_done = false;
    switch (expect) {
      case kEnd:
        return fail(e, "metadata is not valid JSON: extra data at metadata byte %llu",
                    static_cast<unsigned long long>(i));
      case kColon:
        if (c != ':') {
          return fail(e, "metadata is not valid JSON: expected ':' at metadata byte %llu",
                      static_cast<unsigned long long>(i));
        }
        ++i;
        expect = kValue;
        continue;
      case kCommaOrClose: {
        const uint8_t top = stack[depth - 1];
        if (c == ',') {
          ++i;
          expect = top == '{' ? kKey : kValue;
          continue;
        }
        if ((top == '{' && c == '}') || (top == '[' && c == ']')) {
          ++i;
          --depth;
          value_done = true;
          break;
        }
        return fail(e, "metadata is not valid JSON: expected ',' or '%c' at metadata byte %llu",
                    top == '{' ? '}' : ']', static_cast<unsigned long long>(i));
      }
      case kKeyOrClose:
      case kKey:
        if (expect == kKeyOrClose && c == '}') {
          ++i;
          --depth;
          value_done = true;
          break;
        }
        if (c != '"') {
          return fail(e, "metadata is not valid JSON: expected a key string at metadata byte %llu",
                      static_cast<unsigned long long>(i));
        }
        // Fall through to the string scanner below, then expect ':'.
        break;
      case kValue:
      case kValueOrClose:
        if (expect == kValueOrClose && c == ']') {
          ++i;
          --depth;
          value_done = true;
          break;
        }
        if (c == '{' || c == '[') {
          if (depth >= kMaxDepth) {
            return fail(e, "metadata JSON nests deeper than %d levels", kMaxDepth);
          }
          stack[depth++] = c;
          ++i;
          expect = c == '{' ? kKeyOrClose : kValueOrClose;
          continue;
        }
        break;
    }
    if (!value_done) {
      // A scalar (or a key string) starts at i.
      if (c == '"') {
        const uint64_t start = i;
        ++i;
        for (;;) {
          if (i >= j.n) {
            return fail(e, "metadata is not valid JSON: unterminated string at metadata byte %llu",
                        static_cast<unsigned long long>(start));
          }
          const uint8_t s = j.p[i];
          if (s == '"') {
            ++i;
            break;
          }
          if (s < 0x20) {
            return fail(e, "metadata is not valid JSON: control character in a string at metadata "
                        "byte %llu", static_cast<unsigned long long>(i));
          }
          if (s == '\\') {
            const uint8_t x = j.at(i + 1);
            if (x == '"' || x == '\\' || x == '/' || x == 'b' || x == 'f' || x == 'n' ||
                x == 'r' || x == 't') {
              i += 2;
            } else if (x == 'u' && Json::is_hex(j.at(i + 2)) && Json::is_hex(j.at(i + 3)) &&
                       Json::is_hex(j.at(i + 4)) && Json::is_hex(j.at(i + 5))) {
              i += 6;
            } else {
              return fail(e, "metadata is not valid JSON: bad escape at metadata byte %llu",
                          static_cast<unsigned long long>(i));
            }
            continue;
          }
          ++i;  // UTF-8 was validated beforehand
        }
        if (expect == kKey || expect == kKeyOrClose) {
          expect = kColon;
          continue;
        }
      } else if (c == '-' || Json::is_digit(c)) {
        const uint64_t start = i;
        if (c == '-') ++i;
        if (j.at(i) == '0') {
          ++i;
        } else if (Json::is_digit(j.at(i))) {
          while (Json::is_digit(j.at(i))) ++i;
        } else {
          return fail(e, "metadata is not valid JSON: bad number at metadata byte %llu",
                      static_cast<unsigned long long>(start));
        }
        if (j.at(i) == '.') {
          ++i;
          if (!Json::is_digit(j.at(i))) {
            return fail(e, "metadata is not valid JSON: bad number at metadata byte %llu",
                        static_cast<unsigned long long>(start));
          }
          while (Json::is_digit(j.at(i))) ++i;
        }
        if (j.at(i) == 'e' || j.at(i) == 'E') {
          ++i;
          if (j.at(i) == '+' || j.at(i) == '-') ++i;
          if (!Json::is_digit(j.at(i))) {
            return fail(e, "metadata is not valid JSON: bad number at metadata byte %llu",
                        static_cast<unsigned long long>(start));
          }
          while (Json::is_digit(j.at(i))) ++i;
        }
      } else if (c == 't' && j.n - i >= 4 && std::memcmp(j.p + i, "true", 4) == 0) {
        i += 4;
      } else if (c == 'f' && j.n - i >= 5 && std::memcmp(j.p + i, "false", 5) == 0) {
        i += 5;
      } else if (c == 'n' && j.n - i >= 4 && std::memcmp(j.p + i, "null", 4) == 0) {
        i += 4;
      } else {
        return fail(e, "metadata is not valid JSON: unexpected character at metadata byte %llu",
                    static_cast<unsigned long long>(i));
      }
    }
    expect = depth == 0 ? kEnd : kCommaOrClose;
  }
}

// ---------------------------------------------------------------- cursor
// Everything below runs on text that passed check_syntax; the accessor
// still bounds every read.

uint64_t skip_string(const Json& j, uint64_t i) {  // i at the opening quote
  ++i;
  while (i < j.n && j.p[i] != '"') {
    i += j.p[i] == '\\' ? 2 : 1;
  }
  return i + 1;
}

uint64_t skip_value(const Json& j, uint64_t i) {
  const uint8_t c = j.at(i);
  if (c == '"') return skip_string(j, i);
  if (c == '{' || c == '[') {
    uint64_t depth = 0;
    while (i < j.n) {
      const uint8_t d = j.p[i];
      if (d == '"') {
        i = skip_string(j, i);
        continue;
      }
      if (d == '{' || d == '[') {
        ++depth;
      } else if (d == '}' || d == ']') {
        if (--depth == 0) return i + 1;
      }
      ++i;
    }
    return i;
  }
  while (i < j.n && j.p[i] != ',' && j.p[i] != '}' && j.p[i] != ']' && !Json::is_ws(j.p[i])) {
    ++i;
  }
  return i;
}

// Iterates the members of an object (open at '{') or the elements of an
// array (open at '[').
struct Iter {
  const Json& j;
  uint64_t pos;
  bool object;
  Iter(const Json& json, uint64_t open) : j(json), pos(json.ws(open + 1)), object(json.at(open) == '{') {}
  // key is kNone for arrays.
  bool next(uint64_t& key, uint64_t& value) {
    const uint8_t c = j.at(pos);
    if (pos >= j.n || c == '}' || c == ']') return false;
    key = kNone;
    if (object) {
      key = pos;
      pos = j.ws(skip_string(j, pos));
      pos = j.ws(pos + 1);  // ':'
    }
    value = pos;
    pos = j.ws(skip_value(j, pos));
    if (j.at(pos) == ',') pos = j.ws(pos + 1);
    return true;
  }
};

// Decodes a JSON string literal into code points, the way Python's json
// does (a \uD8xx\uDCxx pair becomes one code point; a lone surrogate stays).
struct Decoder {
  const Json& j;
  uint64_t i;
  Decoder(const Json& json, uint64_t quote) : j(json), i(quote + 1) {}
  uint32_t hex4(uint64_t k) const {
    uint32_t v = 0;
    for (uint64_t d = 0; d < 4; ++d) v = (v << 4) | static_cast<uint32_t>(Json::hexval(j.at(k + d)));
    return v;
  }
  // Returns the next code point, or -1 at the closing quote.
  int64_t next() {
    const uint8_t c = j.at(i);
    if (c == '"' || i >= j.n) return -1;
    if (c == '\\') {
      const uint8_t x = j.at(i + 1);
      i += 2;
      switch (x) {
        case 'b': return 0x08;
        case 'f': return 0x0C;
        case 'n': return 0x0A;
        case 'r': return 0x0D;
        case 't': return 0x09;
        case 'u': {
          uint32_t cp = hex4(i);
          i += 4;
          if (cp >= 0xD800 && cp <= 0xDBFF && j.at(i) == '\\' && j.at(i + 1) == 'u' &&
              Json::is_hex(j.at(i + 2)) && Json::is_hex(j.at(i + 3)) && Json::is_hex(j.at(i + 4)) &&
              Json::is_hex(j.at(i + 5))) {
            const uint32_t lo = hex4(i + 2);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
              i += 6;
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
          }
          return cp;
        }
        default: return x;  // " \ /
      }
    }
    int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (uint64_t k = 1; k < static_cast<uint64_t>(len); ++k) cp = (cp << 6) | (j.at(i + k) & 0x3Fu);
    i += static_cast<uint64_t>(len);
    return cp;
  }
};

bool str_eq(const Json& j, uint64_t a, uint64_t b) {
  Decoder da(j, a), db(j, b);
  for (;;) {
    const int64_t x = da.next(), y = db.next();
    if (x != y) return false;
    if (x < 0) return true;
  }
}

uint64_t str_hash(const Json& j, uint64_t a) {
  Decoder d(j, a);
  uint64_t h = 1469598103934665603ull;  // FNV-1a over code points
  for (int64_t cp = d.next(); cp >= 0; cp = d.next()) {
    h = (h ^ static_cast<uint64_t>(cp)) * 1099511628211ull;
  }
  return h;
}

// A set of JSON strings (by their offsets), compared by decoded value;
// open addressing over caller-provided storage of a power-of-two size at
// least twice the number of strings inserted.
class StringSet {
 public:
  StringSet(const Json& j, uint64_t* slots, uint64_t capacity) : j_(j), slots_(slots), mask_(capacity - 1) {
    for (uint64_t i = 0; i < capacity; ++i) slots_[i] = kNone;
  }
  // Inserts the string at `s`; returns the offset of an equal string
  // already present, or kNone.
  uint64_t insert(uint64_t s) {
    for (uint64_t i = str_hash(j_, s) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i] == kNone) {
        slots_[i] = s;
        return kNone;
      }
      if (str_eq(j_, slots_[i], s)) return slots_[i];
    }
  }

 private:
  const Json& j_;
  uint64_t* slots_;
  uint64_t mask_;
};

// Storage for a StringSet of n strings: on the stack when small, else on
// the heap (nothrow); null if that fails.
class SetStorage {
 public:
  explicit SetStorage(uint64_t n) {
    capacity_ = 16;
    while (capacity_ < 2 * n) capacity_ *= 2;
    if (capacity_ <= kInline) {
      data_ = inline_;
    } else {
      data_ = capacity_ <= (uint64_t{1} << 40) ? new (std::nothrow) uint64_t[capacity_] : nullptr;
      heap_ = data_;
    }
  }
  ~SetStorage() { delete[] heap_; }
  SetStorage(const SetStorage&) = delete;
  SetStorage& operator=(const SetStorage&) = delete;
  uint64_t* data() const { return data_; }
  uint64_t capacity() const { return capacity_; }

 private:
  static constexpr uint64_t kInline = 256;
  uint64_t inline_[kInline];
  uint64_t* data_ = nullptr;
  uint64_t* heap_ = nullptr;
  uint64_t capacity_ = 0;
};

uint64_t count_elements(const Json& j, uint64_t open) {
  Iter it(j, open);
  uint64_t k, v, n = 0;
  while (it.next(k, v)) ++n;
  return n;
}

bool str_is(const Json& j, uint64_t a, const char* lit) {
  Decoder d(j, a);
  for (const char* q = lit;; ++q) {
    const int64_t x = d.next();
    if (*q == 0) return x < 0;
    if (x != static_cast<uint8_t>(*q)) return false;
  }
}

// A printable excerpt of a string (for messages): non-ASCII and control
// characters become '?', long strings end in "...".
const char* excerpt(const Json& j, uint64_t a, char* buf, size_t size) {
  Decoder d(j, a);
  size_t k = 0;
  for (;;) {
    const int64_t x = d.next();
    if (x < 0) break;
    if (k + 4 >= size) {
      std::memcpy(buf + k, "...", 3);
      k += 3;
      break;
    }
    buf[k++] = (x >= 0x20 && x < 0x7F) ? static_cast<char>(x) : '?';
  }
  buf[k] = 0;
  return buf;
}

const char* kind_name(uint8_t c) {
  switch (c) {
    case '{': return "object";
    case '[': return "array";
    case '"': return "string";
    case 't': case 'f': return "boolean";
    case 'n': return "null";
    default: return "number";
  }
}

bool is_bool(const Json& j, uint64_t v) { return j.at(v) == 't' || j.at(v) == 'f'; }

// An integer lexeme (no fraction, no exponent), with its magnitude
// saturated on overflow and its value mod 16 kept exact.
struct Int {
  bool ok = false;  // an integer lexeme at all
  bool neg = false;
  bool overflow = false;  // magnitude > 2^64 - 1
  uint64_t mag = 0;
  unsigned mod16 = 0;  // magnitude mod 16
};

Int read_int(const Json& j, uint64_t v) {
  Int r;
  uint64_t i = v;
  if (j.at(i) == '-') {
    r.neg = true;
    ++i;
  }
  if (!Json::is_digit(j.at(i))) return r;
  while (Json::is_digit(j.at(i))) {
    const unsigned d = static_cast<unsigned>(j.at(i) - '0');
    if (!r.overflow) {
      if (r.mag > (~static_cast<uint64_t>(0) - d) / 10) {
        r.overflow = true;
      } else {
        r.mag = r.mag * 10 + d;
      }
    }
    r.mod16 = (r.mod16 * 10 + d) % 16;
    ++i;
  }
  const uint8_t after = j.at(i);
  if (after == '.' || after == 'e' || after == 'E') return r;
  if (r.mag == 0 && !r.overflow) r.neg = false;  // -0 is 0
  r.ok = true;
  return r;
}

// Finds key `name` among an object's members; returns the value's offset or kNone.
uint64_t find_key(const Json& j, uint64_t obj, const char* name) {
  Iter it(j, obj);
  uint64_t k, v;
  while (it.next(k, v)) {
    if (str_is(j, k, name)) return v;
  }
  return kNone;
}

// Repeated keys and the key count of one object.
int32_t check_keys(const Json& j, uint64_t obj, const char* where, Err& e) {
  uint64_t slots[2 * kMaxKeys];
  StringSet seen(j, slots, 2 * kMaxKeys);
  int count = 0;
  Iter it(j, obj);
  uint64_t k, v;
  while (it.next(k, v)) {
    if (seen.insert(k) != kNone) {
      char buf[64];
      return fail(e, "duplicate key '%s' in %s", excerpt(j, k, buf, sizeof buf), where);
    }
    if (++count > kMaxKeys) {
      return fail(e, "%s has more than %d keys", where, kMaxKeys);
    }
  }
  return 0;
}

bool is_known_dtype(const Json& j, uint64_t s) {
  static const char* const kDtypes[] = {
      "",         "uint8",         "int8",           "int32",          "int64",
      "float16",  "float32",       "bool",           "bfloat16",       "float8",
      // str(torch.dtype), written by an earlier Torch-TensorRT helper
      "torch.uint8",   "torch.int8",    "torch.int16",    "torch.int32",
      "torch.int64",   "torch.float16", "torch.float32",  "torch.float64",
      "torch.bool",    "torch.bfloat16", "torch.float8_e4m3fn", "torch.float8_e5m2",
  };
  for (const char* d : kDtypes) {
    if (str_is(j, s, d)) return true;
  }
  return false;
}

int32_t check_bindings(const Json& j, uint64_t arr, Err& e) {
  if (j.at(arr) != '[') {
    return fail(e, "'io_bindings' must be an array, got %s", kind_name(j.at(arr)));
  }
  static const char* const kRequired[] = {"name", "dtype", "shape", "is_input"};
  SetStorage storage(count_elements(j, arr));
  if (storage.data() == nullptr) return fail(e, "out of memory checking io_bindings names");
  StringSet names(j, storage.data(), storage.capacity());
  Iter it(j, arr);
  uint64_t unused, b;
  unsigned long long idx = 0;
  for (; it.next(unused, b); ++idx) {
    char where[48];
    std::snprintf(where, sizeof where, "io_bindings[%llu]", idx);
    if (j.at(b) != '{') {
      return fail(e, "%s must be an object, got %s", where, kind_name(j.at(b)));
    }
    if (check_keys(j, b, where, e)) return 1;
    uint64_t vals[4];
    for (int r = 0; r < 4; ++r) {
      vals[r] = find_key(j, b, kRequired[r]);
      if (vals[r] == kNone) {
        return fail(e, "%s lacks '%s' (every binding needs name, dtype, shape and is_input)",
                    where, kRequired[r]);
      }
    }
    const uint64_t name = vals[0], dtype = vals[1], shape = vals[2], is_input = vals[3];
    char buf[64];
    if (j.at(name) != '"' || j.at(name + 1) == '"') {
      return fail(e, "%s.name must be a non-empty string", where);
    }
    {
      Decoder d(j, name);
      for (int64_t cp = d.next(); cp >= 0; cp = d.next()) {
        if (cp < 0x20) {
          return fail(e, "%s.name '%s' contains a control character", where,
                      excerpt(j, name, buf, sizeof buf));
        }
      }
    }
    if (j.at(dtype) != '"' || !is_known_dtype(j, dtype)) {
      return fail(e, "%s.dtype is not a known dtype (uint8, int8, int32, int64, float16, "
                  "float32, bool, bfloat16, float8, or \"\")", where);
    }
    if (j.at(shape) != '[') {
      return fail(e, "%s.shape must be an array of integers >= -1, got %s", where,
                  kind_name(j.at(shape)));
    }
    {
      Iter dims(j, shape);
      uint64_t u, dim;
      while (dims.next(u, dim)) {
        const Int v = read_int(j, dim);
        const bool fits = v.ok && !v.overflow &&
            (v.neg ? v.mag <= 1 : v.mag <= 0x7FFFFFFFFFFFFFFFull);
        if (!fits) {
          return fail(e, "%s.shape must be an array of integers >= -1 (-1 for a dynamic "
                      "dimension)", where);
        }
      }
    }
    if (!is_bool(j, is_input)) {
      return fail(e, "%s.is_input must be true or false, got %s", where, kind_name(j.at(is_input)));
    }
    // Names are unique across the list (Torch-TensorRT refuses repeats).
    if (names.insert(name) != kNone) {
      Iter prev(j, arr);
      uint64_t pb;
      unsigned long long first = 0;
      while (prev.next(unused, pb) && !str_eq(j, find_key(j, pb, "name"), name)) ++first;
      return fail(e, "duplicate binding name '%s' (io_bindings[%llu] and %s)",
                  excerpt(j, name, buf, sizeof buf), first, where);
    }
  }
  return 0;
}

int32_t check_sections(const Json& j, uint64_t arr, uint64_t blob_size, uint64_t engine_end,
                       Err& e) {
  if (j.at(arr) != '[') {
    return fail(e, "'sections' must be an array, got %s", kind_name(j.at(arr)));
  }
  uint64_t prev_end = engine_end;
  uint64_t prev_name = kNone;  // kNone: the previous region is the engine
  SetStorage storage(count_elements(j, arr));
  if (storage.data() == nullptr) return fail(e, "out of memory checking section names");
  StringSet names(j, storage.data(), storage.capacity());
  Iter it(j, arr);
  uint64_t unused, s;
  unsigned long long idx = 0;
  for (; it.next(unused, s); ++idx) {
    char where[48];
    std::snprintf(where, sizeof where, "sections[%llu]", idx);
    if (j.at(s) != '{') {
      return fail(e, "%s must be an object, got %s", where, kind_name(j.at(s)));
    }
    if (check_keys(j, s, where, e)) return 1;
    const uint64_t name = find_key(j, s, "name");
    const uint64_t off_v = find_key(j, s, "offset");
    const uint64_t size_v = find_key(j, s, "size");
    if (name == kNone || j.at(name) != '"' || j.at(name + 1) == '"') {
      return fail(e, "%s.name must be a non-empty string", where);
    }
    const Int off = off_v == kNone ? Int() : read_int(j, off_v);
    if (!off.ok || off.neg) {
      return fail(e, "%s.offset must be a non-negative integer", where);
    }
    const Int len = size_v == kNone ? Int() : read_int(j, size_v);
    if (!len.ok || len.neg) {
      return fail(e, "%s.size must be a non-negative integer", where);
    }
    char nbuf[64], pbuf[64];
    excerpt(j, name, nbuf, sizeof nbuf);
    if (off.mod16 % kAlign != 0) {
      return fail(e, "section '%s' offset is not %llu-byte aligned", nbuf,
                  static_cast<unsigned long long>(kAlign));
    }
    if (off.overflow || len.overflow || off.mag > blob_size || len.mag > blob_size - off.mag) {
      return fail(e, "section '%s' region is out of bounds (offset %s%llu, size %s%llu; blob has "
                  "%llu bytes)", nbuf, off.overflow ? ">" : "",
                  static_cast<unsigned long long>(off.mag), len.overflow ? ">" : "",
                  static_cast<unsigned long long>(len.mag),
                  static_cast<unsigned long long>(blob_size));
    }
    if (off.mag < prev_end) {
      if (prev_name == kNone) {
        return fail(e, "section '%s' region [%llu, %llu) overlaps or precedes the engine region "
                    "(sections follow the engine, in order)", nbuf,
                    static_cast<unsigned long long>(off.mag),
                    static_cast<unsigned long long>(off.mag + len.mag));
      }
      return fail(e, "section '%s' region [%llu, %llu) overlaps or precedes section '%s' "
                  "(sections follow the engine, in order)", nbuf,
                  static_cast<unsigned long long>(off.mag),
                  static_cast<unsigned long long>(off.mag + len.mag),
                  excerpt(j, prev_name, pbuf, sizeof pbuf));
    }
    if (names.insert(name) != kNone) {
      return fail(e, "duplicate section name '%s'", nbuf);
    }
    prev_end = off.mag + len.mag;
    prev_name = name;
  }
  return 0;
}

int32_t check_metadata(const Json& j, uint64_t blob_size, uint64_t engine_end, Err& e) {
  const uint64_t bad = utf8_invalid_at(j.p, j.n);
  if (bad != kNone) {
    return fail(e, "metadata is not valid UTF-8 (at metadata byte %llu)",
                static_cast<unsigned long long>(bad));
  }
  if (check_syntax(j, e)) return 1;
  const uint64_t top = j.ws(0);
  if (j.at(top) != '{') {
    return fail(e, "metadata JSON must be an object, got %s", kind_name(j.at(top)));
  }
  if (check_keys(j, top, "the metadata object", e)) return 1;

  const uint64_t bindings = find_key(j, top, "io_bindings");
  if (bindings == kNone) return fail(e, "metadata has no 'io_bindings' key");
  if (check_bindings(j, bindings, e)) return 1;

  const uint64_t aliased = find_key(j, top, "aliased_io");
  if (aliased != kNone) {
    if (j.at(aliased) != '[') {
      return fail(e, "'aliased_io' must be an array, got %s", kind_name(j.at(aliased)));
    }
    if (j.at(j.ws(aliased + 1)) != ']') {
      return fail(e, "aliased_io entries (Torch-TensorRT in-place output aliasing) are not "
                  "supported by this delegate");
    }
  }
  const uint64_t hw = find_key(j, top, "hardware_compatible");
  if (hw != kNone && !is_bool(j, hw)) {
    return fail(e, "'hardware_compatible' must be true or false, got %s", kind_name(j.at(hw)));
  }
  const uint64_t dev = find_key(j, top, "device_id");
  if (dev != kNone) {
    const Int v = read_int(j, dev);
    if (!v.ok || v.overflow || v.mag > (v.neg ? 0x80000000ull : 0x7FFFFFFFull)) {
      return fail(e, "'device_id' must be a 32-bit integer");
    }
  }
  const uint64_t sections = find_key(j, top, "sections");
  if (sections != kNone && check_sections(j, sections, blob_size, engine_end, e)) return 1;
  return 0;
}

}  // namespace

extern "C"
#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
int32_t etrt_validate_blob(const void* data, uint64_t size, char* err, uint64_t err_len) {
  Err e{err, err_len};
  if (err != nullptr && err_len > 0) err[0] = 0;
  if (size < kHeaderSize) {
    return fail(e, "truncated blob: %llu bytes, fewer than the %llu-byte TR01 header",
                static_cast<unsigned long long>(size), static_cast<unsigned long long>(kHeaderSize));
  }
  if (data == nullptr) return fail(e, "blob data pointer is NULL");
  const auto* p = static_cast<const uint8_t*>(data);
  if (std::memcmp(p, "TR01", 4) != 0) {
    if (std::memcmp(p, "TR02", 4) == 0) {
      return fail(e, "unsupported magic b'TR02': a Torch-TensorRT blob with aliased (in-place) "
                  "outputs, which this delegate does not support");
    }
    char shown[20];
    size_t k = 0;
    for (int i = 0; i < 4; ++i) {
      const uint8_t c = p[i];
      if (c >= 0x20 && c < 0x7F && c != '\\' && c != '\'') {
        shown[k++] = static_cast<char>(c);
      } else {
        std::snprintf(shown + k, sizeof shown - k, "\\x%02x", c);
        k += 4;
      }
    }
    shown[k] = 0;
    return fail(e, "bad magic b'%s': not a TR01 TensorRT blob", shown);
  }
  const uint64_t meta_off = read_le(p + 4, 4);
  const uint64_t meta_size = read_le(p + 8, 4);
  const uint64_t eng_off = read_le(p + 12, 4);
  const uint64_t eng_size = read_le(p + 16, 8);
  using ull = unsigned long long;
  if (meta_off < kHeaderSize) {
    return fail(e, "metadata offset %llu overlaps the %llu-byte header", static_cast<ull>(meta_off),
                static_cast<ull>(kHeaderSize));
  }
  if (eng_off % kAlign != 0) {
    return fail(e, "engine offset %llu is not %llu-byte aligned", static_cast<ull>(eng_off),
                static_cast<ull>(kAlign));
  }
  if (eng_size == 0) {
    return fail(e, "engine is empty (engine size 0): a blob must carry an engine");
  }
  // meta_off and meta_size are < 2^32, so their sum cannot wrap; the
  // engine's size is 64-bit, so compare it against the space left.
  if (meta_off > size || meta_size > size - meta_off) {
    return fail(e, "metadata region [%llu, %llu) is out of bounds (blob has %llu bytes)",
                static_cast<ull>(meta_off), static_cast<ull>(meta_off + meta_size),
                static_cast<ull>(size));
  }
  if (eng_off > size || eng_size > size - eng_off) {
    return fail(e, "engine region at %llu of %llu bytes is out of bounds (blob has %llu bytes)",
                static_cast<ull>(eng_off), static_cast<ull>(eng_size), static_cast<ull>(size));
  }
  const uint64_t meta_end = meta_off + meta_size;
  const uint64_t eng_end = eng_off + eng_size;  // <= size: no wrap
  if (meta_off < eng_end && eng_off < meta_end) {
    return fail(e, "metadata region [%llu, %llu) overlaps the engine region [%llu, %llu)",
                static_cast<ull>(meta_off), static_cast<ull>(meta_end), static_cast<ull>(eng_off),
                static_cast<ull>(eng_end));
  }
  if (meta_off > eng_off) {
    return fail(e, "metadata region [%llu, %llu) must precede the engine region [%llu, %llu)",
                static_cast<ull>(meta_off), static_cast<ull>(meta_end), static_cast<ull>(eng_off),
                static_cast<ull>(eng_end));
  }
  if (meta_size == 0) {
    return fail(e, "metadata is empty: expected a JSON object with 'io_bindings'");
  }
  const Json j{p + meta_off, meta_size};
  return check_metadata(j, size, eng_end, e);
}
