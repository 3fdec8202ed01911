/*
 * The TensorRTBackend: ExecuTorch's BackendInterface, forwarded to the
 * executor table (executor_table.h). It knows nothing about TensorRT: it
 * checks the blob's header, translates ExecuTorch's arguments into the
 * table's plain C structs and reports failures (etrt_last_error, and one
 * line on stderr, because ExecuTorch itself reports only a code).
 */
#include "tensorrt_backend.h"

#include <executorch_tensorrt/executor_table.h>

#include "blob_header.h"
#include "embedded/embedded_start.h"
#include "last_error.h"
#include "named_data/named_data.h"
#include "plans/cuda_graph_plan.h"
#include "plans/native_plan.h"
#include "profiling.h" // profiling: ETDump delegate events

#include <executorch/runtime/core/exec_aten/util/tensor_util.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

namespace etrt {
namespace {

namespace et = ::executorch::runtime;
using et::ArrayRef;
using et::BackendExecutionContext;
using et::BackendInitContext;
using et::CompileSpec;
using et::DelegateHandle;
using et::Error;
using et::EValue;
using et::FreeableBuffer;
using et::Result;
using et::Span;
using TensorImpl = et::etensor::TensorImpl;
using DeviceType = et::etensor::DeviceType;

/* etrt_arg exposes sizes and dim_order as live views into the TensorImpl, so
 * the element types must be exactly what the header promises. */
static_assert(std::is_same<TensorImpl::SizesType, int32_t>::value,
              "etrt_arg.sizes is int32_t*: ExecuTorch's SizesType changed");
static_assert(std::is_same<TensorImpl::DimOrderType, uint8_t>::value,
              "etrt_arg.dim_order is uint8_t*: ExecuTorch's DimOrderType changed");

struct DelegateState {
  const etrt_executor_table* table; // the table whose executors own `handle`
  uint64_t handle;
  uint32_t num_inputs;
  uint32_t num_outputs;
  etrt_arg* args; // num_inputs + num_outputs, reused by every execute
  // Concurrent-call guard (docs/concurrency.md): calls that entered this
  // handle, and how many are inside it now.
  std::atomic<uint64_t> entered{0};
  std::atomic<uint32_t> in_flight{0};
  // The executor's plan for the arguments of its last successful call
  // (native_plan.h); used only inside the guard above.
  NativePlan plan;
  CudaGraphPlan graph_plan; // the TensorRT executor's (cuda_graph_plan.h); one of the two
  // Named-data buffers the executor asked for during init: its views of them
  // stay valid until destroy (freed after the executor's destroy).
  std::unique_ptr<NamedData> named_data;
};

/* A method's planned memory and `args` above are shared by all its calls: two
 * calls into one loaded method at once overwrite each other's inputs,
 * intermediates and outputs. ExecuTorch's Python binding keeps a second thread
 * out with the GIL, but a Python executor can lose the GIL between bytecodes,
 * so an overlap is detected here and both calls fail instead of one returning
 * the other's data. */
constexpr const char* kConcurrentCall =
    "another call entered this loaded method while this one ran its TensorRT partition; "
    "a method's planned memory (inputs, intermediates, outputs) is shared by its calls, "
    "so this call's result is not its own and was failed. ExecuTorch methods are not "
    "reentrant: make one call on each loaded method before starting threads (later calls "
    "with the same arguments run without Python), or give each thread its own Program "
    "(Runtime.load_program per thread; Program.load_method returns the same cached "
    "Method), or hold a lock around execute (docs/concurrency.md)";

/* The line the docs promise on stderr for a failed call. */
void print_failure(const char* what) {
  std::fprintf(stderr, "[executorch_tensorrt] TensorRTBackend %s failed: %s\n", what,
               last_error().c_str());
  std::fflush(stderr);
}

/* An executor returned `code`: keep the cause it recorded, or say it gave none. */
Failure executor_failed(const char* fn, int32_t code) {
  if (has_last_error()) {
    return Failure{static_cast<Error>(code)};
  }
  return fail(static_cast<Error>(code),
              "the executor's %s returned error 0x%" PRIx32
              " without recording a cause (etrt_set_last_error)",
              fn, static_cast<uint32_t>(code));
}

/* Fills one etrt_arg from an EValue. No allocation: tensor shapes are views. */
void fill_arg(etrt_arg& a, const EValue& value, bool is_input) {
  a.is_input = is_input ? 1 : 0;
  a.dtype = -1;
  a.data = nullptr;
  a.nbytes = 0;
  a.ndim = 0;
  a.device_type = ETRT_DEVICE_CPU;
  a.device_index = 0;
  a.sizes = nullptr;
  a.dim_order = nullptr;
  a.int_value = 0;
  a.double_value = 0.0;
  a.tensor = nullptr;
  if (value.isTensor()) {
    const auto& t = value.toTensor();
    TensorImpl* impl = t.unsafeGetTensorImpl();
    a.kind = ETRT_ARG_TENSOR;
    a.dtype = static_cast<int32_t>(t.scalar_type());
    a.data = impl->mutable_data();
    a.nbytes = static_cast<uint64_t>(impl->nbytes());
    a.ndim = static_cast<int32_t>(impl->dim());
    a.sizes = impl->sizes().data();
    a.dim_order = impl->dim_order().data();
    // ExecuTorch 1.5 tags each tensor with where its memory lives (memory
    // planning may place it on a CUDA device); pass that on unchanged.
    a.device_type =
        impl->device_type() == DeviceType::CUDA ? ETRT_DEVICE_CUDA : ETRT_DEVICE_CPU;
    a.device_index = static_cast<int32_t>(impl->device_index());
    a.tensor = impl;
  } else if (value.isInt()) {
    a.kind = ETRT_ARG_INT;
    a.int_value = value.toInt();
  } else if (value.isDouble()) {
    a.kind = ETRT_ARG_DOUBLE;
    a.double_value = value.toDouble();
  } else if (value.isBool()) {
    a.kind = ETRT_ARG_BOOL;
    a.int_value = value.toBool() ? 1 : 0;
  } else {
    a.kind = ETRT_ARG_NONE;
  }
}

class TensorRTBackend final : public et::BackendInterface {
 public:
  bool is_available() const override {
    clear_last_error();
    const etrt_executor_table* table = current_executors();
    if (table == nullptr) {
      // ExecuTorch only says "Backend ... is not available" when this returns
      // false, so say why once per process (and keep it as the last error).
      static std::atomic<bool> told{false};
      set_last_error(no_executor_message());
      if (!told.exchange(true)) {
        std::fprintf(stderr, "[executorch_tensorrt] TensorRTBackend is not available: %s\n",
                     last_error().c_str());
      }
      return false;
    }
    return table->is_available() == 1; // an executor may record why not
  }

