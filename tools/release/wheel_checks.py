"""Checks a built executorch-tensorrt wheel and the native adapter inside it.

    python tools/release/wheel_checks.py dist/executorch_tensorrt-*.whl
    python tools/release/wheel_checks.py path/to/libexecutorch_backend_tensorrt.so   # adapter rules only

Every check is a function returning a list of problems (empty: passed). Each
problem starts with the name of its rule ("soname: ...", "runpath: ..."), so a
test can build a library that breaks one rule and assert that exactly that
rule complains. The ELF is read with pyelftools (dynamic section, .dynsym,
.gnu.version and .gnu.version_r), never by grepping tool output.

The adapter rules (docs/packaging.md explains why each exists):

  soname          DT_SONAME equals the file name.
  runpath         DT_RUNPATH present, DT_RPATH absent, every entry relative to
                  $ORIGIN and resolving, in an installed layout, to the
                  executorch wheel's lib/ (site-packages/executorch_tensorrt/lib/
                  $ORIGIN/../../executorch/lib == site-packages/executorch/lib).
  needed          DT_NEEDED has libexecutorch.so and no libtorch, libc10 or libpython.
  register        register_backend is imported (undefined), never defined.
  pyinit          no PyInit_* symbol (the adapter is not a Python extension).
  versions        no GLIBC_/GLIBCXX_/CXXABI_/GCC_ version newer than the newest
                  one the reference libexecutorch.so itself requires.
  unversioned     no unversioned undefined symbol (C++ runtime ones above all)
                  that the reference libexecutorch.so does not define.
  machine         the adapter's ELF machine is the reference libexecutorch.so's
                  (a cross build checked against the target's executorch).
  build-info      the executorch version/commit recorded in the adapter (read by
                  the import-time ABI guard) equal the pins (pins.toml).

The wheel rules: name/tag (py3-none-manylinux_X_Y_<arch>, matching the ELF's
architecture and glibc needs), size (< 1 MB), contents (package files only,
the adapter exactly once, the public header, the CMake package when expected,
no tests/build dirs/bytecode, RECORD complete and correct), and the reference
libexecutorch.so being the pinned executorch's.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import importlib.util
import io
import posixpath
import re
import sys
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parents[2]  # tools/<role>/ -> the repository
PACKAGE = "executorch_tensorrt"
ADAPTER = "libexecutorch_backend_tensorrt.so"
ADAPTER_DIR = f"{PACKAGE}/lib"  # relative to site-packages
ADAPTER_IN_WHEEL = f"{ADAPTER_DIR}/{ADAPTER}"
HEADER_IN_WHEEL = f"{PACKAGE}/include/executorch_tensorrt/executor_table.h"
CMAKE_PACKAGE_DIR = f"{PACKAGE}/lib/cmake/executorch_tensorrt"
CMAKE_CONFIG_NAMES = ("executorch_tensorrt-config.cmake", "executorch_tensorrtConfig.cmake")
EXECUTORCH_LIB_DIR = "executorch/lib"  # relative to site-packages
LIBEXECUTORCH = "libexecutorch.so"
SIZE_BUDGET = 1_000_000  # bytes
VERSION_FAMILIES = ("GLIBC", "GLIBCXX", "CXXABI", "GCC")
FORBIDDEN_NEEDED = re.compile(r"^lib(torch|c10|python)", re.I)
# _ZN10executorch7runtime16register_backendERKNS0_7BackendE: the mangled
# name's length-prefixed identifier, whatever the namespace or signature.
REGISTER_BACKEND = re.compile(r"^_Z.*16register_backend[EI]")
BUILD_INFO = re.compile(
    rb"etrt-build-info:executorch_version=([^;\x00]*);executorch_git_version=([^;\x00]*);")
# Files a wheel must never carry (matched against each path component / suffix).
FORBIDDEN_PARTS = {"tests", "test", "__pycache__", "build", "_skbuild", "CMakeFiles", ".git",
                   "dist", ".pytest_cache"}
FORBIDDEN_SUFFIXES = (".pyc", ".pyo", ".o", ".a", ".obj")
FORBIDDEN_NAMES = {"CMakeCache.txt", "cmake_install.cmake", "install_manifest.txt", "Makefile",
                   "build.ninja", ".ninja_log"}
EM_TO_ARCH = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64", "EM_PPC64": "ppc64le",
              "EM_S390": "s390x", "EM_386": "i686"}


# --------------------------------------------------------------------------- ELF facts

@dataclass
class ElfInfo:
    path: Path
    machine: str
    soname: list[str] = field(default_factory=list)
    runpath: list[str] = field(default_factory=list)  # entries, split on ':'
    rpath: list[str] = field(default_factory=list)
    needed: list[str] = field(default_factory=list)
    # (file, version name) from .gnu.version_r
    version_needs: list[tuple[str, str]] = field(default_factory=list)
    # undefined symbol -> (version name or None, binding)
    undefined: dict[str, tuple[str | None, str]] = field(default_factory=dict)
    defined: set[str] = field(default_factory=set)  # global/weak definitions
    build_info: tuple[str, str] | None = None

    def symbols_needing(self, version: str) -> list[str]:
        return sorted(s for s, (v, _) in self.undefined.items() if v == version)


def read_elf(path: Path | str) -> ElfInfo:
    """Reads the dynamic-linking facts of a shared library."""
    path = Path(path)
    data = path.read_bytes()
    elf = ELFFile(io.BytesIO(data))
    info = ElfInfo(path, elf["e_machine"])
    dyn = next((s for s in elf.iter_sections() if isinstance(s, DynamicSection)), None)
    if dyn is not None:
        for tag in dyn.iter_tags():
            kind = tag.entry.d_tag
            if kind == "DT_SONAME":
                info.soname.append(tag.soname)
            elif kind == "DT_RUNPATH":
                info.runpath += tag.runpath.split(":")
            elif kind == "DT_RPATH":
                info.rpath += tag.rpath.split(":")
            elif kind == "DT_NEEDED":
                info.needed.append(tag.needed)
    index_to_version: dict[int, str] = {}
    verneed = next((s for s in elf.iter_sections() if isinstance(s, GNUVerNeedSection)), None)
    if verneed is not None:
        for vn, auxes in verneed.iter_versions():
            for aux in auxes:
                info.version_needs.append((vn.name, aux.name))
                index_to_version[aux["vna_other"]] = aux.name
    versym = next((s for s in elf.iter_sections() if isinstance(s, GNUVerSymSection)), None)
    dynsym = elf.get_section_by_name(".dynsym")
    if dynsym is not None:
        for i, sym in enumerate(dynsym.iter_symbols()):
            if not sym.name:
                continue
            bind = sym["st_info"]["bind"]
            if sym["st_shndx"] == "SHN_UNDEF":
                version = None
                if versym is not None:
                    ndx = versym.get_symbol(i)["ndx"]
                    if isinstance(ndx, int):
                        version = index_to_version.get(ndx & 0x7FFF)
                info.undefined[sym.name] = (version, bind)
            elif bind != "STB_LOCAL":
                info.defined.add(sym.name)
    m = BUILD_INFO.search(data)
    if m:
        info.build_info = (m.group(1).decode(errors="replace"), m.group(2).decode(errors="replace"))
    return info


def _family_version(name: str) -> tuple[str, tuple[int, ...] | None] | None:
    """("GLIBC", (2, 27)) for GLIBC_2.27; ("GLIBC", None) for GLIBC_PRIVATE; None otherwise."""
    fam, _, rest = name.partition("_")
    if fam not in VERSION_FAMILIES or not rest:
        return None
    if re.fullmatch(r"\d+(\.\d+)*", rest):
        return fam, tuple(int(x) for x in rest.split("."))
    return fam, None


def newest_versions(info: ElfInfo) -> dict[str, tuple[int, ...]]:
    """Family -> newest version the library requires (from .gnu.version_r)."""
    best: dict[str, tuple[int, ...]] = {}
    for _, name in info.version_needs:
        fv = _family_version(name)
        if fv and fv[1] is not None and fv[1] > best.get(fv[0], ()):
            best[fv[0]] = fv[1]
    return best


def _v(t: tuple[int, ...]) -> str:
    return ".".join(map(str, t))


def _few(names, n: int = 6) -> str:
    names = sorted(names)
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


# --------------------------------------------------------------------------- adapter rules

def check_soname(info: ElfInfo) -> list[str]:
    name = info.path.name
    if not info.soname:
        return [f"soname: {name} has no DT_SONAME; it must be {name!r} (its file name)"]
    if info.soname != [name]:
        return [f"soname: DT_SONAME is {', '.join(map(repr, info.soname))} but the file is "
                f"{name!r}; they must be equal"]
    return []


def resolve_origin(entry: str, install_dir: str = ADAPTER_DIR) -> str | None:
    """Where a $ORIGIN-relative entry points, relative to site-packages (None if
    the entry is not $ORIGIN-relative)."""
    for origin in ("$ORIGIN", "${ORIGIN}"):
        if entry == origin or entry.startswith(origin + "/"):
            rest = entry[len(origin):]
            resolved = posixpath.normpath("/site-packages/" + install_dir + rest)
            return posixpath.relpath(resolved, "/site-packages")
    return None


def check_runpath(info: ElfInfo, install_dir: str = ADAPTER_DIR,
                  target: str = EXECUTORCH_LIB_DIR) -> list[str]:
    problems = []
    if info.rpath and not info.runpath:
        problems.append(f"runpath: uses DT_RPATH ({':'.join(info.rpath)}) instead of DT_RUNPATH; "
                        "link with -Wl,--enable-new-dtags (DT_RPATH cannot be overridden by "
                        "LD_LIBRARY_PATH and is inherited by everything the library loads)")
        entries = []
    elif info.rpath:
        problems.append(f"runpath: has DT_RPATH ({':'.join(info.rpath)}) besides DT_RUNPATH; "
                        "DT_RPATH must be absent")
        entries = info.runpath
    elif not info.runpath:
        problems.append(f"runpath: no DT_RUNPATH; it needs '$ORIGIN/{posixpath.relpath(target, install_dir)}' "
                        f"so that {LIBEXECUTORCH} is found beside the installed executorch")
        entries = []
    else:
        entries = info.runpath
    for entry in entries:
        resolved = resolve_origin(entry, install_dir)
        if resolved is None:
            what = "an empty entry (the current directory)" if not entry else repr(entry)
            problems.append(f"runpath: DT_RUNPATH has {what}, which is not relative to $ORIGIN; "
                            "entries must be $ORIGIN/... so the wheel works wherever it is installed")
        elif resolved != target:
            problems.append(f"runpath: DT_RUNPATH entry {entry!r} resolves to site-packages/{resolved} "
                            f"from site-packages/{install_dir}, not to site-packages/{target}")
    return problems


def check_needed(info: ElfInfo) -> list[str]:
    problems = []
    if LIBEXECUTORCH not in info.needed:
        problems.append(f"needed: DT_NEEDED ({', '.join(info.needed) or 'none'}) lacks {LIBEXECUTORCH}; "
                        "the adapter must link the executorch wheel's runtime library")
    bad = [n for n in info.needed if FORBIDDEN_NEEDED.match(n)]
    if bad:
        problems.append(f"needed: DT_NEEDED names {', '.join(bad)}; the adapter must never depend on "
                        "libtorch, libc10 or libpython (it loads in C++ applications without them)")
    return problems


def check_register_backend(info: ElfInfo) -> list[str]:
    defined = sorted(s for s in info.defined if REGISTER_BACKEND.match(s))
    if defined:
        return [f"register: defines {', '.join(defined)}; register_backend must be imported from "
                f"{LIBEXECUTORCH} (a private copy registers into a private, unused registry)"]
    if not any(REGISTER_BACKEND.match(s) for s in info.undefined):
        return [f"register: does not import register_backend from {LIBEXECUTORCH}; "
                "the backend would never be registered"]
    return []


def check_no_pyinit(info: ElfInfo) -> list[str]:
    found = sorted(s for s in set(info.defined) | set(info.undefined) if s.startswith("PyInit_"))
    if found:
        return [f"pyinit: has {', '.join(found)}; the adapter must not be a Python extension "
                "module (it has no Python ABI and the wheel is tagged py3-none)"]
    return []


def check_symbol_versions(info: ElfInfo, reference: ElfInfo) -> list[str]:
    theirs = newest_versions(reference)
    limits = ", ".join(f"{f}_{_v(v)}" for f, v in sorted(theirs.items()))
    problems = []
    for lib, name in sorted(set(info.version_needs)):
        fv = _family_version(name)
        if fv is None:
            continue
        fam, ver = fv
        users = _few(info.symbols_needing(name)) or "no listed symbol"
        if ver is None:
            problems.append(f"versions: requires {name} from {lib} (for {users}), a private "
                            "version that no other glibc provides")
        elif fam not in theirs:
            problems.append(f"versions: requires {name} from {lib} (for {users}), but "
                            f"{reference.path.name} requires no {fam}_ version at all ({limits})")
        elif ver > theirs[fam]:
            problems.append(f"versions: requires {name} from {lib} (for {users}), newer than "
                            f"{fam}_{_v(theirs[fam])}, the newest {reference.path.name} requires; "
                            "the adapter would not load everywhere the executorch wheel does")
    return problems


def check_unversioned_symbols(info: ElfInfo, reference: ElfInfo) -> list[str]:
    """Undefined symbols with no version bind to whichever library the loader
    finds first; only executorch's own (unversioned) symbols may be like that.
    Weak C symbols (__gmon_start__, _ITM_*) are optional hooks and exempt."""
    bad = sorted(s for s, (v, bind) in info.undefined.items()
                 if v is None and s not in reference.defined
                 and (s.startswith("_Z") or bind != "STB_WEAK"))
    if bad:
        cxx = [s for s in bad if s.startswith("_Z")]
        kind = "C++ symbols " if len(cxx) == len(bad) else "symbols "
        return [f"unversioned: undefined {kind}without a symbol version that {reference.path.name} "
                f"does not define: {_few(bad)}"]
    return []


def check_build_info(info: ElfInfo, expected: tuple[str, str]) -> list[str]:
    if info.build_info is None:
        return ["build-info: the adapter carries no etrt-build-info marker; the import-time ABI "
                "guard cannot tell which executorch it was built against"]
    if not same_release(info.build_info, expected):
        return [f"build-info: built against executorch {info.build_info[0]} (git {info.build_info[1]}) "
                f"but the pins name executorch {expected[0]} (git {expected[1]})"]
    return []


ADAPTER_RULES = ("soname", "runpath", "needed", "register", "pyinit", "versions",
                 "unversioned", "build-info")


def check_machine(info: ElfInfo, reference: ElfInfo) -> list[str]:
    if info.machine != reference.machine:
        return [f"machine: {info.path.name} is built for "
                f"{EM_TO_ARCH.get(info.machine, info.machine)} but {reference.path} is "
                f"{EM_TO_ARCH.get(reference.machine, reference.machine)}; check a cross-built "
                "adapter against the target's libexecutorch.so (--libexecutorch)"]
    return []


def check_adapter(path: Path | str, reference: Path | str | ElfInfo,
                  expected_build: tuple[str, str] | None = None) -> list[str]:
    """All adapter rules. `reference` is the pinned libexecutorch.so;
    `expected_build` is (executorch version, git version), None to skip that rule."""
    info = read_elf(path)
    ref = reference if isinstance(reference, ElfInfo) else read_elf(reference)
    problems = (check_soname(info) + check_runpath(info) + check_needed(info)
                + check_register_backend(info) + check_no_pyinit(info)
                + check_machine(info, ref)
                + check_symbol_versions(info, ref) + check_unversioned_symbols(info, ref))
    if expected_build is not None:
        problems += check_build_info(info, expected_build)
    return problems


# --------------------------------------------------------------------------- pins / reference

def load_pins(root: Path | str = ROOT) -> tuple[str, str]:
    """(executorch version, executorch git_version) from pins.toml."""
    with open(Path(root) / "pins.toml", "rb") as f:
        data = tomllib.load(f)
    return data["python"]["executorch"], data["executorch"]["git_version"]


def executorch_package_dir() -> Path:
    """The installed executorch package (a namespace package: the __path__
    entry that holds version.py), found without importing executorch."""
    spec = importlib.util.find_spec("executorch")
    for p in (spec.submodule_search_locations or []) if spec else []:
        if (Path(p) / "version.py").is_file():
            return Path(p)
    raise FileNotFoundError("executorch is not installed in this interpreter "
                            f"({sys.executable}); pass --libexecutorch")


def read_executorch_version(package_dir: Path) -> tuple[str, str]:
    text = (package_dir / "version.py").read_text()
    ver = re.search(r"^__version__\b[^=\n]*=\s*['\"]([^'\"]*)['\"]", text, re.M)
    git = re.search(r"^git_version\b[^=\n]*=\s*['\"]([^'\"]*)['\"]", text, re.M)
    return (ver.group(1) if ver else "?"), (git.group(1) if git else "?")


def same_release(found: tuple[str, str], pinned: tuple[str, str]) -> bool:
    """Whether (version, git) satisfies the pin: `executorch==1.5.1` accepts the
    wheel's 1.5.1+cpu (PEP 440 ignores the local label), and the commit must be equal."""
    try:
        same = Version(found[0]).public == Version(pinned[0]).public
    except InvalidVersion:
        same = False
    return same and found[1] == pinned[1]


