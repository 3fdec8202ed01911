/*
 * A native plan's outputs that onnxruntime allocates (native_plan.h): their
 * shape is known only after Run. Each is checked (with bounds: element type,
 * rank and sizes within the output's bounds), the ExecuTorch output resized
 * to it the way etrt_resize_tensor does for the executors, its bytes checked
 * against the output's buffer and copied in, and the value released.
 */
#include "native_plan.h"

#include "last_error.h"

#include <cstring>
#include <string>

namespace etrt {

using executorch::runtime::Error;

namespace {

constexpr size_t kMaxOutputRank = 16; // ExecuTorch's kTensorDimensionLimit

} // namespace

/* Copies out every allocated output and releases them all (even after a
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

/* A plan with bounds: what onnxruntime produced must be what the output's
 * binding declares (element type, rank, sizes within bounds). */
int32_t NativePlan::check_allocated(void* info, const int64_t* dims, size_t ndim,
                                    uint64_t output) const {
  const etrt_native_plan& p = *plan_;
  const uint64_t k = num_user_inputs_ + output;
  int32_t element = -1;
  void* status = p.ort_get_tensor_element_type(info, &element);
  if (status != nullptr) {
    p.ort_release_status(status);
    element = -1;
  }
  if (element != p.element_types[k]) {
    return fail(Error::Internal, "onnxruntime returned output %llu with element type %d; the "
                "partition declares %d (native plan)", static_cast<unsigned long long>(output),
                element, p.element_types[k]);
  }
  const PlanSignature::Arg& s = signature_.arg(k);
  bool inside = ndim == static_cast<size_t>(s.ndim);
  for (size_t d = 0; inside && d < ndim; ++d) {
    inside = dims[d] >= signature_.min(k)[d] && dims[d] <= signature_.max(k)[d];
  }
  if (!inside) {
    std::string shape = "[";
    for (size_t d = 0; d < ndim; ++d) {
      shape += (d ? ", " : "") + std::to_string(dims[d]);
    }
    return fail(Error::Internal, "onnxruntime returned output %llu with shape %s], outside the "
                "bounds the partition declares for it (rank %d); the program does not match its "
                "TensorRT blob (re-export it)", static_cast<unsigned long long>(output),
                shape.c_str(), s.ndim);
  }
  return 0;
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
  int32_t refused = 0;
  if (status == nullptr && ndim <= kMaxOutputRank && bounded_) {
    refused = check_allocated(info, dims, ndim, output);
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
  if (refused != 0) {
    return refused;
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
  // Without bounds the output's dtype is the model's (checked by the executor
  // on the call the plan was made from), so onnxruntime's buffer holds
  // arg.nbytes; with bounds the element type was checked above and the bytes
  // are the shape's, which the resized output must hold.
  uint64_t nbytes = arg.nbytes;
  if (bounded_) {
    const PlanSignature::Arg& s = signature_.arg(num_user_inputs_ + output);
    if (!element_bytes(arg.sizes, arg.ndim, s.element_size, &nbytes) || nbytes > arg.nbytes) {
      return fail(Error::InvalidArgument, "TensorRTBackend execute: output %llu of the shape "
                  "onnxruntime produced needs more bytes than its buffer holds (%llu)",
                  static_cast<unsigned long long>(output),
                  static_cast<unsigned long long>(arg.nbytes));
    }
  }
  void* data = nullptr;
  status = p.ort_get_tensor_mutable_data(value, &data);
  if (status != nullptr || (data == nullptr && nbytes > 0)) {
    if (status != nullptr) {
      p.ort_release_status(status);
    }
    return fail(Error::Internal, "onnxruntime gave no data for output %llu (native plan)",
                static_cast<unsigned long long>(output));
  }
  if (nbytes > 0) {
    std::memcpy(arg.data, data, nbytes);
  }
  if (p.copied_bytes != nullptr) {
    *p.copied_bytes += nbytes;
  }
  return 0;
}

} // namespace etrt