  Result<DelegateHandle*> init(BackendInitContext& context, FreeableBuffer* processed,
                               ArrayRef<CompileSpec> compile_specs) const override {
    clear_last_error();
    Result<DelegateHandle*> result = init_impl(context, processed, compile_specs);
    // The executors copy what they keep; the program's copy is not needed.
    if (processed != nullptr) {
      processed->Free();
    }
    if (result.ok()) {
      clear_last_error();
    } else {
      print_failure("init");
    }
    return result;
  }

  Error execute(BackendExecutionContext& context, DelegateHandle* handle,
                Span<EValue*> args) const override {
    clear_last_error();
    ProfilingScope profiling(context.event_tracer()); // profiling: etrt_log_event's tracer
    // A traced call goes through the executor, which records its stages.
    const bool traced = context.event_tracer() != nullptr;
    const Error err = execute_impl(static_cast<DelegateState*>(handle), args, traced);
    if (err == Error::Ok) {
      clear_last_error();
    } else {
      print_failure("execute");
    }
    return err;
  }

  void destroy(DelegateHandle* handle) const override {
    auto* state = static_cast<DelegateState*>(handle);
    if (state == nullptr) {
      return;
    }
    state->plan.clear(); // the executor frees the plan's memory in destroy
    state->graph_plan.clear();
    state->table->destroy(state->handle);
    delete[] state->args;
    delete state;
  }