def check_reference(libexecutorch: Path, expected: tuple[str, str]) -> list[str]:
    """The reference libexecutorch.so must be the pinned executorch's."""
    pkg = libexecutorch.resolve().parent.parent
    if not (pkg / "version.py").is_file():
        return []  # not inside a wheel layout: the caller chose it explicitly
    found = read_executorch_version(pkg)
    if not same_release(found, expected):
        return [f"reference: {libexecutorch} belongs to executorch {found[0]} (git {found[1]}), "
                f"not the pinned {expected[0]} (git {expected[1]}); the version rules would "
                "compare against the wrong library"]
    return []


# --------------------------------------------------------------------------- wheel rules

def _manylinux(platform: str) -> tuple[tuple[int, int], str] | None:
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", platform)
    if m:
        return (int(m.group(1)), int(m.group(2))), m.group(3)
    m = re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_(\w+)", platform)
    if m:
        return legacy[m.group(1)], m.group(2)
    return None


def check_wheel_tag(wheel: Path, info: ElfInfo | None) -> list[str]:
    """File name and WHEEL metadata agree on exactly one tag, py3-none-manylinux_X_Y_<arch>,
    whose architecture is the adapter's and whose glibc covers the adapter's needs."""
    wheel = Path(wheel)
    m = re.fullmatch(r"([^-]+)-([^-]+)(?:-(\d[^-]*))?-([^-]+)-([^-]+)-([^-]+)\.whl", wheel.name)
    if not m:
        return [f"tag: {wheel.name} is not a wheel file name"]
    name, _, _, py, abi, plat = m.groups()
    problems = []
    if name != PACKAGE:
        problems.append(f"tag: distribution name in the file name is {name!r}, expected {PACKAGE!r}")
    with zipfile.ZipFile(wheel) as z:
        meta = [n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/WHEEL", n)]
        text = z.read(meta[0]).decode() if meta else ""
    tags = re.findall(r"^Tag:\s*(\S+)\s*$", text, re.M)
    purelib = re.search(r"^Root-Is-Purelib:\s*(\S+)", text, re.M)
    expanded = {f"{a}-{b}-{c}" for a in py.split(".") for b in abi.split(".") for c in plat.split(".")}
    if set(tags) != expanded:
        problems.append(f"tag: WHEEL lists {tags or 'no Tag'} but the file name says {sorted(expanded)}")
    if len(expanded) != 1:
        problems.append(f"tag: expected exactly one tag, got {sorted(expanded)}")
    if purelib is None or purelib.group(1).lower() != "false":
        problems.append("tag: WHEEL must say Root-Is-Purelib: false (it ships a native library)")
    if py != "py3" or abi != "none":
        problems.append(f"tag: {py}-{abi}-... should be py3-none-...: the adapter has no Python ABI "
                        "(wheel.py-api = \"py3\")")
    for p in plat.split("."):
        ml = _manylinux(p)
        if ml is None:
            problems.append(f"tag: platform {p!r} is not a manylinux tag; PyPI rejects Linux wheels "
                            "tagged linux_<arch> (set wheel.tags in pyproject.toml)")
            continue
        (major, minor), arch = ml
        if info is not None:
            elf_arch = EM_TO_ARCH.get(info.machine, info.machine)
            if arch != elf_arch:
                problems.append(f"tag: platform {p} is for {arch} but the adapter is {elf_arch}")
            glibc = newest_versions(info).get("GLIBC", (2, 0))
            if glibc > (major, minor):
                problems.append(f"tag: platform {p} promises glibc {major}.{minor} but the adapter "
                                f"requires GLIBC_{_v(glibc)}")
    return problems


def check_wheel_size(wheel: Path, budget: int = SIZE_BUDGET) -> list[str]:
    size = Path(wheel).stat().st_size
    if size >= budget:
        return [f"size: {Path(wheel).name} is {size} bytes, over the {budget}-byte budget"]
    return []


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def check_wheel_contents(wheel: Path, require_cmake_package: bool = False) -> list[str]:
    problems = []
    with zipfile.ZipFile(wheel) as z:
        infos = [i for i in z.infolist() if not i.is_dir()]
        names = [i.filename for i in infos]
        dist_info = sorted({n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")})
        record_name = f"{dist_info[0]}/RECORD" if len(dist_info) == 1 else None
        record = {}
        if record_name and record_name in names:
            for row in csv.reader(io.StringIO(z.read(record_name).decode())):
                if row:
                    record[row[0]] = row[1:]
        contents = {n: z.read(n) for n in names}
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append(f"contents: duplicate entries {_few(dupes)}")
    if len(dist_info) != 1 or not dist_info[0].startswith(PACKAGE + "-"):
        problems.append(f"contents: expected one {PACKAGE}-*.dist-info directory, found {dist_info}")
    stray = [n for n in names if n.split("/")[0] not in {PACKAGE, *dist_info}]
    if stray:
        problems.append(f"contents: files outside {PACKAGE}/ and the .dist-info: {_few(stray)}")
    junk = [n for n in names
            if set(PurePosixPath(n).parts[:-1]) & FORBIDDEN_PARTS
            or PurePosixPath(n).name in FORBIDDEN_NAMES
            or n.endswith(FORBIDDEN_SUFFIXES)
            or re.search(r"(^|/)test_[^/]*\.py$|(^|/)conftest\.py$", n)]
    if junk:
        problems.append(f"contents: tests, build outputs or bytecode in the wheel: {_few(junk)}")
    libs = [n for n in names if re.search(r"\.so(\.\d+)*$", n)]
    if libs != [ADAPTER_IN_WHEEL]:
        problems.append(f"contents: shared libraries {libs or 'none'}; expected exactly "
                        f"[{ADAPTER_IN_WHEEL!r}]")
    for required in (f"{PACKAGE}/__init__.py", HEADER_IN_WHEEL):
        if required not in names:
            problems.append(f"contents: {required} is missing")
    cmake_files = [n for n in names if n.startswith(f"{PACKAGE}/lib/cmake/")]
    outside = [n for n in cmake_files if not n.startswith(CMAKE_PACKAGE_DIR + "/")]
    if outside:
        problems.append(f"contents: CMake files outside {CMAKE_PACKAGE_DIR}/: {_few(outside)}")
    if (cmake_files or require_cmake_package) and not any(
            f"{CMAKE_PACKAGE_DIR}/{c}" in names for c in CMAKE_CONFIG_NAMES):
        problems.append(f"contents: no CMake package config ({' or '.join(CMAKE_CONFIG_NAMES)}) "
                        f"in {CMAKE_PACKAGE_DIR}/")
    if record_name is None or record_name not in names:
        problems.append("contents: no .dist-info/RECORD")
    else:
        for n in names:
            if n == record_name:
                continue
            row = record.get(n)
            if row is None:
                problems.append(f"contents: {n} is not listed in RECORD")
            elif row[0] != _record_hash(contents[n]) or (row[1] and int(row[1]) != len(contents[n])):
                problems.append(f"contents: RECORD's hash/size for {n} does not match the file")
        missing = sorted(set(record) - set(names))
        if missing:
            problems.append(f"contents: RECORD lists files the wheel lacks: {_few(missing)}")
    return problems


def cmake_package_expected(root: Path | str = ROOT) -> bool:
    """True once native/ installs the CMake package (its install rules name the directory)."""
    native = Path(root) / "native"
    files = [native / "CMakeLists.txt", *sorted((native / "cmake").glob("*"))]
    return any(f.is_file() and "cmake/executorch_tensorrt" in f.read_text(errors="replace")
               for f in files)


def check_wheel(wheel: Path | str, libexecutorch: Path | str | None = None,
                pins: tuple[str, str] | None = None,
                require_cmake_package: bool | None = None) -> list[str]:
    """Every wheel and adapter rule. Defaults: the libexecutorch.so of the
    executorch installed in this interpreter, pins.toml, and the CMake package
    required if native/ installs one."""
    wheel = Path(wheel)
    pins = pins if pins is not None else load_pins()
    if require_cmake_package is None:
        require_cmake_package = cmake_package_expected()
    lib_ref = Path(libexecutorch) if libexecutorch else executorch_package_dir() / "lib" / LIBEXECUTORCH
    problems = check_reference(lib_ref, pins)
    problems += check_wheel_size(wheel) + check_wheel_contents(wheel, require_cmake_package)
    info = None
    with zipfile.ZipFile(wheel) as z, tempfile.TemporaryDirectory() as tmp:
        if ADAPTER_IN_WHEEL in z.namelist():
            adapter = Path(tmp) / ADAPTER
            adapter.write_bytes(z.read(ADAPTER_IN_WHEEL))
            info = read_elf(adapter)
            problems += check_adapter(adapter, lib_ref, pins)
    problems += check_wheel_tag(wheel, info)
    return problems


def describe_wheel(wheel: Path | str) -> str:
    wheel = Path(wheel)
    with zipfile.ZipFile(wheel) as z:
        lines = [f"{i.file_size:>9}  {i.filename}" for i in z.infolist() if not i.is_dir()]
    return f"{wheel.name}: {wheel.stat().st_size} bytes\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", help="a built wheel (.whl), or an adapter .so for the ELF rules only")
    ap.add_argument("--libexecutorch", help="reference libexecutorch.so (default: the installed "
                    "executorch's)")
    ap.add_argument("--require-cmake-package", action=argparse.BooleanOptionalAction, default=None,
                    help="require lib/cmake/executorch_tensorrt (default: if native/ installs it)")
    ap.add_argument("--list", action="store_true", help="print the wheel's contents")
    args = ap.parse_args(argv)
    path = Path(args.path)
    ref = Path(args.libexecutorch) if args.libexecutorch else executorch_package_dir() / "lib" / LIBEXECUTORCH
    if path.suffix == ".whl":
        problems = check_wheel(path, ref, require_cmake_package=args.require_cmake_package)
        if args.list:
            print(describe_wheel(path))
    else:
        problems = check_adapter(path, ref, load_pins())
    for p in problems:
        print(p)
    if problems:
        print(f"{path.name}: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"{path.name}: all checks passed (reference {ref})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
