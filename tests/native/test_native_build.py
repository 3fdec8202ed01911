"""The adapter builds with both CMake routes of the executorch wheel's package
and has the ELF properties the wheel relies on.

- CMake < 3.28: the package only sets variables (EXECUTORCH_*).
- CMake >= 3.28: it also defines executorch::* imported targets.

Each route needs a CMake of that age. The one on PATH covers one route; the
other comes from ETRT_TEST_CMAKE_OLD / ETRT_TEST_CMAKE_NEW if set, else is
pip-installed once into a cached venv under the temp directory (needs PyPI).
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
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection
from packaging.version import Version

import adapter_build

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


def _elf_facts(path: Path) -> dict:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        dyn = next(s for s in elf.iter_sections() if isinstance(s, DynamicSection))
        tags: dict = {}
        for t in dyn.iter_tags():
            tags.setdefault(t.entry.d_tag, []).append(t)
        dynsym = elf.get_section_by_name(".dynsym")
        versym = next((s for s in elf.iter_sections() if isinstance(s, GNUVerSymSection)), None)
        verneed = next((s for s in elf.iter_sections() if isinstance(s, GNUVerNeedSection)), None)
        needed_versions = []
        if verneed is not None:
            for _, auxes in verneed.iter_versions():
                needed_versions += [a.name for a in auxes]
        defined, undefined = set(), {}
        for i, sym in enumerate(dynsym.iter_symbols()):
            if not sym.name:
                continue
            if sym["st_shndx"] == "SHN_UNDEF":
                version = None
                if versym is not None:
                    v = versym.get_symbol(i)["ndx"]
                    version = None if v in ("VER_NDX_LOCAL", "VER_NDX_GLOBAL") else v
                undefined[sym.name] = (version, sym["st_info"]["bind"])
            elif sym["st_info"]["bind"] != "STB_LOCAL":
                defined.add(sym.name)
        return {
            "soname": [t.soname for t in tags.get("DT_SONAME", [])],
            "runpath": [t.runpath for t in tags.get("DT_RUNPATH", [])],
            "rpath": [t.rpath for t in tags.get("DT_RPATH", [])],
            "needed": [t.needed for t in tags.get("DT_NEEDED", [])],
            "versions": needed_versions,
            "defined": defined,
            "undefined": undefined,
        }


def _max_versions(names) -> dict:
    best: dict = {}
    for n in names:
        m = re.fullmatch(r"(GLIBC|GLIBCXX|CXXABI|GCC)_([\d.]+)", n)
        if m:
            fam, ver = m.group(1), Version(m.group(2))
            best[fam] = max(best.get(fam, ver), ver)
    return best


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


def test_soname_and_runpath(route_build):
    _, built = route_build
    facts = _elf_facts(built.adapter)
    assert facts["soname"] == [built.adapter.name]
    assert facts["rpath"] == [], "DT_RPATH must not be used (DT_RUNPATH only)"
    assert facts["runpath"] == ["$ORIGIN/../../executorch/lib"]
    assert "libexecutorch.so" in facts["needed"]
    # Nothing else from the wheel is linked (not the aggregate component list).
    assert not [n for n in facts["needed"] if n.startswith("libexecutorch_")], facts["needed"]


def test_exports_exactly_the_c_api(route_build):
    _, built = route_build
    facts = _elf_facts(built.adapter)
    code = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    declared = set(re.findall(r"\b(etrt_\w+)\s*\(", code))
    assert declared, "no functions found in the header"
    assert facts["defined"] == declared
    assert not any(s.startswith("PyInit_") for s in facts["defined"] | set(facts["undefined"]))


def test_register_backend_is_imported(route_build):
    _, built = route_build
    facts = _elf_facts(built.adapter)
    imported = [s for s in facts["undefined"] if "register_backend" in s]
    assert imported, "register_backend is not imported from libexecutorch.so"
    assert not [s for s in facts["defined"] if "register_backend" in s]


def test_symbol_versions_not_newer_than_libexecutorch(route_build):
    _, built = route_build
    ours = _max_versions(_elf_facts(built.adapter)["versions"])
    theirs_facts = _elf_facts(_libexecutorch())
    theirs = _max_versions(theirs_facts["versions"])
    for fam, ver in ours.items():
        assert fam in theirs and ver <= theirs[fam], (fam, str(ver), {k: str(v) for k, v in theirs.items()})
    # Every unversioned undefined symbol must come from libexecutorch.so (the
    # C/C++ runtimes' symbols are all versioned; an unversioned one would
    # bind to whatever version the loader finds).
    exec_defined = theirs_facts["defined"]
    unversioned = {s for s, (v, bind) in _elf_facts(built.adapter)["undefined"].items()
                   if v is None and bind != "STB_WEAK"}
    assert unversioned <= exec_defined, sorted(unversioned - exec_defined)


def test_build_info_matches_wheel(route_build):
    _, built = route_build
    import executorch.version as v

    data = built.adapter.read_bytes()
    marker = f"etrt-build-info:executorch_version={v.__version__};executorch_git_version={v.git_version};"
    assert marker.encode() in data


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
    assert _elf_facts(installed)["runpath"] == ["$ORIGIN/../../executorch/lib"]
    (site / "executorch").symlink_to(_libexecutorch().parents[1], target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    code = ("import ctypes; lib = ctypes.CDLL(%r); lib.etrt_registration_message.restype = "
            "ctypes.c_char_p; print(lib.etrt_registration_status(), "
            "lib.etrt_registration_message().decode())" % str(installed))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("0 TensorRTBackend registered by"), proc.stdout
