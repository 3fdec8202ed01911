"""The embedded Python interpreter (native/src/embedded/embedded_python.cpp,
src/executorch_tensorrt/runtime/embedded.py, docs/cpp.md).

A C++ consumer built against the installed packages (no libpython linked)
asks TensorRTBackend whether it is available, which makes the adapter start
the interpreter. Success paths: the interpreter found from the adapter's own
environment, an adapter copy deployed outside site-packages, two threads
loading and running a program at once (one-time start). Failure paths: each
way the start can fail gives a clear cause through etrt_last_error() and
stderr. Every case runs for real; nothing is mocked.

Not covered here: a Python without a shared libpython. Every Python on the
development machines has one (pyenv builds there use --enable-shared, and
Debian's python3 ships libpython3.11.so.1.0), so that message is unexercised.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_cmake_package import (ADAPTER, child_env, cmake_for, configure_and_build,
                                package_root, prefix_path_args)

CMAKE = """\
cmake_minimum_required(VERSION 3.25)
project(etrt_embedded_consumer LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(Threads REQUIRED)
find_package(executorch REQUIRED)
find_package(executorch_tensorrt REQUIRED)
add_executable(consumer main.cpp)
target_link_libraries(consumer PRIVATE executorch_tensorrt::backend ${EXECUTORCH_LIBRARIES}
                      Threads::Threads)
"""

MAIN = r"""
#include <executorch/extension/module/module.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/platform/runtime.h>
#include <executorch_tensorrt/executor_table.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace rt = executorch::runtime;
using executorch::extension::Module;

// "available": asks the backend (this starts the embedded interpreter).
int available() {
  rt::BackendInterface* b = rt::get_backend_class("TensorRTBackend");
  if (b == nullptr) { std::printf("not registered\n"); return 4; }
  const bool ok = b->is_available();
  std::printf("available=%d\nlast_error=%s\n", ok ? 1 : 0, etrt_last_error());
  return 0;
}

// One thread: load the program and run forward with float inputs of 1.0.
std::string run_once(const char* path) {
  Module module(path);
  if (module.load_method("forward") != rt::Error::Ok) return std::string("load failed: ") + etrt_last_error();
  auto meta = module.method_meta("forward");
  std::vector<std::vector<float>> data;
  std::vector<std::vector<int32_t>> sizes;
  std::vector<std::vector<uint8_t>> orders;
  std::vector<std::unique_ptr<rt::etensor::TensorImpl>> impls;
  std::vector<rt::EValue> inputs;
  data.reserve(meta->num_inputs()); sizes.reserve(meta->num_inputs()); orders.reserve(meta->num_inputs());
  for (size_t i = 0; i < meta->num_inputs(); ++i) {
    auto info = meta->input_tensor_meta(i);
    if (info->scalar_type() != executorch::aten::ScalarType::Float) return "non-float input";
    sizes.emplace_back(info->sizes().begin(), info->sizes().end());
    orders.emplace_back(info->dim_order().begin(), info->dim_order().end());
    size_t n = 1;
    for (auto s : sizes.back()) n *= s;
    data.emplace_back(n, 1.0f);
    impls.emplace_back(new rt::etensor::TensorImpl(executorch::aten::ScalarType::Float,
        sizes.back().size(), sizes.back().data(), data.back().data(), orders.back().data()));
    inputs.emplace_back(rt::etensor::Tensor(impls.back().get()));
  }
  auto out = module.execute("forward", inputs);
  if (!out.ok()) return std::string("execute failed: ") + etrt_last_error();
  const auto& t = (*out)[0].toTensor();
  std::string line = "  values: ";
  for (ssize_t k = 0; k < t.numel() && k < 8; ++k) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%s%.4f", k ? ", " : "", t.const_data_ptr<float>()[k]);
    line += buf;
  }
  return line;
}

