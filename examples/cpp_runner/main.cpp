// executorch-tensorrt C++ reference runner: the C++ twin of
// `executorch-tensorrt run model.pte`.
//
//   etrt_runner --model_path model.pte [--method forward] [--inputs FILE]
//               [--fill pattern|ones] [--outputs FILE]
//
// Loads the program with ExecuTorch's C++ API (extension Module, shipped in
// the wheel's libexecutorch.so), takes its inputs from --inputs FILE, else
// from the example inputs export stored beside it (model.expected.etensors),
// else a deterministic non-constant pattern (--fill picks the pattern or 1
// and ignores stored inputs), runs the method and prints each output as
//   output[i] shape=[d0,d1,...]
//     values: v0, v1, ...        (the first 8 values, 4 decimals)
// exactly like the Python runner. --outputs FILE writes every output whole
// (tensor file format, tensor_file.h) for `executorch-tensorrt verify`. TensorRTBackend comes from linking
// executorch_tensorrt::backend; its executors come from the Python
// interpreter the adapter embeds on first use (docs/cpp.md).
//
// Device-resident programs (docs/device-resident.md) keep method inputs and
// outputs in CUDA memory that the caller provides. The runner allocates it
// with the CUDA device allocator the adapter registers with ExecuTorch,
// copies the ones in, and copies the outputs back only to print them; it
// says on stderr which tensors live on the device.
#include <executorch/extension/module/module.h>
#include <executorch/runtime/core/device_allocator.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>
#include <executorch/runtime/platform/runtime.h>
#include <executorch_tensorrt/executor_table.h>

#include "tensor_file.h"

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

using executorch::aten::ScalarType;
using executorch::extension::Module;
using executorch::runtime::DeviceAllocator;
using executorch::runtime::Error;
using executorch::runtime::Method;
using executorch::runtime::etensor::DeviceIndex;
using executorch::runtime::etensor::DeviceType;
using executorch::runtime::EValue;
using executorch::runtime::Tag;
using executorch::runtime::etensor::Tensor;
using executorch::runtime::etensor::TensorImpl;

constexpr int kShownValues = 8;

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --model_path <model.pte> [--method <name>] [--inputs <file>] "
               "[--fill pattern|ones] [--outputs <file>]\n",
               argv0);
  return 2;
}

using etrt_runner::StoredTensor;

// Logical (row-major) element `index` -> its position in memory through `strides`.
size_t memory_index(const std::vector<TensorImpl::SizesType>& sizes,
                    const std::vector<TensorImpl::StridesType>& strides, size_t index) {
  size_t i = 0;
  for (size_t d = sizes.size(); d-- > 0;) {
    const size_t size = static_cast<size_t>(sizes[d]);
    i += (index % size) * static_cast<size_t>(strides[d]);
    index /= size;
  }
  return i;
}

// Fills `count` elements (row-major) of type t with the runners' pattern or
// with one. False if the type is not handled.
bool fill_generated(ScalarType t, bool ones, uint8_t* p, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const int k = etrt_runner::pattern_k(i);
    const float f = ones ? 1.0f : static_cast<float>((k - 125) / 128.0);
    const int64_t n = ones ? 1 : k % 16;
    switch (t) {
      case ScalarType::Float: reinterpret_cast<float*>(p)[i] = f; break;
      case ScalarType::Double: reinterpret_cast<double*>(p)[i] = f; break;
      case ScalarType::Half: reinterpret_cast<uint16_t*>(p)[i] = etrt_runner::exact_float_to_half(f); break;
      case ScalarType::BFloat16: reinterpret_cast<uint16_t*>(p)[i] = etrt_runner::float_to_bfloat16_bits(f); break;
      case ScalarType::Byte: reinterpret_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(n); break;
      case ScalarType::Char: reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(n); break;
      case ScalarType::Short: reinterpret_cast<int16_t*>(p)[i] = static_cast<int16_t>(n); break;
      case ScalarType::Int: reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(n); break;
      case ScalarType::Long: reinterpret_cast<int64_t*>(p)[i] = n; break;
      case ScalarType::Bool: reinterpret_cast<bool*>(p)[i] = ones || (k % 2 == 1); break;
      default: return false;
    }
  }
  return true;
}

