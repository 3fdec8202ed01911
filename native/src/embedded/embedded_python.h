/*
 * executorch-tensorrt: the embedded Python interpreter that gives a C++
 * process (no Python, no executor table installed) the Python executors.
 *
 * The adapter never links libpython: it finds a shared libpython at run time
 * (see docs/cpp.md), dlopens it RTLD_GLOBAL, starts the interpreter, imports
 * executorch_tensorrt.runtime.embedded (which loads THIS adapter through
 * _native.load_adapter() and installs the executor table into it) and
 * releases the GIL so later callbacks from any thread can take it.
 */
#ifndef EXECUTORCH_TENSORRT_EMBEDDED_PYTHON_H
#define EXECUTORCH_TENSORRT_EMBEDDED_PYTHON_H

#include <string>

namespace etrt {

enum class EmbeddedStart {
  kStarted,        // the interpreter ran the bootstrap without error
  kFailed,         // *error says why
  kNotApplicable,  // Python is already running here, or disabled by env
};

/* Starts the interpreter and runs the bootstrap. Not thread-safe on its own:
 * the adapter calls it once, under its own mutex. adapter_path is the file
 * this adapter was loaded from (dladdr). */
EmbeddedStart start_embedded_python(const std::string& adapter_path,
                                    std::string* error);

/* Set to 0/off/false/no: never start the interpreter (documented in
 * docs/cpp.md; which Python it runs: kPythonEnv in python_location.h). */
constexpr const char* kEmbeddedEnv = "EXECUTORCH_TENSORRT_EMBEDDED_PYTHON";

} // namespace etrt

#endif
