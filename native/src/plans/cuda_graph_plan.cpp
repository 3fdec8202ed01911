/*
 * The TensorRT executor's native plan (cuda_graph_plan.h): signature check,
 * host-to-device staging copies, cuGraphLaunch, device-to-host copies and the
 * device-resident ordering of docs/gpu-runtime.md, all through the CUDA
 * driver dlopened here at the first run. No CUDA or TensorRT header is
 * needed: the few driver functions are declared below with the driver's
 * opaque handles as pointers.
 */
#include "cuda_graph_plan.h"
#include "dl_symver.h"

#include "last_error.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstring>
#include <new>
#include <string>

namespace etrt {

using executorch::runtime::Error;

namespace {

using CUresult = int;
using CUcontext = void*;
using CUstream = void*;
using CUevent = void*;
using CUgraphExec = void*;
using CUdeviceptr = unsigned long long;

/* The plan's fields an ETRT_PLAN_CUDA_GRAPH needs: up to cuda_graph. */
constexpr size_t kPlanSize = offsetof(etrt_native_plan, cuda_graph) + sizeof(void*);

struct Driver {
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned int);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  std::string error; // why it is unusable, or empty
};

/* libcuda.so.1, loaded once (the executor that made the plan has it loaded
 * already, so this only looks its symbols up). */
const Driver& driver() {
  static const Driver loaded = [] {
    Driver d{};
    void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = ::dlerror();
      d.error = std::string("libcuda.so.1 cannot be loaded: ") + (e != nullptr ? e : "unknown");
      return d;
    }
    const struct {
      const char* name;
      void** slot;
    } entries[] = {
        {"cuCtxGetCurrent", reinterpret_cast<void**>(&d.cuCtxGetCurrent)},
        {"cuCtxSetCurrent", reinterpret_cast<void**>(&d.cuCtxSetCurrent)},
        {"cuEventRecord", reinterpret_cast<void**>(&d.cuEventRecord)},
        {"cuStreamWaitEvent", reinterpret_cast<void**>(&d.cuStreamWaitEvent)},
        {"cuGraphLaunch", reinterpret_cast<void**>(&d.cuGraphLaunch)},
        {"cuMemcpyHtoDAsync_v2", reinterpret_cast<void**>(&d.cuMemcpyHtoDAsync)},
        {"cuMemcpyDtoHAsync_v2", reinterpret_cast<void**>(&d.cuMemcpyDtoHAsync)},
        {"cuStreamSynchronize", reinterpret_cast<void**>(&d.cuStreamSynchronize)},
        {"cuGetErrorName", reinterpret_cast<void**>(&d.cuGetErrorName)},
    };
    for (const auto& e : entries) {
      *e.slot = ::dlsym(lib, e.name);
      if (*e.slot == nullptr) {
        d.error = std::string("the CUDA driver lacks ") + e.name + " (driver too old)";
        return d;
      }
    }
    return d;
  }();
  return loaded;
}

template <typename T>
T handle(uint64_t value) {
  return reinterpret_cast<T>(static_cast<uintptr_t>(value));
}

int32_t cuda_failed(const Driver& d, CUresult r, const char* what) {
  const char* name = nullptr;
  d.cuGetErrorName(r, &name);
  return fail(Error::Internal,
              "TensorRTBackend execute (native CUDA-graph plan): %s failed (%s, CUresult %d)",
              what, name != nullptr ? name : "unknown", r);
}

/* The appended fields (stateful partitions) are there. */
bool has_states(const etrt_cuda_graph_plan& g) {
  return g.struct_size >= offsetof(etrt_cuda_graph_plan, state_epoch_at_plan) + sizeof(uint64_t);
}

/* Each staging copy names a distinct argument and a buffer. */
bool staged_fits(const std::vector<etrt_staged_copy>& copies, uint64_t num_args,
                 std::vector<bool>& seen) {
  for (const etrt_staged_copy& c : copies) {
    if (c.arg_index >= num_args || seen[c.arg_index] || c.device == 0) {
      return false;
    }
    seen[c.arg_index] = true;
  }
  return true;
}

} // namespace

