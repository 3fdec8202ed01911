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

#include <cstddef>
#include <cstring>
#include <new>
#include <string>

namespace etrt {

using executorch::runtime::Error;

namespace {

// The plan's fields before the appended ones (issue 13): the smallest plan accepted.
constexpr size_t kBasePlanSize = offsetof(etrt_native_plan, num_state_values);
constexpr int32_t kScalarTypeLong = 4; // ExecuTorch ScalarType::Long (int64)
constexpr size_t kMaxOutputRank = 16;  // ExecuTorch's kTensorDimensionLimit

bool has_appended(const etrt_native_plan& plan) {
  // Up to issue 13's last field: a writer from before cuda_graph was appended has them all.
  return plan.struct_size >= offsetof(etrt_native_plan, cuda_graph);
}

bool has_any_address(const etrt_native_plan& plan) {
  return plan.struct_size >= sizeof(etrt_native_plan) && plan.any_address != 0;
}

uint64_t empty_buffer = 0; // onnxruntime refuses a NULL buffer even for an empty tensor

/* Python's repr of the first (up to) 8 positions, as the executor quotes them. */
std::string first_positions(const int64_t* positions, int64_t count) {
  std::string text = "[";
  for (int64_t i = 0; i < count && i < 8; ++i) {
    text += (i ? ", " : "") + std::to_string(positions[i]);
  }
  return text + "]";
}

} // namespace

bool NativePlan::adopt(const etrt_native_plan* plan, uint64_t num_args) {
  clear();
  if (plan == nullptr || plan->struct_size < kBasePlanSize || plan->kind != ETRT_PLAN_ORT_RUN ||
      plan->num_args != num_args || (num_args > 0 && plan->signature == nullptr) ||
      plan->ort_run == nullptr || plan->ort_release_status == nullptr ||
      plan->ort_error_message == nullptr || plan->session == nullptr ||
      (plan->num_inputs > 0 && (plan->input_names == nullptr || plan->inputs == nullptr)) ||
      (plan->num_outputs > 0 && (plan->output_names == nullptr || plan->outputs == nullptr))) {
    return false; // not one this adapter can run: every call goes to the executor
  }
  const uint64_t num_state = has_appended(*plan) ? plan->num_state_values : 0;
  if (num_state > plan->num_inputs || num_state > plan->num_outputs ||
      plan->num_inputs - num_state + plan->num_outputs - num_state != num_args) {
    return false;
  }
  num_user_inputs_ = plan->num_inputs - num_state;
  any_address_ = has_any_address(*plan);
  if (any_address_ && (plan->ort_create_tensor == nullptr || plan->ort_memory_info == nullptr ||
                       plan->element_types == nullptr || plan->ort_release_value == nullptr)) {
    any_address_ = false;
    return false;
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
    if (!adopt_appended(*plan) ||
        !index_checks_.adopt(*plan, num_user_inputs_, any_address_)) {
      clear();
      return false;
    }
    if (any_address_) {
      in_values_.assign(plan->inputs, plan->inputs + plan->num_inputs);
      out_values_.assign(plan->outputs, plan->outputs + plan->num_outputs);
      if (plan->alt_inputs != nullptr) {
        alt_in_values_.assign(plan->alt_inputs, plan->alt_inputs + plan->num_inputs);
        alt_out_values_.assign(plan->alt_outputs, plan->alt_outputs + plan->num_outputs);
      }
      bound_data_.assign(num_args, nullptr);
      owned_.assign(num_args, nullptr);
    }
  } catch (const std::bad_alloc&) {
    clear();
    return false;
  }
  plan_ = plan;
  return true;
}

/* The position checks and the outputs onnxruntime allocates; false if the
 * adapter could not perform one safely (the plan is then refused). */
bool NativePlan::adopt_appended(const etrt_native_plan& plan) {
  const uint64_t num_user_outputs = args_.size() - num_user_inputs_;
  for (uint64_t j = 0; j < num_user_outputs && !any_address_; ++j) {
    if (plan.outputs[j] == nullptr) {
      copy_out_.push_back(j);
    }
  }
  if (!has_appended(plan)) {
    return copy_out_.empty(); // NULL outputs need the appended functions
  }
  if (plan.alt_inputs != nullptr || plan.alt_outputs != nullptr) {
    if (plan.alt_inputs == nullptr || plan.alt_outputs == nullptr || plan.swaps == nullptr) {
      return false;
    }
    for (uint64_t j = 0; j < num_user_outputs && !any_address_; ++j) {
      if ((plan.alt_outputs[j] == nullptr) != (plan.outputs[j] == nullptr)) {
        return false; // the same outputs are copied out whichever pair runs
      }
    }
  }
  if (!copy_out_.empty() &&
      (plan.ort_get_tensor_type_and_shape == nullptr || plan.ort_get_dimensions_count == nullptr ||
       plan.ort_get_dimensions == nullptr || plan.ort_release_tensor_type_and_shape_info == nullptr ||
       plan.ort_get_tensor_mutable_data == nullptr || plan.ort_release_value == nullptr)) {
    return false;
  }
  if (plan.num_position_checks > 0 && plan.position_checks == nullptr) {
    return false;
  }
  for (uint64_t c = 0; c < plan.num_position_checks; ++c) {
    const etrt_position_check& check = plan.position_checks[c];
    if (check.struct_size < sizeof(etrt_position_check) || check.arg_index >= num_user_inputs_ ||
        check.capacity < 0 || check.what == nullptr) {
      return false;
    }
    // The positions are read before every run: int64 host memory whose size
    // the signature pins (a call with another shape or address never runs here).
    const Arg& a = args_[check.arg_index];
    const int64_t count = a.ndim > 0 ? sizes_[a.shape_at] : 1;
    if (a.dtype != kScalarTypeLong || a.device_type != ETRT_DEVICE_CPU || count < 0 ||
        (count > 0 && a.data == nullptr && !any_address_) ||
        static_cast<uint64_t>(count) > a.nbytes / sizeof(int64_t)) {
      return false;
    }
    checks_.push_back(PositionCheck{check.arg_index, count, check.capacity, check.in_place != 0,
                                    check.what});
  }
  return true;
}

void NativePlan::clear() {
  if (plan_ != nullptr) { // the plan (and its ReleaseValue) is still valid here
    for (void* value : owned_) {
      if (value != nullptr) {
        plan_->ort_release_value(value);
      }
    }
  }
  owned_.clear();
  bound_data_.clear();
  in_values_.clear();
  out_values_.clear();
  alt_in_values_.clear();
  alt_out_values_.clear();
  any_address_ = false;
  plan_ = nullptr;
  num_user_inputs_ = 0;
  checks_.clear();
  index_checks_.clear();
  copy_out_.clear();
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
    if (any_address_ ? (a.nbytes > 0 && a.data == nullptr) : a.data != s.data) {
      return false;
    }
    if (a.kind != s.kind || a.dtype != s.dtype || a.ndim != s.ndim ||
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

/* An any_address plan: OrtValues over the memory of each argument whose
 * address changed (the signature fixed everything else). */
int32_t NativePlan::bind(const etrt_arg* args) {
  const etrt_native_plan& p = *plan_;
  int64_t shape[kMaxOutputRank];
  for (uint64_t k = 0; k < args_.size(); ++k) {
    const etrt_arg& a = args[k];
    if (owned_[k] != nullptr && bound_data_[k] == a.data) {
      continue;
    }
    const Arg& s = args_[k];
    if (s.ndim > static_cast<int32_t>(kMaxOutputRank)) {
      return fail(Error::InvalidArgument, "argument %llu has rank %d (native plan: at most %zu)",
                  static_cast<unsigned long long>(k), s.ndim, kMaxOutputRank);
    }
    for (int32_t d = 0; d < s.ndim; ++d) {
      shape[d] = sizes_[s.shape_at + d];
    }
    void* value = nullptr;
    void* status = p.ort_create_tensor(p.ort_memory_info, a.data ? a.data : &empty_buffer,
                                       static_cast<size_t>(a.nbytes), shape,
                                       static_cast<size_t>(s.ndim), p.element_types[k], &value);
    if (status != nullptr || value == nullptr) {
      const char* message = status != nullptr ? p.ort_error_message(status) : nullptr;
      const Failure failed = fail(Error::Internal, "onnxruntime could not wrap argument %llu "
                                  "(native plan): %s", static_cast<unsigned long long>(k),
                                  message != nullptr ? message : "(no value)");
      if (status != nullptr) {
        p.ort_release_status(status);
      }
      return failed;
    }
    if (owned_[k] != nullptr) {
      p.ort_release_value(owned_[k]);
    }
    owned_[k] = value;
    bound_data_[k] = a.data;
    if (k < num_user_inputs_) {
      in_values_[k] = value;
      if (!alt_in_values_.empty()) alt_in_values_[k] = value;
    } else {
      out_values_[k - num_user_inputs_] = value;
      if (!alt_out_values_.empty()) alt_out_values_[k - num_user_inputs_] = value;
    }
  }
  return 0;
}

int32_t NativePlan::run(etrt_arg* args) {
  const etrt_native_plan& p = *plan_;
  if (const int32_t refused = index_checks_.check(args); refused != 0) {
    return refused; // before anything is written
  }
  if (!checks_.empty()) {
    const int32_t refused = check_positions(args); // before anything is written
    if (refused != 0) {
      return refused;
    }
  }
  if (any_address_) {
    const int32_t unbound = bind(args);
    if (unbound != 0) {
      return unbound;
    }
  }
  // Ping-pong states: the pair *swaps selects (executor_table.h).
  const bool alternate = has_appended(p) && p.alt_inputs != nullptr;
  const bool odd = alternate && (*p.swaps & 1u) != 0;
  const void* const* inputs = odd ? p.alt_inputs : p.inputs;
  void** outputs = odd ? p.alt_outputs : p.outputs;
  if (any_address_) {
    inputs = odd ? alt_in_values_.data() : in_values_.data();
    outputs = odd ? alt_out_values_.data() : out_values_.data();
  }
  void* status = p.ort_run(p.session, p.run_options, p.input_names,
                           inputs, static_cast<size_t>(p.num_inputs),
                           p.output_names, static_cast<size_t>(p.num_outputs), outputs);
  if (status == nullptr && alternate) {
    *p.swaps += 1; // the states now live in the buffers just written
  }
  if (status != nullptr) {
    const char* message = p.ort_error_message(status);
    // The message lives in the status: format it before releasing.
    const Failure failed = fail(Error::Internal,
                                "onnxruntime Run failed (native plan of the onnxruntime "
                                "fallback): %s",
                                message != nullptr ? message : "(no message)");
    p.ort_release_status(status);
    for (uint64_t j : copy_out_) { // a failed Run may still have allocated some
      if (outputs[j] != nullptr) {
        p.ort_release_value(outputs[j]);
        outputs[j] = nullptr;
      }
    }
    return failed;
  }
  return copy_out_.empty() ? 0 : copy_out(args, outputs);
}

/* The executor's checks (runtime/state.py check_positions), with its words:
 * the call fails the same way whichever side runs it. */
int32_t NativePlan::check_positions(const etrt_arg* args) const {
  for (const PositionCheck& c : checks_) {
    const auto* positions = static_cast<const int64_t*>(args[c.arg].data);
    const char* what = c.what.c_str();
    if (c.count > c.capacity) {
      return fail(Error::InvalidArgument,
                  "TensorRTBackend execute: a sequence of %lld tokens is longer than the cache: "
                  "%s; split the prompt or export with a larger cache",
                  static_cast<long long>(c.count), what);
    }
    for (int64_t i = 0; i < c.count; ++i) {
      const int64_t position = positions[i];
      if (position < 0 || position >= c.capacity) {
        return fail(Error::InvalidArgument,
                    "TensorRTBackend execute: cache position %lld (index %lld of the positions "
                    "input) is outside the cache: %s, valid positions are 0..%lld; reset the "
                    "state (executorch_tensorrt.reset_state) or shorten the sequence",
                    static_cast<long long>(position), static_cast<long long>(i), what,
                    static_cast<long long>(c.capacity - 1));
      }
      // positions[0] is inside the cache here, so the sum cannot overflow.
      if (c.in_place && position != positions[0] + i) {
        return fail(Error::InvalidArgument,
                    "TensorRTBackend execute: cache positions must be contiguous (the cache is "
                    "updated in place from position %lld), got %s for %s",
                    static_cast<long long>(positions[0]),
                    first_positions(positions, c.count).c_str(), what);
      }
    }
  }
  return 0;
}

/* Outputs of dynamic shape: onnxruntime allocated them; each is resized,
 * copied into ExecuTorch's memory and released (all of them, even after a
 * failure), leaving NULL entries for the next run. */
int32_t NativePlan::copy_out(etrt_arg* args, void** outputs) const {
  const etrt_native_plan& p = *plan_;
  int32_t code = 0;
  for (uint64_t j : copy_out_) {
    void* value = outputs[j];
    outputs[j] = nullptr;
    if (code == 0) {
      code = value != nullptr ? copy_one(value, args[num_user_inputs_ + j], j)
                              : static_cast<int32_t>(fail(
                                    Error::Internal, "onnxruntime Run returned no value for "
                                    "output %llu (native plan)", static_cast<unsigned long long>(j)));
    }
    if (value != nullptr) {
      p.ort_release_value(value);
    }
  }
  return code;
}

int32_t NativePlan::copy_one(void* value, etrt_arg& arg, uint64_t output) const {
  const etrt_native_plan& p = *plan_;
  void* info = nullptr;
  size_t ndim = 0;
  int64_t dims[kMaxOutputRank];
  void* status = p.ort_get_tensor_type_and_shape(value, &info);
  if (status == nullptr) {
    status = p.ort_get_dimensions_count(info, &ndim);
    if (status == nullptr && ndim <= kMaxOutputRank) {
      status = p.ort_get_dimensions(info, dims, ndim);
    }
  }
  if (info != nullptr) {
    p.ort_release_tensor_type_and_shape_info(info);
  }
  if (status != nullptr) {
    const char* message = p.ort_error_message(status);
    const Failure failed = fail(Error::Internal,
                                "reading the shape of output %llu from onnxruntime failed "
                                "(native plan): %s",
                                static_cast<unsigned long long>(output),
                                message != nullptr ? message : "(no message)");
    p.ort_release_status(status);
    return failed;
  }
  if (ndim > kMaxOutputRank) {
    return fail(Error::Internal, "onnxruntime returned output %llu with %zu dimensions; "
                "ExecuTorch tensors hold at most %zu", static_cast<unsigned long long>(output),
                ndim, kMaxOutputRank);
  }
  bool same = static_cast<size_t>(arg.ndim) == ndim;
  for (size_t d = 0; same && d < ndim; ++d) {
    same = arg.sizes[d] == dims[d];
  }
  if (!same && etrt_resize_tensor(&arg, static_cast<int32_t>(ndim), dims) != 0) {
    const std::string cause = last_error();
    return fail(Error::InvalidArgument, "TensorRTBackend execute: cannot resize output %llu to "
                "the shape onnxruntime produced (%s); the program's memory plan holds a smaller "
                "upper bound", static_cast<unsigned long long>(output), cause.c_str());
  }
  // The output's dtype is the model's (checked by the executor on the call
  // the plan was made from), so onnxruntime's buffer holds arg.nbytes.
  void* data = nullptr;
  status = p.ort_get_tensor_mutable_data(value, &data);
  if (status != nullptr || (data == nullptr && arg.nbytes > 0)) {
    if (status != nullptr) {
      p.ort_release_status(status);
    }
    return fail(Error::Internal, "onnxruntime gave no data for output %llu (native plan)",
                static_cast<unsigned long long>(output));
  }
  if (arg.nbytes > 0) {
    std::memcpy(arg.data, data, arg.nbytes);
  }
  if (p.copied_bytes != nullptr) {
    *p.copied_bytes += arg.nbytes;
  }
  return 0;
}

} // namespace etrt
