#include "ptd_check.h"
#include "dl_symver.h"

#include <executorch/extension/flat_tensor/flat_tensor_data_map.h>
#include <executorch/runtime/core/data_loader.h>
#include <executorch/runtime/core/freeable_buffer.h>
#include <executorch/runtime/executor/merged_data_map.h>

#include <dlfcn.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace etrt {

namespace et = ::executorch::runtime;
namespace ext = ::executorch::extension;

namespace {

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

/* Bounds-checked reads of a flatbuffer: every offset is checked against the
 * buffer before it is followed (what flatbuffers' Verifier does, for the
 * FlatTensor schema's fields that ExecuTorch reads). */
class Fb {
 public:
  Fb(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool has(uint64_t at, uint64_t len) const { return at <= n_ && len <= n_ - at; }
  template <typename T> T get(uint64_t at) const {
    T v;
    std::memcpy(&v, p_ + at, sizeof v);
    return v;
  }
  /* The table at `t`: its vtable checked; the field slots it has. */
  bool table(uint64_t t, uint16_t* vt_size, uint64_t* vt, uint16_t* t_size,
             std::string* why) const {
    if (t % 4 != 0 || !has(t, 4)) return fail(why, "table at %" PRIu64 " is outside or misaligned", t);
    int64_t v = static_cast<int64_t>(t) - get<int32_t>(t);
    if (v < 0 || v % 2 != 0 || !has(static_cast<uint64_t>(v), 4))
      return fail(why, "vtable of the table at %" PRIu64 " is outside the index", t);
    *vt = static_cast<uint64_t>(v);
    *vt_size = get<uint16_t>(*vt);
    *t_size = get<uint16_t>(*vt + 2);
    if (*vt_size < 4 || *vt_size % 2 != 0 || !has(*vt, *vt_size) || !has(t, *t_size) || *t_size < 4)
      return fail(why, "vtable of the table at %" PRIu64 " has sizes %u/%u past the index", t,
                  unsigned(*vt_size), unsigned(*t_size));
    return true;
  }
  /* Field `i` of a checked table, `len` bytes: 0 when absent. */
  bool field(uint64_t t, uint64_t vt, uint16_t vt_size, uint16_t t_size, int i, uint64_t len,
             uint64_t* at, std::string* why) const {
    *at = 0;
    uint64_t slot = 4 + 2 * static_cast<uint64_t>(i);
    if (slot + 2 > vt_size) return true;
    uint16_t o = get<uint16_t>(vt + slot);
    if (o == 0) return true;
    if (o < 4 || o + len > t_size || (o + t) % (len < 4 ? len : 4) != 0)
      return fail(why, "field %d of the table at %" PRIu64 " lies outside it", i, t);
    *at = t + o;
    return true;
  }
  /* Follows the uoffset at `at` to a vector of `elem`-byte items: its first item. */
  bool vector(uint64_t at, uint64_t elem, uint64_t* first, uint32_t* count, std::string* why) const {
    uint64_t v = at + get<uint32_t>(at);
    if (v % 4 != 0 || !has(v, 4)) return fail(why, "vector at %" PRIu64 " is outside the index", v);
    *count = get<uint32_t>(v);
    if (!has(v + 4, static_cast<uint64_t>(*count) * elem))
      return fail(why, "vector at %" PRIu64 " of %" PRIu32 " items runs past the index", v, *count);
    *first = v + 4;
    return true;
  }
  bool string(uint64_t at, std::string* why) const {
    uint64_t first;
    uint32_t len;
    if (!vector(at, 1, &first, &len, why)) return false;
    if (!has(first + len, 1) || p_[first + len] != 0)
      return fail(why, "string at %" PRIu64 " is not terminated inside the index", first);
    return true;
  }
  static bool fail(std::string* why, const char* f, ...) __attribute__((format(printf, 3, 4))) {
    char buf[256];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    *why = buf;
    return false;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

struct Table {
  uint64_t at = 0, vt = 0;
  uint16_t vt_size = 0, size = 0;
};

bool open_table(const Fb& fb, uint64_t t, Table* out, std::string* why) {
  out->at = t;
  return fb.table(t, &out->vt_size, &out->vt, &out->size, why);
}

bool field(const Fb& fb, const Table& t, int i, uint64_t len, uint64_t* at, std::string* why) {
  return fb.field(t.at, t.vt, t.vt_size, t.size, i, len, at, why);
}

/* A table-valued field or vector item: the uoffset at `at`, followed. */
bool child(const Fb& fb, uint64_t at, Table* out, std::string* why) {
  return open_table(fb, at + fb.get<uint32_t>(at), out, why);
}

bool check_layout(const Fb& fb, const Table& layout, std::string* why) {
  uint64_t at, first;
  uint32_t n_sizes = 0, n_order = 0;
  if (!field(fb, layout, 1, 4, &at, why)) return false;
  if (at == 0) return Fb::fail(why, "a tensor layout has no sizes");
  if (!fb.vector(at, 4, &first, &n_sizes, why)) return false;
  if (!field(fb, layout, 2, 4, &at, why)) return false;
  if (at == 0) return Fb::fail(why, "a tensor layout has no dim_order");
  if (!fb.vector(at, 1, &first, &n_order, why)) return false;
  if (n_order != n_sizes)
    return Fb::fail(why, "a tensor layout has %" PRIu32 " sizes but %" PRIu32 " dim_order entries",
                    n_sizes, n_order);
  return true;
}

} // namespace

std::string check_flat_tensor(const uint8_t* p, size_t n, uint64_t fb_offset, uint64_t fb_size,
                              uint64_t base, uint64_t data_size, uint64_t file_size) {
  // Header: the index, then the segments, all inside the file (overflow-safe).
  if (fb_offset > file_size || fb_size > file_size - fb_offset || fb_offset + fb_size != n)
    return fmt("header: flatbuffer_offset %" PRIu64 " + flatbuffer_size %" PRIu64
               " is not the %zu bytes loaded inside the %" PRIu64 "-byte file",
               fb_offset, fb_size, n, file_size);
  if (base < n)
    return fmt("header: segment_base_offset %" PRIu64 " lies inside the index (which ends at %zu)",
               base, n);
  if (base > file_size || data_size > file_size - base)
    return fmt("header: segment_base_offset %" PRIu64 " + segment_data_size %" PRIu64
               " runs past the end of the %" PRIu64 "-byte file (truncated?)",
               base, data_size, file_size);
  // ExecuTorch's writer ends the file with the segments: a base moved within
  // the file (weights read shifted: NaN/inf) breaks this even unhashed.
  if (base + data_size != file_size)
    return fmt("header: segment_base_offset %" PRIu64 " + segment_data_size %" PRIu64
               " does not end at the end of the %" PRIu64 "-byte file",
               base, data_size, file_size);
  Fb fb(p, n);
  std::string why;
  Table root, seg, nd, layout;
  uint64_t at, first;
  uint32_t n_segments = 0, n_named = 0;
  if (!fb.has(0, 4) || !child(fb, 0, &root, &why)) return "index: root: " + why;
  if (!field(fb, root, 1, 4, &at, &why) || at == 0) return "index: no segments list " + why;
  if (!fb.vector(at, 4, &first, &n_segments, &why)) return "index: segments: " + why;
  for (uint32_t i = 0; i < n_segments; ++i) {
    uint64_t off_at, size_at;
    if (!child(fb, first + 4ull * i, &seg, &why) || !field(fb, seg, 0, 8, &off_at, &why) ||
        !field(fb, seg, 1, 8, &size_at, &why))
      return fmt("index: segment %" PRIu32 ": ", i) + why;
    uint64_t off = off_at ? fb.get<uint64_t>(off_at) : 0;
    uint64_t size = size_at ? fb.get<uint64_t>(size_at) : 0;
    if (off > data_size || size > data_size - off)
      return fmt("index: segment %" PRIu32 " (offset %" PRIu64 ", %" PRIu64
                 " bytes) lies outside the %" PRIu64 " bytes of segment data",
                 i, off, size, data_size);
  }
  if (!field(fb, root, 2, 4, &at, &why) || at == 0) return "index: no named_data list " + why;
  uint64_t named;
  if (!fb.vector(at, 4, &named, &n_named, &why)) return "index: named_data: " + why;
  for (uint32_t i = 0; i < n_named; ++i) {
    uint64_t key_at, index_at, layout_at;
    if (!child(fb, named + 4ull * i, &nd, &why) || !field(fb, nd, 0, 4, &key_at, &why) ||
        !field(fb, nd, 1, 4, &index_at, &why) || !field(fb, nd, 2, 4, &layout_at, &why))
      return fmt("index: entry %" PRIu32 ": ", i) + why;
    if (key_at == 0) return fmt("index: entry %" PRIu32 " has no key", i);
    if (!fb.string(key_at, &why)) return fmt("index: entry %" PRIu32 " key: ", i) + why;
    uint32_t index = index_at ? fb.get<uint32_t>(index_at) : 0;
    if (index >= n_segments)
      return fmt("index: entry %" PRIu32 " names segment %" PRIu32 " of %" PRIu32, i, index,
                 n_segments);
    if (layout_at != 0 && (!child(fb, layout_at, &layout, &why) || !check_layout(fb, layout, &why)))
      return fmt("index: entry %" PRIu32 " layout: ", i) + why;
  }
  return "";
}

namespace {

/* FlatTensorDataMap's members, in the order of the pinned header
 * (flat_tensor_data_map.h): the vtable pointer, then header_,
 * flat_tensor_data_, flat_tensor_, loader_. */
struct FlatTensorDataMapLayout {
  const void* vptr;
  ext::FlatTensorHeader header;
  et::FreeableBuffer flat_tensor_data;
  const void* flat_tensor;
  et::DataLoader* loader;
};
static_assert(sizeof(FlatTensorDataMapLayout) == sizeof(ext::FlatTensorDataMap),
              "FlatTensorDataMap's layout changed: update FlatTensorDataMapLayout");

/* runtime::internal::MergedDataMap (merged_data_map.h): the .ptd first, the .pte second. */
struct MergedDataMapLayout {
  const void* vptr;
  const et::NamedDataMap* first;
  const et::NamedDataMap* second;
};
static_assert(sizeof(MergedDataMapLayout) == sizeof(et::internal::MergedDataMap),
              "MergedDataMap's layout changed: update MergedDataMapLayout");

/* The address objects of a class store as their vptr (Itanium ABI: the
 * vtable symbol plus offset-to-top and typeinfo), or null if not loaded. */
const void* vptr_of(const char* vtable_symbol) {
  void* vt = dlsym(RTLD_DEFAULT, vtable_symbol);
  return vt == nullptr ? nullptr : static_cast<const char*>(vt) + 2 * sizeof(void*);
}

const void* vptr(const et::NamedDataMap* map) {
  const void* v;
  std::memcpy(&v, static_cast<const void*>(map), sizeof v);
  return v;
}

std::string check_map(const et::NamedDataMap* map, bool* unchecked, int depth) {
  static const void* const flat = vptr_of("_ZTVN10executorch9extension17FlatTensorDataMapE");
  static const void* const merged = vptr_of("_ZTVN10executorch7runtime8internal13MergedDataMapE");
  static const void* const pte = vptr_of("_ZTVN10executorch7runtime8internal10PteDataMapE");
  if (map == nullptr) return "";
  const void* v = vptr(map);
  if (flat != nullptr && v == flat) {
    const auto* m = reinterpret_cast<const FlatTensorDataMapLayout*>(map);
    et::Result<size_t> file_size = m->loader->size();
    if (!file_size.ok()) return "the .ptd's size cannot be read";
    std::string why = check_flat_tensor(
        static_cast<const uint8_t*>(m->flat_tensor_data.data()), m->flat_tensor_data.size(),
        m->header.flatbuffer_offset, m->header.flatbuffer_size, m->header.segment_base_offset,
        m->header.segment_data_size, file_size.get());
    return why.empty() ? why : "the program's .ptd (external named data) is damaged: " + why;
  }
  if (merged != nullptr && v == merged && depth < 4) {
    const auto* m = reinterpret_cast<const MergedDataMapLayout*>(map);
    std::string why = check_map(m->first, unchecked, depth + 1);
    return why.empty() ? check_map(m->second, unchecked, depth + 1) : why;
  }
  if (pte != nullptr && v == pte) return ""; // inside the .pte: verified with the program
  *unchecked = true;
  return "";
}

} // namespace

std::string check_named_data_map(const et::NamedDataMap* map, bool* unchecked) {
  *unchecked = false;
  return check_map(map, unchecked, 0);
}

} // namespace etrt
