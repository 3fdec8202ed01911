/*
 * executorch-tensorrt: where the backend's executors come from. The
 * installed table if there is one; otherwise, in a process without Python,
 * the table that an embedded interpreter installs (embedded_python.h),
 * started once on first use. A failed start is remembered, not retried.
 */
#ifndef EXECUTORCH_TENSORRT_EMBEDDED_START_H
#define EXECUTORCH_TENSORRT_EMBEDDED_START_H

#include <executorch_tensorrt/executor_table.h>

#include <string>

namespace etrt {

/* The executors to call, or NULL (then no_executor_message() says why). */
const etrt_executor_table* current_executors();

/* Why there is no executor: the embedded start's failure, or how to install one. */
std::string no_executor_message();

} // namespace etrt

#endif
