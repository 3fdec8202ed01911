// executorch-tensorrt C++ reference runner: the C++ twin of
// `executorch-tensorrt run model.pte`.
//
//   etrt_runner --model_path model.pte [--data model.ptd] [--method forward]
//               [--inputs FILE] [--fill pattern|ones] [--outputs FILE]
//   etrt_runner --model_path llm.pte [--data llm.ptd] --decode 32 --prompt 3,4,5,6[;7,8,...]
//               (a program with a batch of B rows: B prompts joined by '|')
//               (decode.h)
//   etrt_runner --model_path model.pte --repeat N   (steady-state us/call, repeat.h)
//
// --data names the program's weights file (.ptd), passed to ExecuTorch as
// Module(pte, ptd); without it, model.ptd beside model.pte is used when it
// exists (said on stderr), as `executorch-tensorrt run` does.
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

#include "decode.h"
#include "device_memory.h"
#include "input_fill.h"
#include "repeat.h"
#include "tensor_file.h"
#include "tensor_print.h"

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

using executorch::aten::ScalarType;
using executorch::extension::Module;
using executorch::runtime::Error;
using executorch::runtime::Method;
using executorch::runtime::etensor::DeviceIndex;
using executorch::runtime::etensor::DeviceType;
using executorch::runtime::EValue;
using executorch::runtime::Tag;
using executorch::runtime::etensor::Tensor;
using executorch::runtime::etensor::TensorImpl;

using etrt_runner::allocate_on;
using etrt_runner::device_name;
using etrt_runner::DeviceMemory;
using etrt_runner::fill_generated;
using etrt_runner::memory_index;
using etrt_runner::OwnedTensor;
using etrt_runner::print_error;

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --model_path <model.pte> [--data <model.ptd>] [--method <name>] "
               "[--inputs <file>] [--fill pattern|ones] [--outputs <file>] "
               "[--decode <n> --prompt <ids>] [--repeat <n>]\n",
               argv0);
  return 2;
}

using etrt_runner::StoredTensor;

bool readable(const std::string& path) {
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    std::fclose(f);
    return true;
  }
  return false;
}

// model.pte -> model.ptd (export writes the weights there with external_weights=True).
std::string beside(const std::string& model_path, const char* suffix) {
  const bool pte = model_path.size() > 4 &&
                   model_path.compare(model_path.size() - 4, 4, ".pte") == 0;
  return (pte ? model_path.substr(0, model_path.size() - 4) : model_path) + suffix;
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
  std::string data_path;
  std::string decode_count;  // --decode N: greedy LLM decoding (decode.h)
  std::string prompt_text;
  std::string repeat;  // --repeat N: steady-state timing (repeat.h)
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
        value("--fill", &fill) || value("--data", &data_path) ||
        value("--decode", &decode_count) || value("--prompt", &prompt_text) ||
        value("--repeat", &repeat)) {
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
                                           : "deterministic pattern inputs (cli/runner.py pattern_values)";
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

  if (!data_path.empty()) {
    if (!readable(data_path)) {
      std::fprintf(stderr, "error: --data %s does not exist or cannot be read\n",
                   data_path.c_str());
      return 2;
    }
  } else if (readable(beside(model_path, ".ptd"))) {
    data_path = beside(model_path, ".ptd");
    std::fprintf(stderr, "note: loading the weights in %s beside the program (--data overrides)\n",
                 data_path.c_str());
  }

  executorch::runtime::runtime_init();
  std::unique_ptr<Module> module_owner =
      data_path.empty() ? std::make_unique<Module>(model_path, Module::LoadMode::File)
                        : std::make_unique<Module>(model_path, data_path, Module::LoadMode::File);
  Module& module = *module_owner;
  Error err = module.load();
  if (err != Error::Ok) {
    print_error("cannot load " + model_path +
                    (data_path.empty() ? std::string(" (not a valid ExecuTorch program?)")
                                       : " with the weights file " + data_path +
                                             " (a truncated .ptd, or not the program's?)"),
                err);
    return 1;
  }
  err = module.load_method(method_name);
  if (err != Error::Ok) {
    print_error("cannot load method '" + method_name + "' of " + model_path, err);
    if (err == Error::NotFound && data_path.empty()) {
      std::fprintf(stderr,
                   "note: no weights file was given: if the program keeps its weights in a "
                   ".ptd (export writes %s), pass it with --data PATH\n",
                   beside(model_path, ".ptd").c_str());
    }
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
  if (!decode_count.empty()) {  // LLM greedy decoding (decode.h)
    return etrt_runner::run_decode_mode(method, decode_count, prompt_text, [&]() -> Method* {
      module.unload_method(method_name);
      auto reloaded = module.load_method(method_name) == Error::Ok
                          ? method_of(module, method_name)
                          : executorch::runtime::Result<Method*>(Error::InvalidState);
      if (!reloaded.ok()) {
        print_error("cannot load method '" + method_name + "' again", reloaded.error());
        return nullptr;
      }
      return reloaded.get();
    });
  }
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
  if (!repeat.empty()) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(repeat.c_str(), &end, 10);
    if (*end != '\0' || n == 0 || n > 100000000ULL) {
      std::fprintf(stderr, "error: --repeat takes a number of calls (1..1e8), not %s\n",
                   repeat.c_str());
      return 2;
    }
    if (!etrt_runner::time_calls(method, n)) return 1;
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
    if (!etrt_runner::print_output(i, t)) return 1;
    if (!outputs_path.empty()) written.push_back(etrt_runner::stored_output(i, t));
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
