/* executorch-tensorrt: which shared library a code or data address lies in. */
#ifndef EXECUTORCH_TENSORRT_LIBRARY_PATH_H
#define EXECUTORCH_TENSORRT_LIBRARY_PATH_H

#include <string>

namespace etrt {

/* The file of the shared object that contains `address` (dladdr), or "". */
std::string library_containing(const void* address);

/* The file this adapter was loaded from. */
std::string this_library();

} // namespace etrt

#endif