bool CudaGraphPlan::adopt(const etrt_native_plan* plan, uint64_t num_args) {
  clear();
  if (plan == nullptr || plan->struct_size < kPlanSize || plan->kind != ETRT_PLAN_CUDA_GRAPH ||
      plan->num_args != num_args || num_args == 0 || plan->signature == nullptr) {
    return false;
  }
  const etrt_cuda_graph_plan* g = plan->cuda_graph;
  if (g == nullptr || g->struct_size < offsetof(etrt_cuda_graph_plan, states) || g->context == 0 ||
      g->graph_exec == 0 || g->stream == 0 || g->ready_event == 0 || g->done_event == 0 ||
      (g->num_staged_inputs > 0 && g->staged_inputs == nullptr) ||
      (g->num_staged_outputs > 0 && g->staged_outputs == nullptr) ||
      g->num_staged_inputs > num_args || g->num_staged_outputs > num_args) {
    return false;
  }
  if (!signature_.adopt(plan->signature, nullptr, num_args, PlanSignature::Match::kExact)) {
    return false;
  }
  try {
    in_.assign(g->staged_inputs, g->staged_inputs + g->num_staged_inputs);
    out_.assign(g->staged_outputs, g->staged_outputs + g->num_staged_outputs);
    // Each argument is either staged once (host memory, its bytes inside the
    // argument) or CUDA memory on the plan's device, which the graph reads
    // or writes at the signature's address.
    std::vector<bool> staged(num_args, false);
    if (!staged_fits(in_, num_args, staged) || !staged_fits(out_, num_args, staged)) {
      clear();
      return false;
    }
    for (const auto* list : {&in_, &out_}) {
      for (const etrt_staged_copy& c : *list) {
        const PlanSignature::Arg& a = signature_.arg(c.arg_index);
        if (a.device_type != ETRT_DEVICE_CPU || c.nbytes > a.nbytes ||
            (c.nbytes > 0 && a.data == nullptr)) {
          clear();
          return false;
        }
      }
    }
    for (uint64_t i = 0; i < num_args; ++i) {
      if (!staged[i] && (signature_.arg(i).device_type != ETRT_DEVICE_CUDA ||
                         signature_.arg(i).device_index != g->device_index)) {
        clear();
        return false;
      }
    }
    if (!adopt_state(*plan, *g, num_args)) {
      clear();
      return false;
    }
  } catch (const std::bad_alloc&) {
    clear();
    return false;
  }
  plan_ = plan;
  graph_ = g;
  return true;
}

/* A stateful partition's part: each position check reads a staged host
 * input (the int64 positions the graph's staging copy also takes), and each
 * named state buffer is there. */
bool CudaGraphPlan::adopt_state(const etrt_native_plan& plan, const etrt_cuda_graph_plan& g,
                                uint64_t num_args) {
  for (uint64_t c = 0; c < plan.num_position_checks; ++c) {
    if (plan.position_checks == nullptr) {
      return false;
    }
    bool staged_input = false;
    for (const etrt_staged_copy& in : in_) {
      staged_input = staged_input || in.arg_index == plan.position_checks[c].arg_index;
    }
    if (!staged_input) {
      return false;
    }
  }
  if (!positions_.adopt(plan.position_checks, plan.num_position_checks, signature_, num_args,
                        false, false)) {
    return false;
  }
  if (!has_states(g)) {
    return true;
  }
  if (g.num_states > 0 && g.states == nullptr) {
    return false;
  }
  for (uint64_t k = 0; k < g.num_states; ++k) {
    if (g.states[k].device == 0) {
      return false;
    }
  }
  state_epoch_ = g.state_epoch;
  state_epoch_at_plan_ = g.state_epoch_at_plan;
  return true;
}

void CudaGraphPlan::clear() {
  plan_ = nullptr;
  graph_ = nullptr;
  signature_.clear();
  in_.clear();
  out_.clear();
  positions_.clear();
  state_epoch_ = nullptr;
  state_epoch_at_plan_ = 0;
}

bool CudaGraphPlan::matches(const etrt_arg* args, uint64_t num_args) const {
  if (plan_ == nullptr || plan_->withdrawn != 0 ||
      (graph_->epoch != nullptr && *graph_->epoch != graph_->epoch_at_plan) ||
      (state_epoch_ != nullptr && *state_epoch_ != state_epoch_at_plan_)) {
    return false;
  }
  return signature_.matches(args, num_args);
}