 private:
  static Error execute_impl(DelegateState* state, Span<EValue*> args, bool traced) {
    if (state == nullptr) {
      return fail(Error::DelegateInvalidHandle, "called with a null delegate handle");
    }
    const uint64_t expected = uint64_t{state->num_inputs} + uint64_t{state->num_outputs};
    if (args.size() != expected) {
      return fail(Error::InvalidArgument,
                  "ExecuTorch passed %zu arguments but the partition has %" PRIu32
                  " inputs and %" PRIu32
                  " outputs; the program does not match its TensorRT blob (re-export it)",
                  args.size(), state->num_inputs, state->num_outputs);
    }
    const uint64_t ticket = state->entered.fetch_add(1) + 1;
    if (state->in_flight.fetch_add(1) != 0) {
      state->in_flight.fetch_sub(1);
      return fail(Error::InvalidState, "%s", kConcurrentCall);
    }
    for (size_t i = 0; i < args.size(); ++i) {
      fill_arg(state->args[i], *args[i], i < state->num_inputs);
    }
    int32_t code = 0;
    if (!traced && state->plan.matches(state->args, expected)) {
      code = state->plan.run(state->args); // the steady state: no executor (no Python) at all
    } else if (!traced && state->graph_plan.matches(state->args, expected)) {
      code = state->graph_plan.run(state->args); // the GPU's steady state, likewise
    } else {
      code = call_executor(state, expected);
    }
    const bool overlapped = state->entered.load() != ticket;
    state->in_flight.fetch_sub(1);
    if (overlapped) {
      return fail(Error::InvalidState, "%s", kConcurrentCall);
    }
    return code == 0 ? Error::Ok : Error(executor_failed("execute", code));
  }

  /* The executor checks and binds this call, then may hand back a plan for
   * the next identical one. Its previous plan is forgotten first: the
   * executor may free it during execute (executor_table.h, "Lifetime"). */
  static int32_t call_executor(DelegateState* state, uint64_t num_args) {
    state->plan.clear();
    state->graph_plan.clear();
    const int32_t code = state->table->execute(state->handle, state->args, num_args);
    if (!has_native_plan(state->table)) {
      return code;
    }
    const etrt_native_plan* plan = nullptr;
    if (code != 0) {
      // A refused call leaves a plan made at init valid (executor_table.h):
      // take it back, so that the next call, from any thread, still runs
      // without the executor. The refusal's cause stays the call's error.
      const std::string cause = last_error();
      if (state->table->native_plan(state->handle, &plan) == 0 && plan != nullptr &&
          state->plan.adopt(plan, num_args) && !state->plan.any_address()) {
        state->plan.clear();
      }
      if (cause.empty()) {
        clear_last_error();
      } else {
        set_last_error(cause);
      }
      return code;
    }
    if (state->table->native_plan(state->handle, &plan) == 0 && plan != nullptr) {
      // an unusable plan leaves none
      if (!state->plan.adopt(plan, num_args)) {
        state->graph_plan.adopt(plan, num_args);
      }
    }
    clear_last_error(); // the call succeeded, whatever native_plan recorded
    return 0;
  }

  static bool has_native_plan(const etrt_executor_table* table) {
    return table->native_plan != nullptr;
  }

