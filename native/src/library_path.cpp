/* Which shared library an address lies in (see library_path.h). */
#include "library_path.h"

#include <dlfcn.h>

#include "dl_symver.h"

namespace etrt {

std::string library_containing(const void* address) {
  Dl_info info{};
  if (address != nullptr && dladdr(address, &info) != 0 && info.dli_fname != nullptr) {
    return info.dli_fname;
  }
  return "";
}

std::string this_library() {
  static const char anchor = 0;
  return library_containing(&anchor);
}

} // namespace etrt
