/*
 * The embedded Python interpreter (see embedded_python.h and docs/cpp.md).
 *
 * Which Python and which libpython: python_location.h.
 *
 * libpython is dlopened RTLD_GLOBAL (extension modules resolve Py* from the
 * global scope); every API function is looked up with dlsym. Only functions
 * that exist with the same signature in every CPython 3.x are used, so one
 * adapter serves any Python version.
 */
#include "embedded_python.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <cwchar>
#include <string>

#include "dl_symver.h"
#include "python_location.h"

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
