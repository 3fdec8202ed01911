"""The CMake package installed with the adapter (docs/cpp.md).

A consumer project is configured and built against the INSTALLED packages
(site-packages/executorch and site-packages/executorch_tensorrt) with both
routes of executorch's package: CMake 3.25 (variables only) and CMake >= 3.28
(imported targets). The consumer links with -Wl,--as-needed and references
no adapter symbol; running it shows TensorRTBackend registered. A second
executable linking the adapter by plain path is the control: --as-needed
drops it, so the test can tell the imported target's --no-as-needed apart.

The helpers here are shared with test_cpp_runner.py and test_embedded_python.py.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

import adapter_build
from helpers import child_env

REPO = adapter_build.REPO
ADAPTER = adapter_build.ADAPTER_FILENAME
ROUTES = ("variables", "targets")  # CMake < 3.28, CMake >= 3.28


# ---- helpers shared by the C++ consumer tests ----------------------------


def executorch_root() -> Path:
    """site-packages/executorch of the environment the tests run in."""
    spec = importlib.util.find_spec("executorch")
    for p in spec.submodule_search_locations:
        if (Path(p) / "version.py").exists():
            return Path(p)
    raise AssertionError("executorch is not installed")


def package_root() -> Path:
    """site-packages/executorch_tensorrt (the installed package, not src/)."""
    spec = importlib.util.find_spec("executorch_tensorrt")
    root = Path(next(iter(spec.submodule_search_locations)))
    assert (root / "lib" / ADAPTER).is_file(), (
        f"{root} has no lib/{ADAPTER}: the tests run against the installed package; "
        "run bash tools/setup.sh")
    return root


def project_version() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def cmake_for(route: str) -> str:
    """A CMake for the route (reuses test_native_build's lookup and pip cache)."""
    from test_native_build import _cmake_for

    return _cmake_for(route)


def cmake_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("CMAKE_")}


def configure(cmake: str, src: Path, build: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([cmake, "-S", str(src), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                           *args], capture_output=True, text=True, env=cmake_env())


def configure_and_build(cmake: str, src: Path, build: Path, *args: str) -> str:
    """Configures and builds; returns the configure log; fails the test with the output."""
    cfg = configure(cmake, src, build, *args)
    assert cfg.returncode == 0, f"configure failed:\n{cfg.stdout}\n{cfg.stderr}"
    bld = subprocess.run([cmake, "--build", str(build), "-j", str(os.cpu_count() or 2)],
                         capture_output=True, text=True, env=cmake_env())
    assert bld.returncode == 0, f"build failed:\n{bld.stdout}\n{bld.stderr}"
    return cfg.stdout + cfg.stderr


def prefix_path_args() -> list[str]:
    """The documented consumer setting: the two installed package roots."""
    return [f"-DCMAKE_PREFIX_PATH={executorch_root()};{package_root()}"]


def needed(binary: Path) -> list[str]:
    with open(binary, "rb") as f:
        elf = ELFFile(f)
        dyn = next(s for s in elf.iter_sections() if isinstance(s, DynamicSection))
        return [t.needed for t in dyn.iter_tags() if t.entry.d_tag == "DT_NEEDED"]


# ---- the consumer project ---------------------------------------------------

CONSUMER_CMAKE = """\
cmake_minimum_required(VERSION 3.25)
project(etrt_consumer LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(executorch REQUIRED)
find_package(executorch_tensorrt 0.1 REQUIRED)
file(WRITE "${CMAKE_BINARY_DIR}/found.txt"
     "version=${executorch_tensorrt_VERSION}\\nlibrary=${EXECUTORCH_TENSORRT_LIBRARY}\\n")

# What docs/cpp.md tells a consumer to write.
add_executable(consumer main.cpp)
target_link_libraries(consumer PRIVATE executorch_tensorrt::backend)

# Control: the adapter by plain path, without the imported target's
# --no-as-needed; --as-needed (CMAKE_EXE_LINKER_FLAGS) drops it.
add_executable(consumer_plain main.cpp)
target_include_directories(consumer_plain PRIVATE ${EXECUTORCH_INCLUDE_DIRS}
                           ${EXECUTORCH_TENSORRT_INCLUDE_DIRS})
target_compile_definitions(consumer_plain PRIVATE ${EXECUTORCH_COMPILE_DEFINITIONS})
target_link_libraries(consumer_plain PRIVATE "${EXECUTORCH_TENSORRT_LIBRARY}"
                      "${EXECUTORCH_RUNTIME_LIBRARY_DIR}/libexecutorch.so"
                      "${EXECUTORCH_RUNTIME_LIBRARY_DIR}/libexecutorch_threadpool.so")
"""

# References no adapter symbol: only ExecuTorch's registry.
CONSUMER_MAIN = """\
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/platform/runtime.h>
#include <executorch_tensorrt/executor_table.h>  // the package's include dir

#include <cstdio>

static_assert(ETRT_EXECUTOR_ABI_VERSION >= 1, "executor_table.h from the package");

int main() {
  executorch::runtime::runtime_init();
  namespace rt = executorch::runtime;
  std::printf("backends:");
  for (size_t i = 0; i < rt::get_num_registered_backends(); ++i) {
    auto name = rt::get_backend_name(i);
    std::printf(" %s", name.ok() ? name.get() : "?");
  }
  const bool registered = rt::get_backend_class("TensorRTBackend") != nullptr;
  std::printf("\\nregistered=%d\\n", registered ? 1 : 0);
  return registered ? 0 : 3;
}
"""


def write_consumer(dst: Path, cmake_text: str = CONSUMER_CMAKE) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "CMakeLists.txt").write_text(cmake_text)
    (dst / "main.cpp").write_text(CONSUMER_MAIN)
    return dst


