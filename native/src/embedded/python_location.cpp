/*
 * Which Python the embedded interpreter runs and where its libpython is
 * (see python_location.h and docs/cpp.md).
 *
 * Which Python: the one of the environment the adapter is installed in, so
 * the interpreter sees exactly the packages `python -c "import
 * executorch_tensorrt"` would see there:
 *   1. $EXECUTORCH_TENSORRT_PYTHON (the path of a python executable), else
 *   2. <prefix>/bin/pythonX.Y (or python3, python) of the environment whose
 *      <prefix>/lib/pythonX.Y/site-packages holds this adapter.
 * Never PATH: with an empty entry (the current directory) in it, a search
 * could run whatever program called python3 sits where the process runs.
 * That executable is run once (popen) to report its version, sys.path,
 * whether it has a shared libpython and where (sysconfig LIBDIR, LDLIBRARY,
 * INSTSONAME, MULTIARCH). Asking the interpreter at run time rather than
 * recording it at build time keeps a wheel built elsewhere (or in an
 * isolated build environment) working wherever it is installed.
 */
#include "python_location.h"

#include <limits.h>
#include <stdlib.h>
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace etrt {
namespace {

/* The probe run by the candidate python; one "ETRT:key=value" per line. */
const char* const kProbe =
    "import sys, sysconfig\n"
    "v = sysconfig.get_config_var\n"
    "out = ['version=%d.%d' % sys.version_info[:2], 'executable=' + sys.executable,\n"
    "       'shared=' + str(v('Py_ENABLE_SHARED'))]\n"
    "for k in ('LIBDIR', 'LDLIBRARY', 'INSTSONAME', 'MULTIARCH'):\n"
    "    out.append(k + '=' + str(v(k) or ''))\n"
    "out += ['path=' + p for p in sys.path if p]\n"
    "print('\\n'.join('ETRT:' + l for l in out))\n";

std::string dirname_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) {
    return ".";
  }
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string basename_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/* Not a directory. (No stat(): glibc 2.33 gave it a new symbol version,
 * newer than what libexecutorch.so needs.) */
bool is_not_directory(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir != nullptr) {
    ::closedir(dir);
    return false;
  }
  return true;
}

bool is_executable_file(const std::string& path) {
  return ::access(path.c_str(), X_OK) == 0 && is_not_directory(path);
}

bool is_file(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0 && is_not_directory(path);
}

/* 'x' -> a single-quoted shell word. */
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

/* An executable python at <prefix>/bin of the environment whose
 * <prefix>/lib/pythonX.Y/site-packages holds the adapter; "" with the paths
 * tried in *tried otherwise. */
std::string environment_python(const std::string& site_packages, std::string* tried) {
  const std::string version = python_version_of(site_packages);
  if (version.empty()) {
    return "";
  }
  const std::string prefix = dirname_of(dirname_of(dirname_of(site_packages)));
  for (const std::string& name : {"python" + version, std::string("python3"), std::string("python")}) {
    const std::string candidate = prefix + "/bin/" + name;
    if (is_executable_file(candidate)) {
      return candidate;
    }
    *tried += (tried->empty() ? "" : ", ") + candidate;
  }
  return "";
}

} // namespace

std::string real_path(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) != nullptr) {
    return buf;
  }
  return path;
}

std::string site_packages_of(const std::string& adapter) {
  const std::string lib_dir = dirname_of(adapter);
  const std::string pkg_dir = dirname_of(lib_dir);
  if (basename_of(lib_dir) != "lib" || basename_of(pkg_dir) != "executorch_tensorrt") {
    return "";
  }
  return dirname_of(pkg_dir);
}

std::string python_version_of(const std::string& site_packages) {
  if (site_packages.empty() || basename_of(site_packages) != "site-packages") {
    return "";
  }
  const std::string py = basename_of(dirname_of(site_packages));
  if (py.rfind("python", 0) != 0 || py.size() <= 6) {
    return "";
  }
  return py.substr(6);
}

