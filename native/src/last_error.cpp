/* The per-thread cause of the failing call (see last_error.h). */
#include "last_error.h"

#include <executorch_tensorrt/executor_table.h>

#include <cstdarg>
#include <cstdio>

namespace etrt {
namespace {

std::string& message() {
  static thread_local std::string text;
  return text;
}

} // namespace

void set_last_error(const std::string& text) {
  message() = text;
}

void clear_last_error() {
  std::string& text = message();
  if (!text.empty()) {
    text.clear();
  }
}

bool has_last_error() {
  return !message().empty();
}

const std::string& last_error() {
  return message();
}

Failure fail(executorch::runtime::Error code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list again;
  va_copy(again, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string text(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) {
    std::vsnprintf(&text[0], text.size() + 1, fmt, again);
  }
  va_end(again);
  message() = std::move(text);
  return Failure{code};
}

} // namespace etrt

extern "C" {

void etrt_set_last_error(const char* text) {
  etrt::set_last_error(text != nullptr ? text : "");
}

const char* etrt_last_error(void) {
  // A copy, so the pointer stays valid until this thread asks again even if
  // it records or clears an error meanwhile.
  static thread_local std::string copy;
  copy = etrt::last_error();
  return copy.c_str();
}

} // extern "C"
