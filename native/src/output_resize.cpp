/* Resizing an output tensor for an executor (etrt_resize_tensor). */
#include <executorch_tensorrt/executor_table.h>

#include "last_error.h"

#include <executorch/runtime/core/exec_aten/util/tensor_util.h>

#include <sys/types.h>

extern "C" int32_t etrt_resize_tensor(etrt_arg* arg, int32_t ndim, const int64_t* sizes) {
  namespace et = ::executorch::runtime;
  using et::Error;
  using etrt::fail;
  using TensorImpl = et::etensor::TensorImpl;
  if (arg == nullptr || arg->kind != ETRT_ARG_TENSOR || arg->tensor == nullptr) {
    return fail(Error::InvalidArgument, "etrt_resize_tensor: the argument is not a tensor");
  }
  if (ndim < 0 || static_cast<size_t>(ndim) > et::kTensorDimensionLimit ||
      (ndim > 0 && sizes == nullptr)) {
    return fail(Error::InvalidArgument, "etrt_resize_tensor: ndim %d is out of range [0, %zu] "
                "or sizes is NULL", ndim, static_cast<size_t>(et::kTensorDimensionLimit));
  }
  TensorImpl::SizesType new_sizes[et::kTensorDimensionLimit];
  for (int32_t i = 0; i < ndim; ++i) {
    if (sizes[i] < 0 || sizes[i] > INT32_MAX) {
      return fail(Error::InvalidArgument,
                  "etrt_resize_tensor: size %lld of dimension %d is negative or exceeds int32",
                  static_cast<long long>(sizes[i]), i);
    }
    new_sizes[i] = static_cast<TensorImpl::SizesType>(sizes[i]);
  }
  auto* impl = static_cast<TensorImpl*>(arg->tensor);
  const Error err = et::internal::resize_tensor_impl(
      impl, et::ArrayRef<TensorImpl::SizesType>(new_sizes, static_cast<size_t>(ndim)));
  if (err != Error::Ok) {
    return fail(err, "etrt_resize_tensor: ExecuTorch refused to resize the output (error 0x%x): "
                "the rank must stay %zd and a bounded tensor cannot grow past its planned "
                "capacity", static_cast<unsigned>(err), static_cast<ssize_t>(impl->dim()));
  }
  arg->data = impl->mutable_data();
  arg->nbytes = static_cast<uint64_t>(impl->nbytes());
  arg->ndim = static_cast<int32_t>(impl->dim());
  arg->sizes = impl->sizes().data();
  arg->dim_order = impl->dim_order().data();
  return 0;
}
