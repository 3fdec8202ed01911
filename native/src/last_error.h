/*
 * executorch-tensorrt: the cause of the failing call (etrt_last_error).
 *
 * ExecuTorch reports only an Error code; the adapter and the executors
 * record why. The message is per thread, like errno, and scoped to one call
 * into the backend: is_available, init and execute clear it when they start
 * and when they succeed, so after a call it holds that call's cause or
 * nothing. (destroy leaves it alone: ExecuTorch calls it while unwinding a
 * failed load, after the init whose cause the caller is about to read.)
 */
#ifndef EXECUTORCH_TENSORRT_LAST_ERROR_H
#define EXECUTORCH_TENSORRT_LAST_ERROR_H

#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/result.h>

#include <cstdint>
#include <string>

namespace etrt {

void set_last_error(const std::string& message);
void clear_last_error();
bool has_last_error();
const std::string& last_error();

/* What fail() returns: the code, convertible to whatever the failing
 * function returns (an Error, a Result<T>, or the C API's int32_t). */
struct Failure {
  executorch::runtime::Error code;
  operator executorch::runtime::Error() const {
    return code;
  }
  operator int32_t() const {
    return static_cast<int32_t>(code);
  }
  template <typename T>
  operator executorch::runtime::Result<T>() const {
    return code;
  }
};

/* Records the printf-formatted cause on this thread and returns `code`:
 *   return fail(Error::InvalidArgument, "ndim %d out of range", ndim); */
__attribute__((format(printf, 2, 3))) Failure fail(
    executorch::runtime::Error code,
    const char* fmt,
    ...);

} // namespace etrt

#endif
