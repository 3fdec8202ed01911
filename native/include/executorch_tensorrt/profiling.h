/*
 * executorch-tensorrt: profiling events for ETDump (docs/profiling.md).
 *
 * A separate, versioned part of the adapter's C ABI; executor_table.h is
 * unchanged. While the adapter runs an executor's execute, it remembers that
 * call's ExecuTorch event tracer on the calling thread. An executor asks
 * etrt_profiling_flags() whether anyone is tracing (0: ETDump is off, log
 * nothing and pay nothing) and reports each stage or node it timed with
 * etrt_log_event(); the adapter records it as an ExecuTorch delegate
 * profiling event (event_tracer_log_profiling_delegate), which
 * executorch.devtools.Inspector shows under the delegate call.
 *
 * Timestamps are ExecuTorch ticks (etrt_current_ticks(), the PAL's clock).
 * On Linux that is CLOCK_MONOTONIC in nanoseconds, the same clock as
 * Python's time.monotonic_ns().
 */
#ifndef EXECUTORCH_TENSORRT_PROFILING_H
#define EXECUTORCH_TENSORRT_PROFILING_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ETRT_PROFILING_ABI_VERSION 1u

/* Bits of etrt_profiling_flags(). */
#define ETRT_PROFILE_STAGES 1u /* an event tracer is attached: log stages */

uint32_t etrt_profiling_abi_version(void);

/* Non-zero only inside an execute call whose caller enabled ETDump, and only
 * on the thread the adapter called the executor on. */
uint32_t etrt_profiling_flags(void);

/* Records one event of the current call: `name` (copied by the tracer) ran
 * from start_ticks to end_ticks. Returns 0 if recorded, 1 if no tracer is
 * attached to this thread (the event is dropped), an Error code for a NULL
 * name or end before start. */
int32_t etrt_log_event(const char* name, uint64_t start_ticks, uint64_t end_ticks);

/* ExecuTorch's clock (et_pal_current_ticks), for executors written in C. */
uint64_t etrt_current_ticks(void);

#ifdef __cplusplus
}
#endif

#endif
