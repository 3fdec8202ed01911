"""The distributable wheel (docs/packaging.md).

- `python -m build --wheel --no-isolation` makes one wheel, tagged
  py3-none-manylinux_2_28_<arch>, under 1 MB, holding the package, the adapter
  (once), the public header and the CMake package, and nothing else.
- tools/release/wheel_checks.py finds no problem in it, and finds exactly the intended
  problem in small libraries/wheels built to break one rule each.
- Installed with pip into a fresh virtual environment (no access to this
  checkout or this environment's packages), `import executorch_tensorrt`
  registers TensorRTBackend, the adapter loads through its RUNPATH alone, and
  the ABI guard refuses an executorch other than the one it was built against.

The wheel is built once per session, into a temporary directory (with its own
build directory, so concurrent builds in the checkout's build/ are not disturbed).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import platform
import re
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "release"))
import wheel_checks as wc  # noqa: E402

MACHINE = platform.machine()
PINS = wc.load_pins(REPO)
MANGLED_REGISTER = "_ZN10executorch7runtime16register_backendERKNS0_7BackendE"


def _rules(problems: list[str]) -> set[str]:
    return {p.split(":", 1)[0] for p in problems}


def _clean_env(**extra: str) -> dict:
    """An environment that cannot reach this checkout or its venv."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("EXECUTORCH_TENSORRT_", "PYTHON", "VIRTUAL_ENV", "LD_"))}
    env.update(extra)
    return env


# --------------------------------------------------------------------------- the wheel

@pytest.fixture(scope="session")
def wheel_dir(tmp_path_factory) -> Path:
    try:
        import build  # noqa: F401
        import scikit_build_core  # noqa: F401
    except ImportError as e:
        pytest.fail(f"building the wheel needs `build` and `scikit-build-core` in {sys.executable} "
                    f"({e}); run tools/setup.sh")
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out / "dist"),
           "-C", f"build-dir={out / 'build'}", str(REPO)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CMAKE_")}
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out)
    assert proc.returncode == 0, (f"wheel build failed: {' '.join(cmd)}\n{proc.stdout[-6000:]}\n"
                                  f"{proc.stderr[-6000:]}")
    print(f"wheel built in {time.monotonic() - start:.1f}s")
    return out / "dist"


@pytest.fixture(scope="session")
def wheel(wheel_dir) -> Path:
    wheels = sorted(wheel_dir.glob("*.whl"))
    assert len(wheels) == 1, f"expected one wheel, got {[w.name for w in wheels]}"
    return wheels[0]


@pytest.fixture(scope="session")
def reference() -> Path:
    """The pinned libexecutorch.so (this environment's executorch)."""
    lib = wc.executorch_package_dir() / "lib" / wc.LIBEXECUTORCH
    assert lib.is_file(), f"{lib} missing; the installed executorch is not the wheel layout"
    assert wc.check_reference(lib, PINS) == []
    return lib


def test_one_wheel_and_nothing_else(wheel_dir):
    assert [p.name for p in wheel_dir.iterdir()] == [next(wheel_dir.glob("*.whl")).name]


def test_tag(wheel):
    assert wheel.name == f"executorch_tensorrt-0.1.0-py3-none-manylinux_2_28_{MACHINE}.whl"
    with zipfile.ZipFile(wheel) as z:
        meta = z.read("executorch_tensorrt-0.1.0.dist-info/WHEEL").decode()
    assert re.findall(r"^Tag: (.*)$", meta, re.M) == [f"py3-none-manylinux_2_28_{MACHINE}"]
    assert "Root-Is-Purelib: false" in meta
    assert wc.check_wheel_tag(wheel, None) == []


def test_size_budget(wheel):
    assert wheel.stat().st_size < wc.SIZE_BUDGET == 1_000_000, wc.describe_wheel(wheel)
    assert wc.check_wheel_size(wheel) == []