// Owns the storage behind one tensor the runner makes: its shape arrays,
// host bytes and, for a CUDA tensor, the device copy.
struct OwnedTensor {
  std::vector<TensorImpl::SizesType> sizes;
  std::vector<TensorImpl::DimOrderType> dim_order;
  std::vector<TensorImpl::StridesType> strides;
  std::vector<uint8_t> data;
  std::unique_ptr<TensorImpl> impl;
};

// Device memory from ExecuTorch's registered device allocator, freed with it.
class DeviceMemory {
 public:
  DeviceMemory(DeviceAllocator* allocator, void* ptr, DeviceIndex index)
      : allocator_(allocator), ptr_(ptr), index_(index) {}
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { allocator_->deallocate(ptr_, index_); }
  void* get() const { return ptr_; }

 private:
  DeviceAllocator* allocator_;
  void* ptr_;
  DeviceIndex index_;
};

std::string device_name(DeviceType type, DeviceIndex index) {
  if (type == DeviceType::CUDA) return "cuda:" + std::to_string(index);
  return "device type " + std::to_string(static_cast<int>(type)) + ":" + std::to_string(index);
}

double half_to_double(uint16_t h) {
  const int sign = (h >> 15) & 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = mant / 1024.0 / 16384.0;  // subnormal: mant * 2^-24
  } else if (exp == 31) {
    v = mant ? 0.0 / 0.0 : 1.0 / 0.0;
  } else {
    v = (1.0 + mant / 1024.0);
    for (int e = exp - 15; e > 0; --e) v *= 2.0;
    for (int e = exp - 15; e < 0; ++e) v /= 2.0;
  }
  return sign ? -v : v;
}

