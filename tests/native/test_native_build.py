"""The adapter builds with both CMake routes of the executorch wheel's package
and obeys the ELF rules the wheel relies on.

- CMake < 3.28: the package only sets variables (EXECUTORCH_*).
- CMake >= 3.28: it also defines executorch::* imported targets.

Each route needs a CMake of that age. The one on PATH covers one route; the
other comes from ETRT_TEST_CMAKE_OLD / ETRT_TEST_CMAKE_NEW if set, else is
pip-installed once into a cached venv under the temp directory (needs PyPI).

The ELF rules (SONAME, RUNPATH, register_backend imported, no PyInit_,
symbol versions) are checked by tools/release/wheel_checks.py, the checker the wheel
tests use, so there is one statement of them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from packaging.version import Version

import adapter_build

sys.path.insert(0, str(adapter_build.REPO / "tools" / "release"))
import wheel_checks  # noqa: E402

HEADER = adapter_build.NATIVE / "include" / "executorch_tensorrt" / "executor_table.h"
ROUTES = {"variables": ("3.25", "<"), "targets": ("3.28", ">=")}
PIP_CMAKE = {"variables": "cmake==3.25.*", "targets": "cmake==3.31.*"}


def _cmake_version(cmake: str) -> Version:
    out = subprocess.run([cmake, "--version"], capture_output=True, text=True, check=True).stdout
    return Version(re.search(r"cmake version (\d+\.\d+\.\d+)", out).group(1))


def _fits(route: str, version: Version) -> bool:
    return version < Version("3.28") if route == "variables" else version >= Version("3.28")


def _cmake_for(route: str) -> str:
    env = os.environ.get("ETRT_TEST_CMAKE_OLD" if route == "variables" else "ETRT_TEST_CMAKE_NEW")
    candidates = [env] if env else []
    candidates += [shutil.which("cmake"), "/usr/bin/cmake", "/usr/local/bin/cmake"]
    for c in candidates:
        if c and Path(c).exists() and _fits(route, _cmake_version(c)):
            return c
    venv = Path(tempfile.gettempdir()) / f"etrt-test-{PIP_CMAKE[route].replace('=', '').replace('*', 'x')}"
    cmake = venv / "bin" / "cmake"
    if not cmake.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", PIP_CMAKE[route]],
                             capture_output=True, text=True)
        if pip.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            pytest.fail(f"no CMake for the {route} route: none on PATH, and "
                        f"pip install {PIP_CMAKE[route]} failed:\n{pip.stderr[-2000:]}\n"
                        f"Set ETRT_TEST_CMAKE_{'OLD' if route == 'variables' else 'NEW'}.")
    return str(cmake)


_builds: dict = {}


@pytest.fixture(scope="module", params=sorted(ROUTES))
def route_build(request):
    route = request.param
    if route not in _builds:
        cmake = _cmake_for(route)
        if cmake == adapter_build.default_build().cmake:
            _builds[route] = adapter_build.default_build()
        else:
            _builds[route] = adapter_build.build(
                Path(tempfile.mkdtemp(prefix=f"etrt-{route}-")), cmake)
    return route, _builds[route]


def _libexecutorch() -> Path:
    import executorch

    for p in executorch.__path__:
        lib = Path(p) / "lib" / "libexecutorch.so"
        if lib.exists():
            return lib
    raise AssertionError("executorch/lib/libexecutorch.so not found")


def test_route_used(route_build):
    route, built = route_build
    expected = ("via package variables" if route == "variables"
                else "via imported target executorch::runtime")
    assert expected in built.configure_log, built.configure_log
    assert "C10_USING_CUSTOM_GENERATED_MACROS" in built.configure_log


def test_adapter_rules(route_build):
    """Every adapter rule of tools/release/wheel_checks.py, against the libexecutorch.so it loads beside."""
    _, built = route_build
    assert wheel_checks.check_adapter(built.adapter, _libexecutorch()) == []


def test_links_only_libexecutorch(route_build):
    # Nothing else from the wheel (not the package's aggregate component list).
    _, built = route_build
    needed = wheel_checks.read_elf(built.adapter).needed
    assert "libexecutorch.so" in needed
    assert not [n for n in needed if n.startswith("libexecutorch_")], needed


def test_exports_exactly_the_c_api(route_build):
    # executor_table.h and profiling.h (the separately versioned profiling ABI)
    text = "".join(h.read_text() for h in sorted(HEADER.parent.glob("*.h")))
    code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    declared = set(re.findall(r"\b(etrt_\w+)\s*\(", code))
    assert declared, "no functions found in the header"
    _, built = route_build
    assert wheel_checks.read_elf(built.adapter).defined == declared


def test_build_info_matches_wheel(route_build):
    import executorch.version as v

    _, built = route_build
    info = wheel_checks.read_elf(built.adapter)
    assert info.build_info == (v.__version__, v.git_version)


def test_install_layout_resolves_libexecutorch(tmp_path):
    """cmake --install into the wheel's layout; then a process that has not
    loaded executorch loads the adapter through its RUNPATH alone."""
    built = adapter_build.default_build()
    site = tmp_path / "site-packages"
    prefix = site / "executorch_tensorrt"
    subprocess.run([built.cmake, "--install", str(built.build_dir), "--prefix", str(prefix)],
                   check=True, capture_output=True)
    installed = prefix / "lib" / adapter_build.ADAPTER_FILENAME
    assert installed.is_file()
    assert (prefix / "include" / "executorch_tensorrt" / "executor_table.h").read_bytes() == \
        HEADER.read_bytes()
    profiling_header = HEADER.parent / "profiling.h"
    assert (prefix / "include" / "executorch_tensorrt" / "profiling.h").read_bytes() == \
        profiling_header.read_bytes()
    assert wheel_checks.check_runpath(wheel_checks.read_elf(installed)) == []
    (site / "executorch").symlink_to(_libexecutorch().parents[1], target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    code = ("import ctypes; lib = ctypes.CDLL(%r); lib.etrt_registration_message.restype = "
            "ctypes.c_char_p; print(lib.etrt_registration_status(), "
            "lib.etrt_registration_message().decode())" % str(installed))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("0 TensorRTBackend registered by"), proc.stdout