  static Result<DelegateHandle*> init_impl(BackendInitContext& context,
                                           FreeableBuffer* processed,
                                           ArrayRef<CompileSpec> compile_specs) {
    const etrt_executor_table* table = current_executors();
    if (table == nullptr) {
      return fail(Error::NotSupported, "%s", no_executor_message().c_str());
    }
    if (processed == nullptr || processed->data() == nullptr) {
      return fail(Error::InvalidProgram, "the program gave no TensorRT blob (processed is empty)");
    }
    char reason[256];
    if (!parse_blob_header(processed->data(), processed->size(), nullptr, reason,
                           sizeof(reason))) {
      return fail(Error::InvalidProgram,
                  "invalid TensorRT blob: %s (the program is corrupt or was not written by "
                  "executorch_tensorrt; re-export it)",
                  reason);
    }

    // The runtime spec "fallback" is a load-time backend option; absent is
    // normal, present with another type is the caller's mistake.
    const char* fallback = nullptr;
    Result<const char*> fb = context.get_runtime_spec<const char*>("fallback");
    if (fb.ok()) {
      fallback = fb.get();
    } else if (fb.error() != Error::NotFound) {
      return fail(Error::InvalidArgument,
                  "the load-time backend option \"fallback\" must be a string "
                  "(e.g. \"onnxruntime\")");
    }

    // The load-time backend option "device" picks the GPU (docs/gpu-runtime.md):
    // a string ("1", "cuda:1") or an int, passed on as text.
    const char* device = nullptr;
    char device_text[16] = {0};
    Result<const char*> dev = context.get_runtime_spec<const char*>("device");
    if (dev.ok()) {
      device = dev.get();
    } else if (dev.error() != Error::NotFound) {
      Result<int> dev_int = context.get_runtime_spec<int>("device");
      if (!dev_int.ok()) {
        return fail(Error::InvalidArgument,
                    "the load-time backend option \"device\" must be a CUDA device index "
                    "(an int, or a string such as \"cuda:1\")");
      }
      std::snprintf(device_text, sizeof(device_text), "%d", dev_int.get());
      device = device_text;
    }

    // init is not on the hot path; a heap array keeps any number of specs.
    etrt_compile_spec* specs = nullptr;
    if (compile_specs.size() > 0) {
      specs = new (std::nothrow) etrt_compile_spec[compile_specs.size()];
      if (specs == nullptr) {
        return fail(Error::MemoryAllocationFailed, "out of memory copying compile specs");
      }
      for (size_t i = 0; i < compile_specs.size(); ++i) {
        specs[i] = {compile_specs[i].key, compile_specs[i].value.buffer,
                    compile_specs[i].value.nbytes};
      }
    }
    etrt_init_args args{};
    args.struct_size = sizeof(etrt_init_args);
    args.blob = processed->data();
    args.blob_size = processed->size();
    args.compile_specs = specs;
    args.num_compile_specs = compile_specs.size();
    args.method_name = context.get_method_name();
    args.fallback = fallback;
    std::unique_ptr<NamedData> named_data(new (std::nothrow)
                                              NamedData(context.get_named_data_map()));
    if (named_data == nullptr) {
      delete[] specs;
      return fail(Error::MemoryAllocationFailed, "out of memory for the named-data holder");
    }
    args.named_data_ctx = named_data.get();
    args.get_named_data = &NamedData::lookup;
    args.device = device;

    uint64_t handle = 0;
    uint32_t num_inputs = 0;
    uint32_t num_outputs = 0;
    const int32_t code = table->init(&args, &handle, &num_inputs, &num_outputs);
    delete[] specs;
    named_data->end_init(); // the map belongs to the Method's init
    if (code != 0) {
      return executor_failed("init", code);
    }

    const uint64_t num_args = uint64_t{num_inputs} + uint64_t{num_outputs};
    etrt_arg* arg_array = num_args > 0 ? new (std::nothrow) etrt_arg[num_args] : nullptr;
    auto* state = (num_args > 0 && arg_array == nullptr)
                      ? nullptr
                      : new (std::nothrow)
                            DelegateState{table, handle, num_inputs, num_outputs, arg_array};
    if (state == nullptr) {
      delete[] arg_array;
      table->destroy(handle);
      return fail(Error::MemoryAllocationFailed, "out of memory allocating the delegate handle");
    }
    state->named_data = std::move(named_data);
    for (uint64_t i = 0; i < num_args; ++i) {
      std::memset(&arg_array[i], 0, sizeof(etrt_arg));
      arg_array[i].struct_size = sizeof(etrt_arg);
    }
    // A plan for any address lets the first call run without the executor
    // (no Python, so no other thread can enter the method mid-call).
    const etrt_native_plan* plan = nullptr;
    if (has_native_plan(table) && table->native_plan(handle, &plan) == 0 && plan != nullptr &&
        !state->plan.adopt(plan, num_args)) {
      state->graph_plan.adopt(plan, num_args);
    }
    clear_last_error();
    return state;
  }
};

} // namespace

executorch::runtime::BackendInterface* tensorrt_backend() {
  static TensorRTBackend backend;
  return &backend;
}

} // namespace etrt