double bfloat16_to_double(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Element `index` (in logical, row-major order, as Python's flatten() sees
// it) of a tensor as a double (what Python's float(v) gives).
bool value_at(const Tensor& t, size_t index, double* out) {
  const void* p = t.const_data_ptr();
  size_t i = 0;  // the element's position in memory, through the strides
  size_t rest = index;
  for (ssize_t d = t.dim(); d-- > 0;) {
    const size_t size = static_cast<size_t>(t.size(d));
    i += (rest % size) * static_cast<size_t>(t.strides()[d]);
    rest /= size;
  }
  switch (t.scalar_type()) {
    case ScalarType::Float: *out = static_cast<const float*>(p)[i]; return true;
    case ScalarType::Double: *out = static_cast<const double*>(p)[i]; return true;
    case ScalarType::Half: *out = half_to_double(static_cast<const uint16_t*>(p)[i]); return true;
    case ScalarType::BFloat16: *out = bfloat16_to_double(static_cast<const uint16_t*>(p)[i]); return true;
    case ScalarType::Byte: *out = static_cast<const uint8_t*>(p)[i]; return true;
    case ScalarType::Char: *out = static_cast<const int8_t*>(p)[i]; return true;
    case ScalarType::Short: *out = static_cast<const int16_t*>(p)[i]; return true;
    case ScalarType::Int: *out = static_cast<const int32_t*>(p)[i]; return true;
    case ScalarType::Long: *out = static_cast<double>(static_cast<const int64_t*>(p)[i]); return true;
    case ScalarType::Bool: *out = static_cast<const bool*>(p)[i] ? 1.0 : 0.0; return true;
    default: return false;
  }
}

void print_error(const std::string& what, Error err) {
  const char* cause = etrt_last_error();
  std::fprintf(stderr, "error: %s: ExecuTorch error 0x%x (%s).%s%s\n", what.c_str(),
               static_cast<unsigned>(err), executorch::runtime::to_string(err),
               cause != nullptr && cause[0] != '\0' ? " " : "",
               cause != nullptr ? cause : "");
}

// The allocator for `type`, or nullptr after saying why there is none.
DeviceAllocator* allocator_for(DeviceType type, const std::string& what) {
  DeviceAllocator* allocator = executorch::runtime::get_device_allocator(type);
  if (allocator == nullptr) {
    std::fprintf(stderr,
                 "error: %s is kept in %s memory by this program, but no device allocator for it "
                 "is registered with ExecuTorch. executorch_tensorrt registers a CUDA allocator "
                 "when its adapter loads, unless EXECUTORCH_TENSORRT_NO_CUDA_ALLOCATOR=1 is set "
                 "(then the library that set it must register one).\n",
                 what.c_str(), device_name(type, 0).c_str());
  }
  return allocator;
}

// `nbytes` of device memory for `what`, or nullptr after saying why not.
std::unique_ptr<DeviceMemory> allocate_on(DeviceType type, DeviceIndex index, size_t nbytes,
                                          const std::string& what) {
  DeviceAllocator* allocator = allocator_for(type, what);
  if (allocator == nullptr) return nullptr;
  auto ptr = allocator->allocate(std::max<size_t>(nbytes, 1), index);
  if (!ptr.ok()) {
    print_error("cannot allocate " + std::to_string(nbytes) + " bytes on " +
                    device_name(type, index) + " for " + what,
                ptr.error());
    return nullptr;
  }
  std::fprintf(stderr, "note: %s is in %s memory (%zu bytes at %p)\n", what.c_str(),
               device_name(type, index).c_str(), nbytes, ptr.get());
  return std::make_unique<DeviceMemory>(allocator, ptr.get(), index);
}

// Where each input and output lives is recorded on the Method's own tensors
// (from the program's extra_tensor_info). MethodMeta does not report it in
// executorch 1.5.1, and the accessors that reach those tensors are marked
// deprecated there, so they are used in this one place.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
executorch::runtime::Result<Method*> method_of(Module& module, const std::string& name) {
  return module.method(name);
}
const Tensor& planned_input(const Method& method, size_t i) {
  return method.get_input(i).toTensor();
}
#pragma GCC diagnostic pop

}  // namespace

int main(int argc, char** argv) {
  std::string model_path;
  std::string method_name = "forward";
  std::string inputs_path;
  std::string outputs_path;
  std::string fill;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag, std::string* dst) {
      const std::string f = flag;
      if (arg == f && i + 1 < argc) {
        *dst = argv[++i];
        return true;
      }
      if (arg.rfind(f + "=", 0) == 0) {
        *dst = arg.substr(f.size() + 1);
        return true;
      }
      return false;
    };
    if (value("--model_path", &model_path) || value("--method", &method_name) ||
        value("--inputs", &inputs_path) || value("--outputs", &outputs_path) ||
        value("--fill", &fill)) {
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      usage(argv[0]);
      return 0;
    }
    std::fprintf(stderr, "error: unknown argument %s\n", arg.c_str());
    return usage(argv[0]);
  }
  if (model_path.empty()) {
    std::fprintf(stderr, "error: --model_path is required\n");
    return usage(argv[0]);
  }
  if (!fill.empty() && fill != "pattern" && fill != "ones") {
    std::fprintf(stderr, "error: --fill takes pattern or ones, not %s\n", fill.c_str());
    return usage(argv[0]);
  }
  // Inputs: --inputs, else the stored example inputs (unless --fill), else the pattern.
  std::vector<StoredTensor> stored;
  std::string inputs_note = fill == "ones" ? "inputs filled with 1"
                                           : "deterministic pattern inputs (tools/runner.py pattern_values)";
  {
    std::string source = inputs_path;
    if (source.empty() && fill.empty()) {
      const std::string base = model_path.size() > 4 &&
                                       model_path.compare(model_path.size() - 4, 4, ".pte") == 0
                                   ? model_path.substr(0, model_path.size() - 4)
                                   : model_path;
      if (FILE* f = std::fopen((base + ".expected.etensors").c_str(), "rb")) {
        std::fclose(f);
        source = base + ".expected.etensors";
      }
    }
    if (!source.empty()) {
      std::vector<StoredTensor> all;
      std::string why;
      if (!etrt_runner::read_tensor_file(source, &all, &why) ||
          !etrt_runner::select_inputs(all, &stored, &why)) {
        std::fprintf(stderr, "error: %s\n", why.c_str());
        return 2;
      }
      if (!stored.empty()) {
        inputs_note = (inputs_path.empty() ? "the example inputs stored in " : "inputs from ") + source;
      } else if (!inputs_path.empty()) {
        std::fprintf(stderr, "error: %s holds no input.* tensors\n", source.c_str());
        return 2;
      }
    }
  }
  if (FILE* f = std::fopen(model_path.c_str(), "rb")) {
    std::fclose(f);
  } else {
    std::fprintf(stderr, "error: %s does not exist or cannot be read\n", model_path.c_str());
    return 2;
  }

  executorch::runtime::runtime_init();
  Module module(model_path, Module::LoadMode::File);
  Error err = module.load();
  if (err != Error::Ok) {
    print_error("cannot load " + model_path + " (not a valid ExecuTorch program?)", err);
    return 1;
  }
  err = module.load_method(method_name);
  if (err != Error::Ok) {
    print_error("cannot load method '" + method_name + "' of " + model_path, err);
    return 1;
  }
  auto meta = module.method_meta(method_name);
  if (!meta.ok()) {
    print_error("cannot read the metadata of method '" + method_name + "'", meta.error());
    return 1;
  }
  auto method_or = method_of(module, method_name);
  if (!method_or.ok()) {
    print_error("cannot reach method '" + method_name + "'", method_or.error());
    return 1;
  }
  Method& method = *method_or.get();
  if (!stored.empty() && stored.size() != meta->num_inputs()) {
    std::fprintf(stderr, "error: %zu stored input tensors, method '%s' takes %zu inputs\n",
                 stored.size(), method_name.c_str(), meta->num_inputs());
    return 2;
  }
  std::fprintf(stderr, "note: %s\n", inputs_note.c_str());

  std::vector<std::unique_ptr<OwnedTensor>> storage;
  std::vector<std::unique_ptr<DeviceMemory>> device_memory;
  std::vector<EValue> inputs;
  for (size_t i = 0; i < meta->num_inputs(); ++i) {
    auto tag = meta->input_tag(i);
    if (!tag.ok()) {
      print_error("cannot read input " + std::to_string(i), tag.error());
      return 1;
    }
    if (tag.get() == Tag::Int) {
      inputs.emplace_back(static_cast<int64_t>(1));
      continue;
    }
    if (tag.get() == Tag::Double) {
      inputs.emplace_back(1.0);
      continue;
    }
    if (tag.get() == Tag::Bool) {
      inputs.emplace_back(true);
      continue;
    }
    if (tag.get() != Tag::Tensor) {
      std::fprintf(stderr, "error: input %zu has a kind (tag %d) the reference runner cannot fill\n",
                   i, static_cast<int>(tag.get()));
      return 1;
    }
    auto info = meta->input_tensor_meta(i);
    if (!info.ok()) {
      print_error("cannot read input " + std::to_string(i), info.error());
      return 1;
    }
    auto in = std::make_unique<OwnedTensor>();
    const ScalarType dtype = info->scalar_type();
    const auto sizes = info->sizes();
    const auto dim_order = info->dim_order();
    in->sizes.assign(sizes.begin(), sizes.end());
    in->dim_order.assign(dim_order.begin(), dim_order.end());
    const StoredTensor* given = stored.empty() ? nullptr : &stored[i];
    if (given != nullptr) {
      if (given->dtype != static_cast<uint32_t>(dtype) || given->sizes.size() != in->sizes.size()) {
        std::fprintf(stderr, "error: stored input.%zu (dtype code %u, rank %zu) does not fit input "
                     "%zu (%s, rank %zu)\n", i, given->dtype, given->sizes.size(), i,
                     executorch::runtime::toString(dtype), in->sizes.size());
        return 2;
      }
      in->sizes.assign(given->sizes.begin(), given->sizes.end());  // dynamic shapes
    }
    const size_t ndim = in->sizes.size();
    in->strides.assign(ndim, 1);
    // Strides follow the dim order (the innermost dimension is last in it).
    for (size_t k = ndim; k-- > 1;) {
      const auto inner = in->dim_order[k];
      const auto outer = in->dim_order[k - 1];
      in->strides[outer] = in->strides[inner] * in->sizes[inner];
    }
    size_t numel = 1;
    for (auto s : in->sizes) numel *= static_cast<size_t>(s);
    const size_t elem = executorch::runtime::elementSize(dtype);
    const size_t nbytes = numel * elem;
    std::vector<uint8_t> row_major(nbytes + 1, 0);
    if (given != nullptr) {
      std::memcpy(row_major.data(), given->data.data(), nbytes);
    } else if (!fill_generated(dtype, fill == "ones", row_major.data(), numel)) {
      std::fprintf(stderr, "error: input %zu has dtype %s, which the reference runner does not fill\n",
                   i, executorch::runtime::toString(dtype));
      return 2;
    }
    // Values are in logical order; memory follows the method's dim order.
    in->data.assign(nbytes + 1, 0);
    for (size_t k = 0; k < numel; ++k) {
      std::memcpy(in->data.data() + memory_index(in->sizes, in->strides, k) * elem,
                  row_major.data() + k * elem, elem);
    }
    void* data = in->data.data();
    const Tensor& planned = planned_input(method, i);
    const DeviceType device = planned.device_type();
    const DeviceIndex device_index = planned.device_index();
    if (device != DeviceType::CPU) {
      auto mem = allocate_on(device, device_index, nbytes, "input " + std::to_string(i));
      if (!mem) return 1;
      err = executorch::runtime::get_device_allocator(device)->copy_host_to_device(
          mem->get(), data, nbytes, device_index);
      if (err != Error::Ok) {
        print_error("cannot copy input " + std::to_string(i) + " to " +
                        device_name(device, device_index),
                    err);
        return 1;
      }
      data = mem->get();
      device_memory.push_back(std::move(mem));
    }
    in->impl = std::make_unique<TensorImpl>(
        dtype, static_cast<ssize_t>(ndim), in->sizes.data(), data, in->dim_order.data(),
        in->strides.data(), executorch::aten::TensorShapeDynamism::STATIC, device, device_index);
    inputs.emplace_back(Tensor(in->impl.get()));
    storage.push_back(std::move(in));
  }

  // Outputs with no planned memory (device-resident programs) need memory
  // from the caller, on the device the program records for them.
  std::vector<std::vector<uint8_t>> host_outputs;
  for (size_t i = 0; i < meta->num_outputs(); ++i) {
    auto info = meta->output_tensor_meta(i);
    if (!info.ok() || info->is_memory_planned()) continue;  // not a tensor, or planned
    const Tensor& planned = method.get_output(i).toTensor();
    void* data = nullptr;
    if (planned.device_type() != DeviceType::CPU) {
      auto mem = allocate_on(planned.device_type(), planned.device_index(), info->nbytes(),
                             "output " + std::to_string(i));
      if (!mem) return 1;
      data = mem->get();
      device_memory.push_back(std::move(mem));
    } else {
      host_outputs.emplace_back(std::max<size_t>(info->nbytes(), 1));
      data = host_outputs.back().data();
    }
    err = method.set_output_data_ptr(data, std::max<size_t>(info->nbytes(), 1), i);
    if (err != Error::Ok) {
      print_error("cannot give output " + std::to_string(i) + " its memory", err);
      return 1;
    }
  }

  err = method.set_inputs(executorch::aten::ArrayRef<EValue>(inputs.data(), inputs.size()));
  if (err == Error::Ok) err = method.execute();
  if (err != Error::Ok) {
    print_error("running '" + method_name + "' of " + model_path + " failed", err);
    return 1;
  }
  std::vector<StoredTensor> written;
  for (size_t i = 0; i < method.outputs_size(); ++i) {
    const EValue& out = method.get_output(i);
    if (!out.isTensor()) {
      // The Python runner handles tensors only; say what it is.
      if (out.isInt()) std::printf("output[%zu] int=%" PRId64 "\n", i, out.toInt());
      else if (out.isDouble()) std::printf("output[%zu] double=%.4f\n", i, out.toDouble());
      else if (out.isBool()) std::printf("output[%zu] bool=%s\n", i, out.toBool() ? "true" : "false");
      else std::printf("output[%zu] (tag %d)\n", i, static_cast<int>(out.tag));
      continue;
    }
    Tensor t = out.toTensor();
    // A device output is copied into a host tensor of the same layout to print it.
    OwnedTensor host;
    if (t.device_type() != DeviceType::CPU) {
      host.sizes.assign(t.sizes().begin(), t.sizes().end());
      host.dim_order.assign(t.dim_order().begin(), t.dim_order().end());
      host.strides.assign(t.strides().begin(), t.strides().end());
      host.data.assign(t.nbytes() + 1, 0);
      err = executorch::runtime::get_device_allocator(t.device_type())
                ->copy_device_to_host(host.data.data(), t.const_data_ptr(), t.nbytes(),
                                      t.device_index());
      if (err != Error::Ok) {
        print_error("cannot copy output " + std::to_string(i) + " from " +
                        device_name(t.device_type(), t.device_index()),
                    err);
        return 1;
      }
      host.impl = std::make_unique<TensorImpl>(
          t.scalar_type(), t.dim(), host.sizes.data(), host.data.data(),
          host.dim_order.data(), host.strides.data());
      t = Tensor(host.impl.get());
    }
    std::string shape;
    for (ssize_t d = 0; d < t.dim(); ++d) {
      shape += (d ? "," : "") + std::to_string(t.size(d));
    }
    std::printf("output[%zu] shape=[%s]\n", i, shape.c_str());
    std::string values;
    const size_t n = std::min<size_t>(t.numel(), kShownValues);
    for (size_t k = 0; k < n; ++k) {
      double v = 0.0;
      if (!value_at(t, k, &v)) {
        std::fprintf(stderr, "error: output %zu has dtype %s, which the reference runner cannot print\n",
                     i, executorch::runtime::toString(t.scalar_type()));
        return 1;
      }
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.4f", v);
      values += (k ? ", " : "") + std::string(buf);
    }
    std::printf("  values: %s\n", values.c_str());
    if (!outputs_path.empty()) {
      StoredTensor s;
      s.name = "output." + std::to_string(i);
      s.dtype = static_cast<uint32_t>(t.scalar_type());
      const size_t elem = t.element_size();
      std::vector<TensorImpl::SizesType> sizes(t.sizes().begin(), t.sizes().end());
      std::vector<TensorImpl::StridesType> strides(t.strides().begin(), t.strides().end());
      for (auto d : sizes) s.sizes.push_back(d);
      s.data.resize(static_cast<size_t>(t.numel()) * elem);
      const auto* base = static_cast<const uint8_t*>(t.const_data_ptr());
      for (size_t k = 0; k < static_cast<size_t>(t.numel()); ++k) {
        std::memcpy(s.data.data() + k * elem, base + memory_index(sizes, strides, k) * elem, elem);
      }
      written.push_back(std::move(s));
    }
  }
  std::fflush(stdout);
  if (!outputs_path.empty()) {
    std::string why;
    if (!etrt_runner::write_tensor_file(outputs_path, written, &why)) {
      std::fprintf(stderr, "error: %s\n", why.c_str());
      return 1;
    }
    std::fprintf(stderr, "note: wrote the full outputs to %s\n", outputs_path.c_str());
  }
  return 0;
}