_consumers: dict = {}


@pytest.fixture(scope="module", params=ROUTES)
def consumer(request, tmp_path_factory):
    route = request.param
    if route not in _consumers:
        cmake = cmake_for(route)
        base = tmp_path_factory.mktemp(f"consumer-{route}")
        src = write_consumer(base / "src")
        log = configure_and_build(cmake, src, base / "build", *prefix_path_args(),
                                  "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed")
        _consumers[route] = (route, base / "build", log)
    return _consumers[route]


# ---- tests ---------------------------------------------------------------


def test_package_files_installed():
    cmake_dir = package_root() / "lib" / "cmake" / "executorch_tensorrt"
    assert (cmake_dir / "executorch_tensorrtConfig.cmake").is_file()
    assert (cmake_dir / "executorch_tensorrtConfigVersion.cmake").is_file()
    assert (package_root() / "include" / "executorch_tensorrt" / "executor_table.h").is_file()


def test_consumer_route_and_version(consumer):
    route, build, log = consumer
    # executorch's own package says which route it took.
    if route == "variables":
        assert "imported targets need CMake 3.28" in log, log
    else:
        assert "ExecuTorch runtime found at" in log, log
    found = dict(line.split("=", 1) for line in (build / "found.txt").read_text().splitlines())
    assert found["version"] == project_version() == "0.1.0"
    assert Path(found["library"]).resolve() == (package_root() / "lib" / ADAPTER).resolve()


def test_consumer_with_as_needed_registers_backend(consumer):
    _, build, _ = consumer
    exe = build / "consumer"
    assert ADAPTER in needed(exe), needed(exe)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, env=child_env(), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "registered=1" in proc.stdout
    assert "TensorRTBackend" in proc.stdout.split("backends:", 1)[1].splitlines()[0].split()


def test_plain_link_under_as_needed_drops_adapter(consumer):
    """The control: without --no-as-needed the adapter never registers."""
    _, build, _ = consumer
    exe = build / "consumer_plain"
    assert ADAPTER not in needed(exe), needed(exe)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, env=child_env(), timeout=60)
    assert proc.returncode == 3 and "registered=0" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("route", ROUTES)
def test_package_dirs_and_sibling_executorch(route, tmp_path):
    """executorch_tensorrt_DIR alone: the package finds executorch beside it
    (same site-packages) when the consumer did not call find_package(executorch)."""
    cmake = cmake_for(route)
    text = CONSUMER_CMAKE.replace("find_package(executorch REQUIRED)\n", "")
    text = text[:text.index("# Control:")]
    src = write_consumer(tmp_path / "src", text)
    cmake_dir = package_root() / "lib" / "cmake" / "executorch_tensorrt"
    configure_and_build(cmake, src, tmp_path / "build", f"-Dexecutorch_tensorrt_DIR={cmake_dir}",
                        "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed")
    proc = subprocess.run([str(tmp_path / "build" / "consumer")], capture_output=True, text=True,
                          env=child_env(), timeout=60)
    assert proc.returncode == 0 and "registered=1" in proc.stdout, proc.stdout + proc.stderr


def test_version_requests(tmp_path):
    cmake = cmake_for("variables")
    for request, ok in (("0.1", True), ("0.1.0 EXACT", True), ("0.2", False), ("1.0", False)):
        text = (f"cmake_minimum_required(VERSION 3.25)\nproject(v LANGUAGES CXX)\n"
                f"find_package(executorch REQUIRED)\nfind_package(executorch_tensorrt {request} REQUIRED)\n")
        src = tmp_path / request.replace(" ", "_")
        src.mkdir()
        (src / "CMakeLists.txt").write_text(text)
        proc = configure(cmake, src, src / "build", *prefix_path_args())
        assert (proc.returncode == 0) == ok, (request, proc.stdout, proc.stderr)


@pytest.mark.parametrize("route", ROUTES)
def test_missing_library_fails_configure(route, tmp_path):
    """A package whose adapter file is gone: FATAL_ERROR naming the file and the fix."""
    cmake = cmake_for(route)
    site = tmp_path / "site-packages"
    broken = site / "executorch_tensorrt"
    shutil.copytree(package_root() / "lib" / "cmake", broken / "lib" / "cmake")
    shutil.copytree(package_root() / "include", broken / "include")
    (site / "executorch").symlink_to(executorch_root(), target_is_directory=True)
    src = write_consumer(tmp_path / "src")
    proc = configure(cmake, src, tmp_path / "build",
                     f"-DCMAKE_PREFIX_PATH={site / 'executorch'};{broken}")
    assert proc.returncode != 0, proc.stdout
    err = " ".join(proc.stderr.split())  # CMake wraps long messages
    assert f"the TensorRT adapter {broken / 'lib' / ADAPTER} does not exist" in err, proc.stderr
    assert "pip install --force-reinstall executorch-tensorrt" in err, proc.stderr