def test_contents(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if not n.endswith("/")]
    assert [n for n in names if ".so" in n] == [wc.ADAPTER_IN_WHEEL]
    assert wc.HEADER_IN_WHEEL in names
    assert (REPO / "native/include/executorch_tensorrt/executor_table.h").read_bytes() == \
        zipfile.ZipFile(wheel).read(wc.HEADER_IN_WHEEL)
    assert f"{wc.CMAKE_PACKAGE_DIR}/executorch_tensorrtConfig.cmake" in names
    assert "executorch_tensorrt/runtime/adapter/loader.py" in names
    # Every Python module of the package, and no other.
    src = REPO / "src" / "executorch_tensorrt"
    expected = {f"executorch_tensorrt/{p.relative_to(src).as_posix()}" for p in src.rglob("*.py")
                if "__pycache__" not in p.parts}
    assert {n for n in names if n.endswith(".py")} == expected
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")
                or n.split("/")[0] in ("tests", "build", "native", "tools")]
    assert wc.check_wheel_contents(wheel, require_cmake_package=True) == []


def test_all_checks_pass(wheel, reference):
    assert wc.cmake_package_expected(REPO)
    assert wc.check_wheel(wheel, reference, PINS) == []


def test_cli(wheel, tmp_path):
    ok = subprocess.run([sys.executable, str(REPO / "tools/release/wheel_checks.py"), "--list", str(wheel)],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "all checks passed" in ok.stdout and wc.ADAPTER_IN_WHEEL in ok.stdout
    bad = _rewrite_wheel(wheel, tmp_path / wheel.name, add={"executorch_tensorrt/tests/test_x.py": b""})
    proc = subprocess.run([sys.executable, str(REPO / "tools/release/wheel_checks.py"), str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stdout.startswith("contents: tests, build outputs or bytecode"), proc.stdout


# --------------------------------------------------------------------------- adapter rules: negative libraries

_LIB_C = r"""
#ifdef BUILT_VERSION
__attribute__((used)) const char etrt_build_info[] =
    "etrt-build-info:executorch_version=" BUILT_VERSION ";executorch_git_version=" BUILT_GIT ";";
#endif
#ifdef DEFINE_REGISTER
int register_backend_(const void *b) __asm__(MANGLED_REGISTER);
int register_backend_(const void *b) { return b != 0; }
#else
extern int register_backend_(const void *b) __asm__(MANGLED_REGISTER);
#endif
int etrt_registration_status(void) {
#ifndef NO_REGISTER
    return register_backend_(0);
#else
    return 0;
#endif
}
#ifdef PYINIT
void *PyInit_x(void) { return 0; }
#endif
#ifdef ARC4RANDOM
extern unsigned int arc4random(void);             /* GLIBC_2.36 */
unsigned int etrt_random(void) { return arc4random(); }
#endif
#ifdef SINGLE_THREADED
extern char __libc_single_threaded;               /* GLIBC_2.32 */
int etrt_single(void) { return __libc_single_threaded; }
#endif
#ifdef NEW_GLIBCXX
/* std::stringbuf::str() const&, GLIBCXX_3.4.29 (C++20, gcc 11) */
extern void stringbuf_str(void *out, const void *self) __asm__(
    "_ZNKRSt7__cxx1115basic_stringbufIcSt11char_traitsIcESaIcEE3strEv");
void etrt_str(void *o, const void *s) { stringbuf_str(o, s); }
#endif
#ifdef NEW_CXXABI
/* exception_ptr::_M_release, CXXABI_1.3.13 (what gcc 12 emits for std::exception_ptr) */
extern void ep_release(void *self) __asm__("_ZNSt15__exception_ptr13exception_ptr10_M_releaseEv");
void etrt_release(void *p) { ep_release(p); }
#endif
#ifdef UNVERSIONED_CXX
extern void etrt_undefined(void) __asm__("_Z14etrt_undefinedv");
void etrt_call(void) { etrt_undefined(); }
#endif
"""

GOOD_RUNPATH = "$ORIGIN/../../executorch/lib"

# id -> (rule expected to complain, substring of its message, build options)
NEGATIVE = {
    "rpath-not-runpath": ("runpath", "uses DT_RPATH", dict(dtags="--disable-new-dtags")),
    "rpath-and-runpath": ("runpath", "besides DT_RUNPATH", dict(extra_rpath=True)),
    "no-runpath": ("runpath", "no DT_RUNPATH", dict(runpath=None)),
    "absolute-runpath": ("runpath", "'/opt/executorch/lib', which is not relative to $ORIGIN",
                         dict(runpath=f"{GOOD_RUNPATH}:/opt/executorch/lib")),
    "runpath-elsewhere": ("runpath", "resolves to site-packages/executorch_tensorrt/executorch/lib",
                          dict(runpath="$ORIGIN/../executorch/lib")),
    "no-soname": ("soname", "has no DT_SONAME", dict(soname=None)),
    "wrong-soname": ("soname", "DT_SONAME is 'libother.so'", dict(soname="libother.so")),
    "versioned-soname": ("soname", "'libexecutorch_backend_tensorrt.so.1'",
                         dict(soname="libexecutorch_backend_tensorrt.so.1")),
    "no-libexecutorch": ("needed", "lacks libexecutorch.so", dict(link_executorch=False)),
    "needs-libpython": ("needed", "names libpython3.11.so.1.0", dict(fake="libpython3.11.so.1.0")),
    "needs-libtorch": ("needed", "names libtorch.so", dict(fake="libtorch.so")),
    "needs-libc10": ("needed", "names libc10.so", dict(fake="libc10.so")),
    "defines-register-backend": ("register", f"defines {MANGLED_REGISTER}",
                                 dict(defines=["DEFINE_REGISTER"])),
    "no-register-backend": ("register", "does not import register_backend",
                            dict(defines=["NO_REGISTER"])),
    "pyinit": ("pyinit", "has PyInit_x", dict(defines=["PYINIT"])),
    "glibc-2.36": ("versions", "requires GLIBC_2.36 from libc.so.6 (for arc4random), newer than "
                   "GLIBC_2.27", dict(defines=["ARC4RANDOM"])),
    "glibc-2.32": ("versions", "requires GLIBC_2.32 from libc.so.6 (for __libc_single_threaded)",
                   dict(defines=["SINGLE_THREADED"])),
    "glibcxx-3.4.29": ("versions", "requires GLIBCXX_3.4.29 from libstdc++.so.6",
                       dict(defines=["NEW_GLIBCXX"], libs=["-lstdc++"])),
    "cxxabi-1.3.13": ("versions", "requires CXXABI_1.3.13 from libstdc++.so.6 (for "
                      "_ZNSt15__exception_ptr13exception_ptr10_M_releaseEv), newer than CXXABI_1.3.11",
                      dict(defines=["NEW_CXXABI"], libs=["-lstdc++"])),
    "unversioned-cxx": ("unversioned", "_Z14etrt_undefinedv", dict(defines=["UNVERSIONED_CXX"])),
    "no-build-info": ("build-info", "no etrt-build-info marker", dict(build_info=None)),
    "other-build-info": ("build-info", "built against executorch 1.4.0",
                         dict(build_info=("1.4.0", PINS[1]))),
}


@pytest.fixture(scope="session")
def gcc() -> str:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.fail("the negative-library tests need gcc on PATH")
    return cc


def _build_lib(gcc: str, reference: Path, out: Path, *, soname="libexecutorch_backend_tensorrt.so",
               runpath: str | None = GOOD_RUNPATH, dtags="--enable-new-dtags",
               link_executorch=True, fake: str | None = None, defines=(), libs=(),
               build_info: tuple[str, str] | None = PINS) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    src = out / "lib.c"
    src.write_text(_LIB_C)
    lib = out / wc.ADAPTER
    cmd = [gcc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(src),
           f'-DMANGLED_REGISTER="{MANGLED_REGISTER}"', *[f"-D{d}" for d in defines]]
    if build_info is not None:
        cmd += [f'-DBUILT_VERSION="{build_info[0]}"', f'-DBUILT_GIT="{build_info[1]}"']
    if soname:
        cmd.append(f"-Wl,-soname,{soname}")
    if runpath:
        cmd.append(f"-Wl,{dtags},-rpath,{runpath}")
    cmd.append("-Wl,--no-as-needed")
    if link_executorch:
        cmd += [f"-L{reference.parent}", "-lexecutorch"]
    if fake:
        fake_dir = out / "fake"
        fake_dir.mkdir()
        (fake_dir / "empty.c").write_text("int etrt_fake_symbol;\n")
        subprocess.run([gcc, "-shared", "-fPIC", "-o", str(fake_dir / fake), str(fake_dir / "empty.c"),
                        f"-Wl,-soname,{fake}"], check=True, capture_output=True)
        cmd.append(f"-l:{fake}")
        cmd.append(f"-L{fake_dir}")
    cmd += list(libs)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    return lib


def _add_rpath_tag(lib: Path) -> None:
    """Adds a DT_RPATH next to an existing DT_RUNPATH by rewriting an unused
    tag slot in place (no linker emits both on request)."""
    from elftools.elf.elffile import ELFFile
    import struct

    data = bytearray(lib.read_bytes())
    elf = ELFFile(io.BytesIO(bytes(data)))
    dyn = elf.get_section_by_name(".dynamic")
    entsize = dyn["sh_entsize"]
    runpath_val = null_off = None
    for i, tag in enumerate(dyn.iter_tags()):
        if tag.entry.d_tag == "DT_RUNPATH":
            runpath_val = tag.entry.d_val
        if tag.entry.d_tag == "DT_NULL":
            null_off = dyn["sh_offset"] + i * entsize
            break
    assert runpath_val is not None and null_off is not None
    # Need a spare DT_NULL after the first one (the terminator must stay).
    assert null_off + 2 * entsize <= dyn["sh_offset"] + dyn["sh_size"], "no spare dynamic slot"
    struct.pack_into("<qQ", data, null_off, 15, runpath_val)  # DT_RPATH = 15
    lib.write_bytes(bytes(data))


@pytest.fixture(scope="session")
def good_lib(gcc, reference, tmp_path_factory) -> Path:
    return _build_lib(gcc, reference, tmp_path_factory.mktemp("good-lib"))


def test_harness_library_passes(good_lib, reference):
    """The negative libraries differ from this one by one rule each."""
    assert wc.check_adapter(good_lib, reference, PINS) == []


@pytest.mark.parametrize("case", sorted(NEGATIVE))
def test_check_reports_exactly_its_problem(case, gcc, reference, tmp_path):
    rule, message, options = NEGATIVE[case]
    opts = {k: v for k, v in options.items() if k != "extra_rpath"}
    lib = _build_lib(gcc, reference, tmp_path, **opts)
    if options.get("extra_rpath"):
        _add_rpath_tag(lib)
    problems = wc.check_adapter(lib, reference, PINS)
    assert _rules(problems) == {rule}, problems
    assert len(problems) == 1, problems
    assert message in problems[0], problems


def test_each_rule_has_a_negative_case():
    assert {rule for rule, _, _ in NEGATIVE.values()} == set(wc.ADAPTER_RULES)


def test_versions_against_a_reference_lacking_the_family(good_lib, reference, tmp_path, gcc):
    """A family the reference needs no version of at all (here: a reference
    without GCC_ versions) is a problem too."""
    lib = _build_lib(gcc, reference, tmp_path, defines=["NEW_GLIBCXX"], libs=["-lstdc++"])
    ref = wc.read_elf(reference)
    ref.version_needs = [(f, v) for f, v in ref.version_needs if not v.startswith("GLIBCXX_")]
    problems = wc.check_symbol_versions(wc.read_elf(lib), ref)
    assert len(problems) == 1 and "requires no GLIBCXX_ version at all" in problems[0], problems


# --------------------------------------------------------------------------- wheel rules: negative wheels

def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _rewrite_wheel(src: Path, dst: Path, *, drop=(), add: dict | None = None,
                   tag: str | None = None, stored: bool = False) -> Path:
    """A copy of `src` with files dropped/added and a consistent RECORD."""
    add = add or {}
    with zipfile.ZipFile(src) as z:
        files = {n: z.read(n) for n in z.namelist() if not n.endswith("/")}
    record = next(n for n in files if n.endswith(".dist-info/RECORD"))
    files = {n: d for n, d in files.items() if n not in drop and n != record}
    files.update(add)
    if tag:
        wheel_meta = next(n for n in files if n.endswith(".dist-info/WHEEL"))
        files[wheel_meta] = re.sub(rb"^Tag: .*$", b"Tag: " + tag.encode(), files[wheel_meta], flags=re.M)
        dst = dst.with_name(re.sub(r"-py3-none-[^-]+\.whl$", f"-{tag}.whl", src.name))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for n, d in files.items():
        w.writerow([n, _record_hash(d), len(d)])
    w.writerow([record, "", ""])
    files[record] = buf.getvalue().encode()
    dst.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED) as z:
        for n, d in files.items():
            z.writestr(n, d)
    return dst


NEGATIVE_WHEELS = {
    "tests-inside": (dict(add={"executorch_tensorrt/tests/test_x.py": b""}), "contents",
                     "tests, build outputs or bytecode"),
    "pycache": (dict(add={"executorch_tensorrt/__pycache__/blob.cpython-311.pyc": b"x"}), "contents",
                "tests, build outputs or bytecode"),
    "build-dir": (dict(add={"executorch_tensorrt/build/CMakeCache.txt": b""}), "contents",
                  "tests, build outputs or bytecode"),
    "second-so": (dict(add={"executorch_tensorrt/lib/libexecutorch.so": b"\x7fELF"}), "contents",
                  "shared libraries"),
    "stray-top-level": (dict(add={"native/CMakeLists.txt": b""}), "contents", "files outside"),
    "no-header": (dict(drop={wc.HEADER_IN_WHEEL}), "contents", "executor_table.h is missing"),
    "no-adapter": (dict(drop={wc.ADAPTER_IN_WHEEL}), "contents", "shared libraries none"),
    "linux-tag": (dict(tag=f"py3-none-linux_{MACHINE}"), "tag", "not a manylinux tag"),
    "cp311-tag": (dict(tag=f"cp311-cp311-manylinux_2_28_{MACHINE}"), "tag", "should be py3-none"),
    "other-arch": (dict(tag="py3-none-manylinux_2_28_" + ("aarch64" if MACHINE == "x86_64" else "x86_64")),
                   "tag", "but the adapter is"),
    "glibc-too-old": (dict(tag=f"py3-none-manylinux1_{MACHINE}"), "tag",
                      "promises glibc 2.5 but the adapter requires GLIBC_2.14"),
    "oversize": (dict(add={"executorch_tensorrt/blob.bin": os.urandom(1_000_000)}, stored=True),
                 "size", "over the 1000000-byte budget"),
}


@pytest.mark.parametrize("case", sorted(NEGATIVE_WHEELS))
def test_wheel_check_reports_exactly_its_problem(case, wheel, reference, tmp_path):
    options, rule, message = NEGATIVE_WHEELS[case]
    bad = _rewrite_wheel(wheel, tmp_path / wheel.name, **options)
    problems = wc.check_wheel(bad, reference, PINS, require_cmake_package=True)
    assert _rules(problems) == {rule}, problems
    assert any(message in p for p in problems), problems


def test_unrewritten_copy_passes(wheel, reference, tmp_path):
    """_rewrite_wheel itself introduces no problem."""
    assert wc.check_wheel(_rewrite_wheel(wheel, tmp_path / wheel.name), reference, PINS) == []


def test_record_mismatch(wheel, tmp_path):
    bad = tmp_path / wheel.name
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(bad, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item)
            if item.filename == "executorch_tensorrt/errors.py":
                data += b"\n# edited after RECORD was written\n"
            zout.writestr(item, data)
    problems = wc.check_wheel_contents(bad, require_cmake_package=True)
    assert problems == ["contents: RECORD's hash/size for executorch_tensorrt/errors.py does not "
                        "match the file"]


def test_missing_cmake_package_when_expected(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as z:
        cmake = {n for n in z.namelist() if n.startswith(wc.CMAKE_PACKAGE_DIR)}
    bad = _rewrite_wheel(wheel, tmp_path / wheel.name, drop=cmake)
    assert wc.check_wheel_contents(bad, require_cmake_package=False) == []
    problems = wc.check_wheel_contents(bad, require_cmake_package=True)
    assert len(problems) == 1 and "no CMake package config" in problems[0], problems


# --------------------------------------------------------------------------- a fresh virtual environment

# What `import executorch_tensorrt` needs at import time, found by installing
# with --no-deps and adding what the import asked for (docs/packaging.md):
#   executorch.runtime imports torch (for libtorch) and executorch.exir;
#   torch needs typing_extensions, sympy (mpmath), filelock, networkx, numpy;
#   executorch.exir needs ruamel.yaml, flatbuffers, tabulate;
#   executorch_tensorrt's runtime imports its aot package, which imports
#   onnx (protobuf, ml_dtypes) and onnxscript (onnx-ir, packaging).
# Versions are this environment's (the pinned ones where pins.toml pins them).
IMPORT_DEPS = ["executorch", "torch", "typing_extensions", "sympy", "mpmath", "filelock",
               "networkx", "numpy", "ruamel.yaml", "flatbuffers", "tabulate", "onnx", "protobuf",
               "ml_dtypes", "onnxscript", "onnx-ir", "packaging"]


def _requirement(name: str) -> str:
    if name == "executorch":
        return f"executorch=={PINS[0]}"
    try:
        return f"{name}=={metadata.version(name)}"
    except metadata.PackageNotFoundError:
        pytest.fail(f"{name} is not installed in {sys.executable}; the fresh-venv test installs "
                    "the same versions as this environment (run tools/setup.sh)")


class FreshVenv:
    def __init__(self, root: Path, seconds: float):
        self.root = root
        self.python = root / "bin" / "python"
        self.seconds = seconds
        self.site = Path(subprocess.run(
            [str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True).stdout.strip())

    def run(self, code: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.python), "-c", textwrap.dedent(code)], capture_output=True,
                              text=True, env=_clean_env(**env), cwd=self.root, timeout=300)


@pytest.fixture(scope="session")
def fresh_venv(wheel, tmp_path_factory) -> FreshVenv:
    root = tmp_path_factory.mktemp("fresh-venv") / "venv"
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, capture_output=True)
    reqs = [_requirement(n) for n in IMPORT_DEPS]
    cmd = [str(root / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--no-input",
           "--disable-pip-version-check",
           "--no-compile", *reqs, str(wheel)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(), cwd=root)
    assert proc.returncode == 0, (
        f"installing into the fresh venv failed (PyPI and pip's find-links must be reachable for "
        f"{', '.join(reqs)}):\n{' '.join(cmd)}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    venv = FreshVenv(root, time.monotonic() - start)
    print(f"fresh venv ready in {venv.seconds:.1f}s")
    return venv


def test_fresh_venv_registers_backend(fresh_venv):
    proc = fresh_venv.run("""
        import sys, executorch_tensorrt
        from executorch.runtime import Runtime
        from executorch_tensorrt.runtime.adapter import loader
        names = Runtime.get().backend_registry.registered_backend_names
        print("FILE", executorch_tensorrt.__file__)
        print("ADAPTER", loader.adapter_path())
        print("PATH", sys.path)
        print("REGISTERED", "TensorRTBackend" in names, sorted(names))
    """)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "REGISTERED True" in out, out
    # The installed package and adapter, not this checkout's or this venv's.
    assert f"FILE {fresh_venv.site}/executorch_tensorrt/__init__.py" in out, out
    assert f"ADAPTER {fresh_venv.site}/{wc.ADAPTER_IN_WHEEL}" in out, out
    assert str(REPO) not in out.split("PATH", 1)[1].split("\n", 1)[0], out


def test_installed_adapter_resolves_libexecutorch_by_runpath(fresh_venv):
    """In the installed layout the adapter's RUNPATH reaches the executorch
    wheel's lib/: a process that never imported executorch (so nothing has
    loaded libexecutorch.so, and LD_LIBRARY_PATH is unset) loads it."""
    adapter = fresh_venv.site / wc.ADAPTER_IN_WHEEL
    et_lib = fresh_venv.site / wc.EXECUTORCH_LIB_DIR / wc.LIBEXECUTORCH
    info = wc.read_elf(adapter)
    assert [(adapter.parent / e.replace("$ORIGIN", ".")).resolve() for e in info.runpath] == \
        [et_lib.parent.resolve()]
    assert wc.check_adapter(adapter, et_lib, PINS) == []
    proc = fresh_venv.run(f"""
        import ctypes, sys
        lib = ctypes.CDLL({str(adapter)!r})
        lib.etrt_registration_message.restype = ctypes.c_char_p
        print("STATUS", lib.etrt_registration_status(), lib.etrt_registration_message().decode())
        maps = open("/proc/self/maps").read()
        print("LOADED", sorted({{l.split()[-1] for l in maps.splitlines() if "libexecutorch.so" in l}}))
        assert "executorch" not in sys.modules and "torch" not in sys.modules
    """)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "STATUS 0 TensorRTBackend registered by" in proc.stdout, proc.stdout
    assert f"LOADED ['{et_lib.resolve()}']" in proc.stdout, proc.stdout


@pytest.mark.parametrize("field", ["__version__", "git_version"])
def test_abi_guard_in_fresh_venv(fresh_venv, field):
    """An executorch other than the one the wheel's adapter was built against
    (here: the fresh venv's executorch/version.py edited) is refused at import,
    with both versions named."""
    version_py = fresh_venv.site / "executorch" / "version.py"
    original = version_py.read_text()
    built = wc.read_executorch_version(version_py.parent)
    other = "1.4.0" if field == "__version__" else "f" * 40
    pattern = rf"^({field}\b[^=\n]*=\s*)['\"][^'\"]*['\"]"
    patched, n = re.subn(pattern, lambda m: f'{m.group(1)}"{other}"', original, flags=re.M)
    assert n == 1, f"{version_py} has no {field} line:\n{original}"

    def drop_bytecode():
        for pyc in (version_py.parent / "__pycache__").glob("version.*.pyc"):
            pyc.unlink()

    try:
        version_py.write_text(patched)
        drop_bytecode()
        proc = fresh_venv.run("import executorch_tensorrt", PYTHONDONTWRITEBYTECODE="1")
    finally:
        version_py.write_text(original)
        drop_bytecode()
    assert proc.returncode != 0, proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: the TensorRT adapter"), proc.stderr
    assert other in last, last
    built_named = built[0] if field == "__version__" else built[1]
    assert f"built against executorch {built[0]} (git {built[1]})" in last and built_named in last, last
    assert wc.read_executorch_version(version_py.parent) == built  # restored for the other tests
