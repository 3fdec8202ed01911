/*
 * executorch-tensorrt: which Python the embedded interpreter
 * (embedded_python.h) runs, and where that Python's shared libpython is.
 *
 * Used by start_embedded_python in this order: site_packages_of(real_path(
 * adapter)), choose_python, run_probe, find_libpython. Nothing here loads
 * libpython; it only runs the chosen python once (popen) to ask.
 */
#ifndef EXECUTORCH_TENSORRT_PYTHON_LOCATION_H
#define EXECUTORCH_TENSORRT_PYTHON_LOCATION_H

#include <string>
#include <vector>

namespace etrt {

/* The path of the python executable to embed (documented in docs/cpp.md). */
constexpr const char* kPythonEnv = "EXECUTORCH_TENSORRT_PYTHON";

/* The canonical path (realpath), or path itself when it cannot be resolved. */
std::string real_path(const std::string& path);

/* The site-packages that holds the adapter, if the adapter sits in the
 * installed layout <site>/executorch_tensorrt/lib/<lib>; else "". */
std::string site_packages_of(const std::string& adapter);

/* "3.11" from <prefix>/lib/python3.11/site-packages, else "". */
std::string python_version_of(const std::string& site_packages);

struct PythonChoice {
  std::string executable;
  std::string why; // for messages: how it was chosen
};

/* Which Python to embed: $EXECUTORCH_TENSORRT_PYTHON (a path), else the
 * python in <prefix>/bin of the environment whose site_packages holds the
 * adapter. Never PATH: a search there (where an empty entry means the
 * current directory) could run any program called python3. False with
 * *error (what to set) when there is none. */
bool choose_python(const std::string& site_packages, PythonChoice* out, std::string* error);

/* What the chosen python reports about itself (sysconfig, sys.path). */
struct Probe {
  std::string version, executable, shared, libdir, ldlibrary, instsoname, multiarch;
  std::vector<std::string> paths;
};

/* Runs `python -c <probe>` once and fills *probe; false with *error (the
 * exit status and the tail of its output) when it reported no version. */
bool run_probe(const std::string& python, Probe* probe, std::string* error);

/* The shared libpython the probed interpreter was built with (a path, or a
 * soname for the loader to search), or "" with *error. python names the
 * interpreter in messages. */
std::string find_libpython(const std::string& python, const Probe& probe, std::string* error);

} // namespace etrt

#endif