bool choose_python(const std::string& site_packages, PythonChoice* out, std::string* error) {
  const char* env = std::getenv(kPythonEnv);
  if (env != nullptr && env[0] != '\0') {
    std::string path = env;
    if (path.find('/') == std::string::npos) {
      *error = std::string(kPythonEnv) + "=" + path + " is a name, not a path; the adapter "
          "never searches PATH for Python. Set it to the path of the python executable of the "
          "environment executorch-tensorrt is installed in";
      return false;
    }
    if (path[0] != '/') {
      char cwd[PATH_MAX];
      if (::getcwd(cwd, sizeof(cwd)) != nullptr) {
        path = std::string(cwd) + "/" + path;
      }
    }
    if (!is_executable_file(path)) {
      *error = std::string(kPythonEnv) + "=" + env +
          " is not an executable file; point it at the python executable of the "
          "environment executorch-tensorrt is installed in";
      return false;
    }
    *out = {path, std::string("set by ") + kPythonEnv};
    return true;
  }
  std::string tried;
  const std::string python = environment_python(site_packages, &tried);
  if (!python.empty()) {
    *out = {python, "the interpreter of the environment that holds " + site_packages};
    return true;
  }
  std::string where;
  if (site_packages.empty()) {
    where = "the adapter is not installed in a Python environment (it is not at "
            "<prefix>/lib/pythonX.Y/site-packages/executorch_tensorrt/lib/)";
  } else if (tried.empty()) {
    where = "the adapter's site-packages " + site_packages +
        " is not <prefix>/lib/pythonX.Y/site-packages, so its interpreter is unknown";
  } else {
    where = "the environment that holds the adapter (" + site_packages +
        ") has no python executable (tried " + tried + ")";
  }
  *error = std::string("no Python interpreter to embed: ") + kPythonEnv + " is not set and " +
      where + ". Set " + kPythonEnv + "=/path/to/python of the environment executorch-tensorrt "
      "is installed in (the adapter never searches PATH)";
  return false;
}

bool run_probe(const std::string& python, Probe* probe, std::string* error) {
  const std::string command = shell_quote(python) + " -c " + shell_quote(kProbe) + " 2>&1";
  std::fflush(nullptr);
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *error = "could not run " + python + " to ask where its libpython is";
    return false;
  }
  std::string output;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) {
    output.append(buf, n);
  }
  const int status = ::pclose(pipe);
  size_t start = 0;
  while (start < output.size()) {
    size_t end = output.find('\n', start);
    if (end == std::string::npos) {
      end = output.size();
    }
    const std::string line = output.substr(start, end - start);
    start = end + 1;
    if (line.rfind("ETRT:", 0) != 0) {
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) {
      continue;
    }
    const std::string key = line.substr(5, eq - 5);
    const std::string value = line.substr(eq + 1);
    if (key == "version") probe->version = value;
    else if (key == "executable") probe->executable = value;
    else if (key == "shared") probe->shared = value;
    else if (key == "LIBDIR") probe->libdir = value;
    else if (key == "LDLIBRARY") probe->ldlibrary = value;
    else if (key == "INSTSONAME") probe->instsoname = value;
    else if (key == "MULTIARCH") probe->multiarch = value;
    else if (key == "path") probe->paths.push_back(value);
  }
  if (probe->version.empty()) {
    if (output.size() > 1500) {
      output = "..." + output.substr(output.size() - 1500);
    }
    char code[32];
    std::snprintf(code, sizeof(code), "%d", status);
    *error = "running " + python + " to ask where its libpython is failed (status " +
        code + "): " + output;
    return false;
  }
  return true;
}

std::string find_libpython(const std::string& python, const Probe& probe, std::string* error) {
  if (probe.shared != "1") {
    *error = python + " (Python " + probe.version +
        ") has no shared libpython (sysconfig Py_ENABLE_SHARED=" + probe.shared +
        ", LDLIBRARY=" + probe.ldlibrary +
        "), which the embedded interpreter needs. Use a Python built with "
        "--enable-shared (distribution packages are; for pyenv: "
        "PYTHON_CONFIGURE_OPTS=--enable-shared pyenv install <version>), install "
        "executorch-tensorrt into an environment made from it, and point " +
        std::string(kPythonEnv) + " at that environment's python";
    return "";
  }
  std::vector<std::string> names;
  for (const std::string& name : {probe.instsoname, probe.ldlibrary}) {
    if (!name.empty() && name.find(".so") != std::string::npos) {
      names.push_back(name);
    }
  }
  std::vector<std::string> tried;
  for (const std::string& name : names) {
    for (const std::string& dir :
         {probe.libdir, probe.multiarch.empty() ? std::string() : probe.libdir + "/" + probe.multiarch}) {
      if (dir.empty()) {
        continue;
      }
      const std::string candidate = dir + "/" + name;
      tried.push_back(candidate);
      if (is_file(candidate)) {
        return candidate;
      }
    }
  }
  // Let the loader search (ld.so.cache, LD_LIBRARY_PATH) by soname.
  if (!probe.instsoname.empty()) {
    return probe.instsoname;
  }
  std::string list;
  for (const auto& t : tried) {
    list += (list.empty() ? "" : ", ") + t;
  }
  *error = python + " reports a shared libpython but none of [" + list + "] exists";
  return "";
}

} // namespace etrt