int32_t CudaGraphPlan::run(const etrt_arg* args) const {
  // The cache positions, before anything is copied or launched (the executor's words).
  if (const int32_t refused = positions_.check(args); refused != 0) {
    return refused;
  }
  const Driver& d = driver();
  if (!d.error.empty()) {
    return fail(Error::NotSupported,
                "TensorRTBackend execute (native CUDA-graph plan): %s; the executor ran this "
                "call on a GPU, so the driver it used should load here",
                d.error.c_str());
  }
  const etrt_cuda_graph_plan& g = *graph_;
  CUcontext current = nullptr;
  CUresult r = d.cuCtxGetCurrent(&current);
  if (r == 0 && current != handle<CUcontext>(g.context)) {
    r = d.cuCtxSetCurrent(handle<CUcontext>(g.context)); // ExecuTorch may call from any thread
  }
  if (r != 0) {
    return cuda_failed(d, r, "making the engine's CUDA context current");
  }
  const auto stream = handle<CUstream>(g.stream);
  const auto caller = handle<CUstream>(g.caller_stream);
  // The engine runs after the work the caller queued before this call.
  if ((r = d.cuEventRecord(handle<CUevent>(g.ready_event), caller)) != 0 ||
      (r = d.cuStreamWaitEvent(stream, handle<CUevent>(g.ready_event), 0)) != 0) {
    return cuda_failed(d, r, "ordering the engine after the caller's stream");
  }
  for (const etrt_staged_copy& c : in_) {
    if (c.nbytes > 0 &&
        (r = d.cuMemcpyHtoDAsync(c.device, args[c.arg_index].data, c.nbytes, stream)) != 0) {
      return cuda_failed(d, r, "copying a host input to CUDA memory");
    }
  }
  if ((r = d.cuGraphLaunch(handle<CUgraphExec>(g.graph_exec), stream)) != 0) {
    return cuda_failed(d, r, "cuGraphLaunch of the captured TensorRT enqueue");
  }
  if (g.launches != nullptr) {
    *g.launches += 1;
  }
  if (in_.empty() && out_.empty()) {
    // Device-resident: later work on the caller's stream runs after the engine;
    // the host is not synchronized (docs/gpu-runtime.md).
    if ((r = d.cuEventRecord(handle<CUevent>(g.done_event), stream)) != 0 ||
        (r = d.cuStreamWaitEvent(caller, handle<CUevent>(g.done_event), 0)) != 0) {
      return cuda_failed(d, r, "ordering the caller's stream after the engine");
    }
    return 0;
  }
  for (const etrt_staged_copy& c : out_) {
    if (c.nbytes > 0 &&
        (r = d.cuMemcpyDtoHAsync(args[c.arg_index].data, c.device, c.nbytes, stream)) != 0) {
      return cuda_failed(d, r, "copying an output back to host memory");
    }
  }
  if ((r = d.cuStreamSynchronize(stream)) != 0) {
    return cuda_failed(d, r, "waiting for the engine");
  }
  return 0;
}

} // namespace etrt

extern "C" int32_t etrt_cuda_graph_plan_matches(const etrt_native_plan* plan,
                                                const etrt_arg* args, uint64_t num_args) {
  etrt::CudaGraphPlan adopted;
  if (!adopted.adopt(plan, num_args)) {
    etrt::fail(executorch::runtime::Error::InvalidArgument,
               "the CUDA-graph plan is refused (another kind, another argument count, a NULL "
               "handle, a staging copy that does not fit its argument, or a position check "
               "on anything but a staged int64 host input)");
    return -1;
  }
  return adopted.matches(args, num_args) ? 1 : 0;
}

/* Adopts `plan` once and runs it `times` times on `args` (each run checked
 * with matches() first, as the adapter does): the adapter's per-call work
 * without ExecuTorch around it, for the GPU tests and tools/bench/gpu.py.
 * Returns the runs made (fewer when the arguments stop matching), or -1 with
 * the cause in etrt_last_error (a refused plan, a failed run). */
extern "C" int64_t etrt_cuda_graph_plan_replay(const etrt_native_plan* plan, const etrt_arg* args,
                                               uint64_t num_args, uint64_t times) {
  etrt::CudaGraphPlan adopted;
  if (etrt_cuda_graph_plan_matches(plan, args, num_args) < 0 || !adopted.adopt(plan, num_args)) {
    return -1;
  }
  uint64_t ran = 0;
  for (; ran < times && adopted.matches(args, num_args); ++ran) {
    if (adopted.run(args) != 0) {
      return -1;
    }
  }
  return static_cast<int64_t>(ran);
}
