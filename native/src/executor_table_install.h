/* executorch-tensorrt: the installed executor table (etrt_install_executor_table). */
#ifndef EXECUTORCH_TENSORRT_EXECUTOR_TABLE_INSTALL_H
#define EXECUTORCH_TENSORRT_EXECUTOR_TABLE_INSTALL_H

#include <executorch_tensorrt/executor_table.h>

namespace etrt {

/* The table installed last, or NULL. */
const etrt_executor_table* installed_table();

} // namespace etrt

#endif