int main(int argc, char** argv) {
  rt::runtime_init();
  if (argc >= 2 && std::strcmp(argv[1], "available") == 0) return available();
  if (argc >= 4 && std::strcmp(argv[1], "threads") == 0) {
    const int n = std::atoi(argv[3]);
    std::vector<std::string> results(n);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) threads.emplace_back([&, i] { results[i] = run_once(argv[2]); });
    for (auto& t : threads) t.join();
    for (int i = 0; i < n; ++i) std::printf("thread %d%s\n", i, results[i].c_str());
    return 0;
  }
  std::fprintf(stderr, "usage: consumer available | threads <pte> <n>\n");
  return 2;
}
"""


@pytest.fixture(scope="module")
def consumer(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("embedded-consumer")
    src = base / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(CMAKE)
    (src / "main.cpp").write_text(MAIN)
    configure_and_build(cmake_for("variables"), src, base / "build", *prefix_path_args())
    return base / "build" / "consumer"


def available(consumer: Path, cwd: Path | None = None, **env: str) -> tuple[bool, str, str]:
    proc = subprocess.run([str(consumer), "available"], capture_output=True, text=True,
                          env=child_env(**env), cwd=cwd, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    return lines["available"] == "1", lines["last_error"], proc.stderr


def deploy_copy(directory: Path) -> Path:
    """The adapter copied outside any site-packages; LD_LIBRARY_PATH selects it."""
    directory.mkdir(parents=True, exist_ok=True)
    copy = directory / ADAPTER
    shutil.copy2(package_root() / "lib" / ADAPTER, copy)
    return copy


NOT_AVAILABLE = "[executorch_tensorrt] TensorRTBackend is not available: no executor installed: "


# ---- success ---------------------------------------------------------------


def test_starts_from_the_adapters_environment(consumer):
    """No EXECUTORCH_TENSORRT_PYTHON and no python3 on PATH: the interpreter of
    the environment whose site-packages holds the adapter is used."""
    ok, err, stderr = available(consumer, PATH="/nonexistent")
    assert ok, (err, stderr)


def test_deployed_adapter_copy(consumer, tmp_path):
    """An adapter outside site-packages: Python loads that same file (the
    running one), registers nothing twice and installs the executors into it."""
    copy = deploy_copy(tmp_path / "deploy")
    ok, err, stderr = available(consumer, LD_LIBRARY_PATH=str(copy.parent),
                                EXECUTORCH_TENSORRT_PYTHON=sys.executable)
    assert ok, (err, stderr)


def test_concurrent_first_use_from_threads(consumer, exported):
    """Two threads load and run a TensorRT program at once: one interpreter
    start, both get the executors, both match the Python runner."""
    _, _, cnn = exported("cnn")
    env = child_env(EXECUTORCH_TENSORRT_FALLBACK="onnxruntime")
    py = subprocess.run([sys.executable, "-m", "executorch_tensorrt.cli", "run", str(cnn),
                         "--fill", "ones"],  # the consumer feeds 1.0
                        capture_output=True, text=True, env=env, timeout=300)
    assert py.returncode == 0, py.stderr
    expected = [l for l in py.stdout.splitlines() if l.startswith("  values: ")][0]
    proc = subprocess.run([str(consumer), "threads", str(cnn), "2"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [f"thread 0{expected}", f"thread 1{expected}"], \
        (proc.stdout, proc.stderr)


# ---- failures: a clear cause in etrt_last_error() and on stderr ----------------


def test_python_env_not_executable(consumer, tmp_path):
    missing = tmp_path / "no-python"
    ok, err, stderr = available(consumer, EXECUTORCH_TENSORRT_PYTHON=str(missing))
    assert not ok
    assert err == f"no executor installed: EXECUTORCH_TENSORRT_PYTHON={missing} is not an " \
                  "executable file; point it at the python executable of the environment " \
                  "executorch-tensorrt is installed in", err
    assert NOT_AVAILABLE + f"EXECUTORCH_TENSORRT_PYTHON={missing}" in stderr, stderr


def test_no_python_found(consumer, tmp_path):
    copy = deploy_copy(tmp_path / "deploy")
    ok, err, _ = available(consumer, LD_LIBRARY_PATH=str(copy.parent), PATH=str(tmp_path))
    assert not ok
    assert "no Python interpreter to embed: EXECUTORCH_TENSORRT_PYTHON is not set and the " \
        "adapter is not installed in a Python environment" in err, err
    assert "never searches PATH" in err, err


def _fake_python(directory: Path) -> Path:
    """An executable called python3 that leaves a mark if anything runs it."""
    marker = directory / "fake-python-ran"
    fake = directory / "python3"
    fake.write_text(f"#!/bin/sh\necho ran > '{marker}'\nexit 1\n")  # no PATH needed
    fake.chmod(0o755)
    return marker


def test_path_is_never_searched(consumer, tmp_path):
    """PATH with an empty entry (the current directory) and a python3 there:
    the adapter outside any environment must not run it, whether it looks on
    its own or is given the bare name."""
    work = tmp_path / "cwd"
    work.mkdir()
    marker = _fake_python(work)
    copy = deploy_copy(tmp_path / "deploy")
    ok, err, _ = available(consumer, cwd=work, LD_LIBRARY_PATH=str(copy.parent),
                           PATH=f":{tmp_path / 'nonexistent'}")
    assert not ok and "no Python interpreter to embed" in err, err
    ok, err, _ = available(consumer, cwd=work, LD_LIBRARY_PATH=str(copy.parent),
                           PATH=":", EXECUTORCH_TENSORRT_PYTHON="python3")
    assert not ok
    assert "EXECUTORCH_TENSORRT_PYTHON=python3 is a name, not a path" in err, err
    assert not marker.exists(), "the adapter ran python3 found through PATH"


def test_package_not_importable(consumer, tmp_path):
    """A real Python environment without executorch-tensorrt."""
    venv = tmp_path / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    copy = deploy_copy(tmp_path / "deploy")
    ok, err, stderr = available(consumer, LD_LIBRARY_PATH=str(copy.parent),
                                EXECUTORCH_TENSORRT_PYTHON=str(venv / "bin" / "python"))
    assert not ok
    assert "the embedded Python interpreter" in err, err
    assert "cannot import executorch_tensorrt" in err, err
    assert "Install executorch-tensorrt into that Python's environment" in err, err
    assert NOT_AVAILABLE in stderr, stderr


def test_python_version_mismatch(consumer, tmp_path):
    """The adapter sits in a pythonX.Y site-packages whose environment's python
    is another version: the error names both and the setting to use."""
    env = tmp_path / "env"
    copy = deploy_copy(env / "lib" / "python3.99" / "site-packages" / "executorch_tensorrt" / "lib")
    (env / "bin").mkdir()
    (env / "bin" / "python3.99").symlink_to(sys.executable)
    ok, err, _ = available(consumer, LD_LIBRARY_PATH=str(copy.parent), PATH="/nonexistent")
    assert not ok
    assert "executorch_tensorrt is installed for Python 3.99 in" in err, err
    assert f"{env / 'bin' / 'python3.99'} (the interpreter of the environment that holds" in err, err
    assert "set EXECUTORCH_TENSORRT_PYTHON" in err, err


def test_environment_without_python(consumer, tmp_path):
    env = tmp_path / "env"
    copy = deploy_copy(env / "lib" / "python3.99" / "site-packages" / "executorch_tensorrt" / "lib")
    ok, err, _ = available(consumer, LD_LIBRARY_PATH=str(copy.parent), PATH="/nonexistent")
    assert not ok
    assert "has no python executable (tried " in err and f"{env}/bin/python3.99" in err, err


def test_skip_registration_set(consumer):
    ok, err, _ = available(consumer, EXECUTORCH_TENSORRT_SKIP_REGISTRATION="1")
    assert not ok
    assert "EXECUTORCH_TENSORRT_SKIP_REGISTRATION is set" in err, err


def test_embedded_python_disabled(consumer):
    ok, err, _ = available(consumer, EXECUTORCH_TENSORRT_EMBEDDED_PYTHON="0")
    assert not ok
    assert err.startswith("no executor installed: import executorch_tensorrt in Python"), err
