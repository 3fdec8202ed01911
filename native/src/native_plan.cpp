/*
 * A delegate's native plan: the call an executor already checked and bound,
 * replayed by the adapter without entering the executor (no Python), for as
 * long as the arguments are exactly the ones it was bound for. This is what
 * keeps a steady-state call free of Python bytecode, so no other Python
 * thread can be switched in mid-call (docs/concurrency.md), and what makes
 * the per-call cost a few hundred nanoseconds plus the engine's run.
 */
#include "native_plan.h"

#include "last_error.h"

#include <cstring>
#include <new>

namespace etrt {

using executorch::runtime::Error;

bool NativePlan::adopt(const etrt_native_plan* plan, uint64_t num_args) {
  clear();
  if (plan == nullptr || plan->struct_size < sizeof(etrt_native_plan) ||
      plan->kind != ETRT_PLAN_ORT_RUN || plan->num_args != num_args ||
      (num_args > 0 && plan->signature == nullptr) || plan->ort_run == nullptr ||
      plan->ort_release_status == nullptr || plan->ort_error_message == nullptr ||
      plan->session == nullptr || plan->num_inputs + plan->num_outputs != num_args ||
      (plan->num_inputs > 0 && (plan->input_names == nullptr || plan->inputs == nullptr)) ||
      (plan->num_outputs > 0 && (plan->output_names == nullptr || plan->outputs == nullptr))) {
    return false; // not one this adapter can run: every call goes to the executor
  }
  try {
    args_.reserve(num_args);
    for (uint64_t i = 0; i < num_args; ++i) {
      const etrt_arg_signature& s = plan->signature[i];
      // Tensors only: a scalar's value is not part of the signature.
      if (s.struct_size < sizeof(etrt_arg_signature) || s.kind != ETRT_ARG_TENSOR || s.ndim < 0 ||
          (s.ndim > 0 && (s.sizes == nullptr || s.dim_order == nullptr))) {
        clear();
        return false;
      }
      args_.push_back(Arg{s.kind, s.dtype, s.ndim, s.device_type, s.device_index, s.data,
                          s.nbytes, sizes_.size()});
      sizes_.insert(sizes_.end(), s.sizes, s.sizes + s.ndim);
      dim_order_.insert(dim_order_.end(), s.dim_order, s.dim_order + s.ndim);
    }
  } catch (const std::bad_alloc&) {
    clear();
    return false;
  }
  plan_ = plan;
  return true;
}

void NativePlan::clear() {
  plan_ = nullptr;
  args_.clear();
  sizes_.clear();
  dim_order_.clear();
}

bool NativePlan::matches(const etrt_arg* args, uint64_t num_args) const {
  if (plan_ == nullptr || plan_->withdrawn != 0 || num_args != args_.size()) {
    return false;
  }
  for (uint64_t i = 0; i < num_args; ++i) {
    const etrt_arg& a = args[i];
    const Arg& s = args_[i];
    if (a.kind != s.kind || a.dtype != s.dtype || a.ndim != s.ndim || a.data != s.data ||
        a.nbytes != s.nbytes || a.device_type != s.device_type ||
        a.device_index != s.device_index) {
      return false;
    }
    if (s.ndim > 0 &&
        (a.sizes == nullptr || a.dim_order == nullptr ||
         std::memcmp(a.sizes, &sizes_[s.shape_at], sizeof(int32_t) * s.ndim) != 0 ||
         std::memcmp(a.dim_order, &dim_order_[s.shape_at], s.ndim) != 0)) {
      return false;
    }
  }
  return true;
}

int32_t NativePlan::run() const {
  const etrt_native_plan& p = *plan_;
  void* status = p.ort_run(p.session, p.run_options, p.input_names, p.inputs,
                           static_cast<size_t>(p.num_inputs), p.output_names,
                           static_cast<size_t>(p.num_outputs), p.outputs);
  if (status == nullptr) {
    return 0;
  }
  const char* message = p.ort_error_message(status);
  // The message lives in the status: format it before releasing.
  const Failure failed = fail(Error::Internal,
                              "onnxruntime Run failed (native plan of the onnxruntime "
                              "fallback): %s",
                              message != nullptr ? message : "(no message)");
  p.ort_release_status(status);
  return failed;
}

} // namespace etrt
