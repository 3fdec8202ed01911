/* The executors to call, starting the embedded interpreter once if needed
 * (see embedded_start.h). */
#include "embedded_start.h"

#include "embedded_python.h"
#include "executor_table_install.h"
#include "library_path.h"

#include <atomic>
#include <mutex>

namespace etrt {
namespace {

std::mutex g_mutex;
std::atomic<bool> g_attempted{false};
std::string g_error; // written once, under g_mutex, before g_attempted is set

void start_once() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_attempted.load(std::memory_order_acquire)) {
    return;
  }
  std::string error;
  const EmbeddedStart started = start_embedded_python(this_library(), &error);
  if (started == EmbeddedStart::kFailed) {
    g_error = error;
  } else if (started == EmbeddedStart::kStarted && installed_table() == nullptr) {
    g_error = "the embedded Python interpreter started but installed no executor table "
              "into this adapter";
  }
  g_attempted.store(true, std::memory_order_release);
}

} // namespace

const etrt_executor_table* current_executors() {
  const etrt_executor_table* table = installed_table();
  if (table == nullptr && !g_attempted.load(std::memory_order_acquire)) {
    start_once();
    table = installed_table();
  }
  return table;
}

std::string no_executor_message() {
  if (g_attempted.load(std::memory_order_acquire) && !g_error.empty()) {
    return "no executor installed: " + g_error;
  }
  return "no executor installed: import executorch_tensorrt in Python (it installs the "
         "TensorRT and onnxruntime executors), or install an executor table with "
         "etrt_install_executor_table() before loading the program";
}

} // namespace etrt
