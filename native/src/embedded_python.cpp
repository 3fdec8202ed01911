/*
 * The embedded Python interpreter (see embedded_python.h and docs/cpp.md).
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
 *
 * libpython is dlopened RTLD_GLOBAL (extension modules resolve Py* from the
 * global scope); every API function is looked up with dlsym. Only functions
 * that exist with the same signature in every CPython 3.x are used, so one
 * adapter serves any Python version.
 */
#include "embedded_python.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <cwchar>
#include <string>
#include <vector>

#include "dl_symver.h"

namespace etrt {
namespace {

/* Runs in the interpreter's fresh globals. The three _etrt_* inputs are set
 * by the caller; _etrt_error is the result ("" = success). Kept small: the
 * real work is in executorch_tensorrt.runtime.embedded. */
const char* const kBootstrap = R"PY(
def _etrt_bootstrap(adapter, site_packages, probe_paths):
    import os, sys
    # The probed interpreter's sys.path: normally identical already (the
    # program name points at that interpreter), kept as a safety net.
    for p in probe_paths.split("\n"):
        if p and p not in sys.path:
            sys.path.append(p)
    # The environment that holds this adapter comes first if it is missing.
    if site_packages and site_packages not in sys.path:
        sys.path.insert(0, site_packages)
    # The package loads its adapter through _native.load_adapter(); point it
    # at the file that is running, which the loader then finds already loaded
    # (same file: same handle, no second registration).
    key = "EXECUTORCH_TENSORRT_ADAPTER"
    old = os.environ.get(key)
    os.environ[key] = adapter
    try:
        import executorch_tensorrt.runtime.embedded as embedded
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old
    embedded.start(adapter)

try:
    _etrt_bootstrap(_etrt_adapter, _etrt_site_packages, _etrt_probe_paths)
    _etrt_error = ""
except BaseException as e:
    import sys, traceback
    if isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] == "executorch_tensorrt":
        _etrt_error = ("cannot import executorch_tensorrt (%s); sys.path is %r. Install "
                       "executorch-tensorrt into that Python's environment, or set "
                       "EXECUTORCH_TENSORRT_PYTHON to the python of the environment it is "
                       "installed in" % (e, sys.path))
    elif isinstance(e, ImportError):
        _etrt_error = "%s: %s" % (type(e).__name__, e)
    else:
        _etrt_error = "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc())
)PY";

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

std::string real_path(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) != nullptr) {
    return buf;
  }
  return path;
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

bool env_is_off(const char* value) {
  if (value == nullptr) {
    return false;
  }
  std::string v(value);
  for (auto& c : v) {
    c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  }
  return v == "0" || v == "off" || v == "false" || v == "no";
}

/* The site-packages that holds the adapter, if the adapter sits in the
 * installed layout <site>/executorch_tensorrt/lib/<lib>. */
std::string site_packages_of(const std::string& adapter) {
  const std::string lib_dir = dirname_of(adapter);
  const std::string pkg_dir = dirname_of(lib_dir);
  if (basename_of(lib_dir) != "lib" || basename_of(pkg_dir) != "executorch_tensorrt") {
    return "";
  }
  return dirname_of(pkg_dir);
}

/* "3.11" from <prefix>/lib/python3.11/site-packages, else "". */
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

struct PythonChoice {
  std::string executable;
  std::string why; // for messages: how it was chosen
};

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

/* Which Python to embed: the explicit setting, else the environment the
 * adapter is installed in. Never PATH: a search there (where an empty entry
 * means the current directory) could run any program called python3. */
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

struct Probe {
  std::string version, executable, shared, libdir, ldlibrary, instsoname, multiarch;
  std::vector<std::string> paths;
};

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

/* The shared libpython the probed interpreter was built with, or "" with *error. */
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

/* The subset of the CPython C API the bootstrap uses. */
struct PyApi {
  int (*IsInitialized)(void);
  void (*InitializeEx)(int);
  void (*SetProgramName)(const wchar_t*); // optional (deprecated in 3.11)
  wchar_t* (*DecodeLocale)(const char*, size_t*); // optional
  void* (*ImportAddModule)(const char*);
  void* (*DictNew)(void);
  int (*DictSetItemString)(void*, const char*, void*);
  void* (*DictGetItemString)(void*, const char*);
  void* (*UnicodeFromString)(const char*);
  const char* (*UnicodeAsUTF8)(void*);
  void* (*RunStringFlags)(const char*, int, void*, void*, void*);
  void (*DecRef)(void*);
  void (*ErrPrint)(void);
  void* (*EvalSaveThread)(void);
};

constexpr int kPyFileInput = 257; // Py_file_input, the same in every CPython 3

bool load_api(void* lib, PyApi* api, std::string* missing) {
  struct Entry {
    const char* name;
    void** slot;
    bool required;
  };
  const Entry entries[] = {
      {"Py_IsInitialized", reinterpret_cast<void**>(&api->IsInitialized), true},
      {"Py_InitializeEx", reinterpret_cast<void**>(&api->InitializeEx), true},
      {"Py_SetProgramName", reinterpret_cast<void**>(&api->SetProgramName), false},
      {"Py_DecodeLocale", reinterpret_cast<void**>(&api->DecodeLocale), false},
      {"PyImport_AddModule", reinterpret_cast<void**>(&api->ImportAddModule), true},
      {"PyDict_New", reinterpret_cast<void**>(&api->DictNew), true},
      {"PyDict_SetItemString", reinterpret_cast<void**>(&api->DictSetItemString), true},
      {"PyDict_GetItemString", reinterpret_cast<void**>(&api->DictGetItemString), true},
      {"PyUnicode_FromString", reinterpret_cast<void**>(&api->UnicodeFromString), true},
      {"PyUnicode_AsUTF8", reinterpret_cast<void**>(&api->UnicodeAsUTF8), true},
      {"PyRun_StringFlags", reinterpret_cast<void**>(&api->RunStringFlags), true},
      {"Py_DecRef", reinterpret_cast<void**>(&api->DecRef), true},
      {"PyErr_Print", reinterpret_cast<void**>(&api->ErrPrint), true},
      {"PyEval_SaveThread", reinterpret_cast<void**>(&api->EvalSaveThread), true},
  };
  for (const Entry& e : entries) {
    *e.slot = ::dlsym(lib, e.name);
    if (*e.slot == nullptr && e.required) {
      *missing = e.name;
      return false;
    }
  }
  return true;
}

