/*
 * Installing the executors (etrt_install_executor_table).
 *
 * The table is copied into storage the adapter owns, so the installer may
 * free its struct. Replaced copies are deliberately never freed: a delegate
 * initialized with one table keeps using it (its handles belong to those
 * executors), and installs are rare, so the leak is a few bytes.
 */
#include "executor_table_install.h"

#include "last_error.h"

#include <atomic>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <new>

namespace etrt {
namespace {


std::atomic<const etrt_executor_table*> g_table{nullptr};
std::mutex g_install_mutex;

} // namespace

const etrt_executor_table* installed_table() {
  return g_table.load(std::memory_order_acquire);
}

} // namespace etrt

extern "C" int32_t etrt_install_executor_table(const etrt_executor_table* table) {
  using etrt::fail;
  using executorch::runtime::Error;
  std::lock_guard<std::mutex> lock(etrt::g_install_mutex);
  if (table == nullptr) {
    etrt::g_table.store(nullptr, std::memory_order_release);
    return 0;
  }
  if (table->abi_version != ETRT_EXECUTOR_ABI_VERSION) {
    return fail(Error::InvalidArgument,
                "etrt_install_executor_table: the table has abi_version %u but this adapter "
                "implements %u; install matching executorch_tensorrt executors and adapter",
                table->abi_version, ETRT_EXECUTOR_ABI_VERSION);
  }
  // native_plan was appended without an abi_version change: a table that
  // ends before it has no plans.
  constexpr size_t kRequired = offsetof(etrt_executor_table, native_plan);
  if (table->struct_size < kRequired) {
    return fail(Error::InvalidArgument,
                "etrt_install_executor_table: struct_size is %u, need at least %zu",
                table->struct_size, kRequired);
  }
  if (table->is_available == nullptr || table->init == nullptr ||
      table->execute == nullptr || table->destroy == nullptr) {
    return fail(Error::InvalidArgument,
                "etrt_install_executor_table: every function pointer of the table must be set");
  }
  auto* copy = new (std::nothrow) etrt_executor_table();
  if (copy == nullptr) {
    return fail(Error::MemoryAllocationFailed, "etrt_install_executor_table: out of memory");
  }
  const size_t covered =
      table->struct_size < sizeof(etrt_executor_table) ? table->struct_size
                                                       : sizeof(etrt_executor_table);
  std::memcpy(copy, table, covered); // fields beyond it stay NULL
  copy->struct_size = sizeof(etrt_executor_table);
  etrt::g_table.store(copy, std::memory_order_release); // the old copy is leaked on purpose
  return 0;
}
