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

// The plan's fields before the first appended ones: the smallest plan accepted.
constexpr size_t kBasePlanSize = offsetof(etrt_native_plan, num_state_values);
constexpr size_t kMaxOutputRank = 16;  // ExecuTorch's kTensorDimensionLimit

bool has_appended(const etrt_native_plan& plan) {
  // Up to the first appended block's last field: a writer from before cuda_graph was appended has them all.
  return plan.struct_size >= offsetof(etrt_native_plan, cuda_graph);
}

bool has_any_address(const etrt_native_plan& plan) {
  return plan.struct_size >= offsetof(etrt_native_plan, element_types) + sizeof(void*) &&
         plan.any_address != 0;
}

// Bounds for dynamic shapes.
const etrt_arg_bounds* bounds_of(const etrt_native_plan& plan) {
  return plan.struct_size >= offsetof(etrt_native_plan, equal_dims) ? plan.bounds : nullptr;
}

// Equal dimensions of a plan with bounds: the last appended fields.
bool has_equal_dims(const etrt_native_plan& plan) {
  return plan.struct_size >= sizeof(etrt_native_plan) && plan.num_equal_dims > 0;
}

uint64_t empty_buffer = 0; // onnxruntime refuses a NULL buffer even for an empty tensor

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
  const etrt_arg_bounds* bounds = any_address_ ? bounds_of(*plan) : nullptr;
  bounded_ = bounds != nullptr;
  if (any_address_ && (plan->ort_create_tensor == nullptr || plan->ort_memory_info == nullptr ||
                       plan->element_types == nullptr || plan->ort_release_value == nullptr)) {
    clear();
    return false;
  }
  const auto match = bounded_       ? PlanSignature::Match::kBounded
                     : any_address_ ? PlanSignature::Match::kAnyAddress
                                    : PlanSignature::Match::kExact;
  if (!signature_.adopt(plan->signature, bounds, num_args, match) ||
      (bounded_ && has_equal_dims(*plan) &&
       !signature_.adopt_equal_dims(plan->equal_dims, plan->num_equal_dims))) {
    clear();
    return false;
  }
  try {
    if (!adopt_appended(*plan) ||
        !index_checks_.adopt(*plan, num_user_inputs_, any_address_, bounded_)) {
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
      for (uint64_t j : copy_out_) {
        out_values_[j] = nullptr; // onnxruntime allocates these on every run
      }
      bound_data_.assign(num_args, nullptr);
      size_t total = 0;
      for (uint64_t k = 0; k < num_args; ++k) {
        total += static_cast<size_t>(signature_.arg(k).ndim);
      }
      bound_sizes_.assign(total, -1);
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
  const uint64_t num_user_outputs = signature_.size() - num_user_inputs_;
  for (uint64_t j = 0; j < num_user_outputs; ++j) {
    // Static any_address plans bind every output; bounded ones say which they do not.
    if (bounded_ ? signature_.arg(num_user_inputs_ + j).output_rule == ETRT_OUTPUT_ALLOCATED
                 : !any_address_ && plan.outputs[j] == nullptr) {
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
       plan.ort_get_tensor_mutable_data == nullptr || plan.ort_release_value == nullptr ||
       (bounded_ && plan.ort_get_tensor_element_type == nullptr))) {
    return false;
  }
  if (plan.num_position_checks > 0 && plan.position_checks == nullptr) {
    return false;
  }
  if (!positions_.adopt(plan.position_checks, plan.num_position_checks, signature_,
                        num_user_inputs_, any_address_, bounded_)) {
    return false;
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
  bound_sizes_.clear();
  bounded_ = false;
  in_values_.clear();
  out_values_.clear();
  alt_in_values_.clear();
  alt_out_values_.clear();
  any_address_ = false;
  plan_ = nullptr;
  num_user_inputs_ = 0;
  positions_.clear();
  index_checks_.clear();
  copy_out_.clear();
  signature_.clear();
}

bool NativePlan::matches(const etrt_arg* args, uint64_t num_args) const {
  return plan_ != nullptr && plan_->withdrawn == 0 && signature_.matches(args, num_args);
}

/* An any_address plan: OrtValues over the memory of each argument whose
 * address (or, with bounds, shape) changed; the signature fixed the rest. */
int32_t NativePlan::bind(etrt_arg* args) {
  const etrt_native_plan& p = *plan_;
  int64_t shape[kMaxOutputRank];
  int32_t followed[kMaxOutputRank];
  for (uint64_t k = 0; k < signature_.size(); ++k) {
    etrt_arg& a = args[k];
    const PlanSignature::Arg& s = signature_.arg(k);
    if (bounded_ && s.output_rule == ETRT_OUTPUT_ALLOCATED && k >= num_user_inputs_) {
      continue; // onnxruntime allocates it (copy_out)
    }
    // With bounds the call's sizes (checked within them), else the signature's.
    const int32_t* sizes = bounded_ ? a.sizes : signature_.sizes(k);
    if (bounded_ && s.output_rule == ETRT_OUTPUT_FOLLOWS) {
      if (s.ndim > static_cast<int32_t>(kMaxOutputRank)) {
        return fail(Error::InvalidArgument, "output %llu has rank %d (native plan: at most %zu)",
                    static_cast<unsigned long long>(k - num_user_inputs_), s.ndim,
                    kMaxOutputRank);
      }
      // The shape these inputs give it (matches() checked it fits the buffer):
      // the output takes it now, as the executor's resize would after Run.
      signature_.followed_sizes(args, k, followed);
      sizes = followed;
      if (std::memcmp(a.sizes, followed, sizeof(int32_t) * s.ndim) != 0) {
        for (int32_t d = 0; d < s.ndim; ++d) {
          shape[d] = followed[d];
        }
        if (etrt_resize_tensor(&a, s.ndim, shape) != 0) {
          const std::string cause = last_error();
          return fail(Error::InvalidArgument, "TensorRTBackend execute: cannot resize output "
                      "%llu to the shape its inputs give it (%s); the program's memory plan "
                      "holds a smaller upper bound",
                      static_cast<unsigned long long>(k - num_user_inputs_), cause.c_str());
        }
      }
      uint64_t needed = 0;
      if (!element_bytes(followed, s.ndim, s.element_size, &needed) || needed > a.nbytes ||
          (needed > 0 && a.data == nullptr)) {
        return fail(Error::InvalidArgument, "TensorRTBackend execute: output %llu of the shape "
                    "its inputs give it needs more bytes than its buffer holds (%llu)",
                    static_cast<unsigned long long>(k - num_user_inputs_),
                    static_cast<unsigned long long>(a.nbytes));
      }
    }
    int32_t* bound_sizes = bound_sizes_.data() + s.shape_at;
    if (owned_[k] != nullptr && bound_data_[k] == a.data &&
        (!bounded_ || std::memcmp(bound_sizes, sizes, sizeof(int32_t) * s.ndim) == 0)) {
      continue;
    }
    if (s.ndim > static_cast<int32_t>(kMaxOutputRank)) {
      return fail(Error::InvalidArgument, "argument %llu has rank %d (native plan: at most %zu)",
                  static_cast<unsigned long long>(k), s.ndim, kMaxOutputRank);
    }
    for (int32_t d = 0; d < s.ndim; ++d) {
      shape[d] = sizes[d];
    }
    uint64_t nbytes = a.nbytes;
    if (bounded_) { // exactly the shape's bytes, as the executor binds (matches() checked them)
      element_bytes(sizes, s.ndim, s.element_size, &nbytes);
    }
    void* value = nullptr;
    void* status = p.ort_create_tensor(p.ort_memory_info, a.data ? a.data : &empty_buffer,
                                       static_cast<size_t>(nbytes), shape,
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
    std::memcpy(bound_sizes, sizes, sizeof(int32_t) * s.ndim);
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
  // Checks of the inputs' values, before anything runs or is written: the
  // index ranges (input_checks.h), then the cache positions.
  if (const int32_t refused = index_checks_.check(args); refused != 0) {
    return refused;
  }
  if (const int32_t refused = positions_.check(args); refused != 0) {
    return refused;
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

} // namespace etrt