bool set_str(const PyApi& api, void* dict, const char* key, const std::string& value) {
  void* s = api.UnicodeFromString(value.c_str());
  if (s == nullptr) {
    return false;
  }
  const int rc = api.DictSetItemString(dict, key, s);
  api.DecRef(s);
  return rc == 0;
}

} // namespace

EmbeddedStart start_embedded_python(const std::string& adapter_path, std::string* error) {
  if (env_is_off(std::getenv(kEmbeddedEnv))) {
    return EmbeddedStart::kNotApplicable;
  }
  // A Python process (or a C++ program that embeds Python itself): the
  // executors come from `import executorch_tensorrt` there, never from a
  // second interpreter.
  {
    auto is_init = reinterpret_cast<int (*)(void)>(::dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
    if (is_init != nullptr && is_init() != 0) {
      return EmbeddedStart::kNotApplicable;
    }
  }
  const std::string adapter = real_path(adapter_path);
  const std::string site_packages = site_packages_of(adapter);

  PythonChoice choice;
  if (!choose_python(site_packages, &choice, error)) {
    return EmbeddedStart::kFailed;
  }
  Probe probe;
  if (!run_probe(choice.executable, &probe, error)) {
    *error = "using " + choice.executable + " (" + choice.why + "): " + *error;
    return EmbeddedStart::kFailed;
  }
  const std::string where = choice.executable + " (" + choice.why + ", Python " + probe.version + ")";
  const std::string wanted = python_version_of(site_packages);
  if (!wanted.empty() && wanted != probe.version) {
    *error = "executorch_tensorrt is installed for Python " + wanted + " in " + site_packages +
        ", but the interpreter found is " + where + "; set " + kPythonEnv +
        " to the python of that environment";
    return EmbeddedStart::kFailed;
  }
  const std::string libpython = find_libpython(where, probe, error);
  if (libpython.empty()) {
    return EmbeddedStart::kFailed;
  }
  ::dlerror();
  void* lib = ::dlopen(libpython.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    *error = "could not load " + libpython + ", the libpython of " + where + ": " +
        (why != nullptr ? why : "unknown dlopen error");
    return EmbeddedStart::kFailed;
  }
  PyApi api{};
  std::string missing;
  if (!load_api(lib, &api, &missing)) {
    *error = libpython + " does not export " + missing + "; it is not a CPython 3 libpython";
    return EmbeddedStart::kFailed;
  }
  if (api.IsInitialized() != 0) {
    // Loaded and started by someone else between the check above and now.
    return EmbeddedStart::kNotApplicable;
  }
  // The program name makes the interpreter compute sys.prefix, the venv
  // (pyvenv.cfg) and sys.path exactly as that executable would.
  if (api.SetProgramName != nullptr && api.DecodeLocale != nullptr) {
    const std::string program = probe.executable.empty() ? choice.executable : probe.executable;
    wchar_t* name = api.DecodeLocale(program.c_str(), nullptr); // kept for the process lifetime
    if (name != nullptr) {
      api.SetProgramName(name);
    }
  }
  api.InitializeEx(0); // 0: leave the application's signal handlers alone

  std::string paths;
  for (const auto& p : probe.paths) {
    paths += p + "\n";
  }
  std::string result = "the bootstrap did not run";
  void* globals = api.DictNew();
  void* builtins = api.ImportAddModule("builtins"); // borrowed
  if (globals != nullptr && builtins != nullptr &&
      api.DictSetItemString(globals, "__builtins__", builtins) == 0 &&
      set_str(api, globals, "_etrt_adapter", adapter) &&
      set_str(api, globals, "_etrt_site_packages", site_packages) &&
      set_str(api, globals, "_etrt_probe_paths", paths)) {
    void* ret = api.RunStringFlags(kBootstrap, kPyFileInput, globals, globals, nullptr);
    if (ret == nullptr) {
      api.ErrPrint();
      result = "the bootstrap code raised (traceback above)";
    } else {
      api.DecRef(ret);
      void* err = api.DictGetItemString(globals, "_etrt_error"); // borrowed
      const char* text = err != nullptr ? api.UnicodeAsUTF8(err) : nullptr;
      result = text != nullptr ? text : "the bootstrap set no result";
    }
  } else {
    api.ErrPrint();
  }
  if (globals != nullptr) {
    api.DecRef(globals);
  }
  // Release the GIL: executor callbacks take it (PyGILState_Ensure) from
  // whatever thread ExecuTorch calls them on. The interpreter lives until
  // the process exits.
  api.EvalSaveThread();
  if (!result.empty()) {
    *error = "the embedded Python interpreter " + where + " with " + libpython +
        " could not install the executors: " + result;
    return EmbeddedStart::kFailed;
  }
  return EmbeddedStart::kStarted;
}

} // namespace etrt
