"""Pins: load ``pins.toml`` and find every place in the repository that names a pin.

``pins.toml`` at the repository root is the single source of truth. Other files
that name a pinned distribution ("pin sites") are listed in :data:`SITES` with
the number of sites each must contain; ``tests/tools/test_pins.py`` checks them and
``tools/release/update_pins.py`` rewrites them.

Only the standard library and ``packaging`` are used, so this module can be
imported by the updater without the project's other dependencies.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parents[2]  # tools/<role>/ -> the repository
PINS_FILE = "pins.toml"

# Every file that names a pinned version, relative to the repository root, and
# how many pin sites (requirements or CMake version lines naming a distribution
# from pins.toml[python]) it must contain. List only files that exist; a file
# that names a pin but is missing here makes tests/tools/test_pins.py fail
# ("unlisted pin site"). Keep the counts exact: they catch a deleted site.
SITES: dict[str, int] = {
    # [build-system] requires: executorch (1); [project] dependencies:
    # executorch, torch, onnx, onnxscript, onnxruntime, ml_dtypes (6);
    # [project.optional-dependencies] rtx: tensorrt-rtx-cu13, image: pillow (2).
    "pyproject.toml": 9,
    # the emulated aarch64 run's pip line: executorch, onnxruntime, onnx, ml_dtypes, onnxscript;
    # the aarch64 [rtx] resolution's pip line: tensorrt-rtx-cu13 (6).
    "docs/aarch64.md": 6,
    # To add once they exist (count the pinned requirements in them):
    # ".ci/run": N,                 # pip install lines
    # "README.md": N,               # pip install commands in code blocks
    # "native/CMakeLists.txt": N,   # find_package(executorch <ver>) / set(ETRT_EXECUTORCH_VERSION "<ver>"), or omit
}

_GIT_SHA = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class Pins:
    python: dict[str, str]  # canonical distribution name -> version
    git_version: str  # executorch.version.git_version of the pinned wheel

    def get(self, name: str) -> str | None:
        return self.python.get(canonicalize_name(name))


def load_pins(root: Path | str = ROOT) -> Pins:
    path = Path(root) / PINS_FILE
    with open(path, "rb") as f:
        data = tomllib.load(f)
    python = data.get("python")
    if not isinstance(python, dict) or not python:
        raise ValueError(f"{path}: missing [python] table of name = version")
    pins: dict[str, str] = {}
    for name, version in python.items():
        if not isinstance(version, str):
            raise ValueError(f"{path}: [python] {name} must be a version string")
        try:
            Version(version)
        except InvalidVersion as e:
            raise ValueError(f"{path}: [python] {name} = {version!r}: {e}") from None
        key = canonicalize_name(name)
        if key in pins:
            raise ValueError(f"{path}: [python] names {key} twice")
        pins[key] = version
    git_version = data.get("executorch", {}).get("git_version")
    if not isinstance(git_version, str) or not _GIT_SHA.fullmatch(git_version):
        raise ValueError(f"{path}: [executorch] git_version must be a 40-digit lowercase hex commit")
    return Pins(pins, git_version)


# --------------------------------------------------------------------------- sites


@dataclass(frozen=True)
class Site:
    """One requirement (or CMake version) naming a distribution, in one file."""

    path: str  # file, as given to the parser
    line: int  # 1-based line where the site starts
    kind: str  # "requirement" or "cmake"
    text: str  # the requirement string, or the CMake version
    name: str  # canonical distribution name
    start: int  # span of the file text that holds the site (for rewriting)
    end: int

    def requirement(self) -> Requirement | None:
        return Requirement(self.text) if self.kind == "requirement" else None


def file_kind(path: str | Path) -> str | None:
    """Which parser reads a file, from its name; None for files that hold no sites."""
    p = Path(path)
    name = p.name
    if name == "pyproject.toml":
        return "pyproject"
    if name == "CMakeLists.txt" or name.endswith(".cmake"):
        return "cmake"
    if name.endswith(".md"):
        return "markdown"
    if re.fullmatch(r"(requirements|constraints)([-_.].*)?\.(txt|in)", name):
        return "requirements"
    if name.endswith((".sh", ".bash", ".yml", ".yaml")) or name == "Dockerfile":
        return "shell"
    if p.parent.name == ".ci" and "." not in name:  # .ci/run and friends
        return "shell"
    return None


def read_text(path: Path | str) -> str:
    """File text with line endings untouched (offsets match the bytes on disk)."""
    return Path(path).read_bytes().decode("utf-8")


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


# pyproject.toml ----------------------------------------------------------------


def _pyproject_requirements(data: dict) -> list[str]:
    out: list[str] = []
    out += data.get("build-system", {}).get("requires", [])
    project = data.get("project", {})
    out += project.get("dependencies", [])
    for group in project.get("optional-dependencies", {}).values():
        out += group
    for group in data.get("dependency-groups", {}).values():
        out += [r for r in group if isinstance(r, str)]
    return out


def _toml_literal_spans(text: str, value: str) -> list[tuple[int, int]]:
    """Spans of the quoted TOML literal `value` outside comments, in file order."""
    spans = []
    for q in ('"', "'"):
        for m in re.finditer(re.escape(q + value + q), text):
            line_start = text.rfind("\n", 0, m.start()) + 1
            prefix = text[line_start : m.start()]
            # a '#' outside quotes before the literal makes it a comment
            if "#" in re.sub(r'"[^"]*"|\'[^\']*\'', "", prefix):
                continue
            spans.append((m.start() + 1, m.end() - 1))
    return sorted(spans)


def parse_pyproject(text: str, path: str = "pyproject.toml") -> list[Site]:
    data = tomllib.loads(text)
    sites: list[Site] = []
    used: dict[str, int] = {}
    for req_text in _pyproject_requirements(data):
        try:
            req = Requirement(req_text)
        except InvalidRequirement as e:
            raise ValueError(f"{path}: invalid requirement {req_text!r}: {e}") from None
        spans = _toml_literal_spans(text, req_text)
        k = used.get(req_text, 0)
        used[req_text] = k + 1
        start, end = spans[k] if k < len(spans) else (0, 0)
        sites.append(Site(path, _line_of(text, start), "requirement", req_text,
                          canonicalize_name(req.name), start, end))
    return sorted(sites, key=lambda s: s.start)


# shell / markdown ----------------------------------------------------------------

# pip install options that take a separate value argument
_PIP_VALUE_OPTIONS = {
    "-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-t", "--target",
    "--platform", "--python-version", "--implementation", "--abi", "--root", "--prefix",
    "--src", "--upgrade-strategy", "--progress-bar", "--root-user-action", "--report",
    "-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--no-binary",
    "--only-binary", "--cache-dir", "--log", "--log-file", "--proxy", "--retries",
    "--timeout", "--exists-action", "--trusted-host", "--cert", "--client-cert",
    "--global-option", "-C", "--config-settings", "--python", "--keyring-provider",
    "--use-feature", "--use-deprecated", "--group", "--build-option", "--install-option",
}
_PIP = re.compile(r"(.*/)?pip(\d+(\.\d+)?)?")
_CONTROL = re.compile(r"[;&|()<>]+")


def _pip_install_args(tokens: list[str]) -> list[str]:
    """Requirement-like arguments of every `pip install` command in a token list."""
    out: list[str] = []
    i = 0
    while i < len(tokens):
        if _PIP.fullmatch(tokens[i]) and i + 1 < len(tokens) and tokens[i + 1] == "install":
            j = i + 2
            while j < len(tokens) and not _CONTROL.fullmatch(tokens[j]):
                tok = tokens[j]
                if tok in _PIP_VALUE_OPTIONS:
                    j += 2
                    continue
                if not tok.startswith("-"):
                    out.append(tok)
                j += 1
            i = j
        else:
            i += 1
    return out


def _logical_lines(text: str, base: int = 0):
    """Yield (start, end, joined) for shell logical lines (joining `\\` continuations)."""
    pos = 0
    n = len(text)
    while pos < n:
        start = pos
        parts = []
        while True:
            nl = text.find("\n", pos)
            line = text[pos:] if nl < 0 else text[pos:nl]
            pos = n if nl < 0 else nl + 1
            body = line[:-1] if line.endswith("\r") else line  # CRLF files
            if body.endswith("\\") and not body.lstrip().startswith("#") and pos < n:
                parts.append(body[:-1])
                continue
            parts.append(line)
            break
        end = pos if text[pos - 1 : pos] != "\n" else pos - 1
        yield base + start, base + end, "".join(parts)


def _comment_start(raw: str) -> int:
    """Offset of a shell comment in `raw` (outside quotes, at a word start), or len(raw)."""
    quote = None
    i = 0
    while i < len(raw):
        c = raw[i]
        if quote == "'":
            if c == "'":
                quote = None
        elif c == "\\":
            i += 1
        elif quote == '"':
            if c == '"':
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or raw[i - 1] in " \t\n;&|()"):
            return i
        i += 1
    return len(raw)


def _shell_sites(text: str, full_text: str, base: int, path: str) -> list[Site]:
    sites = []
    for start, end, line in _logical_lines(text, base):
        if "install" not in line:
            continue
        end = start + _comment_start(full_text[start:end])  # the span stops at a comment
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True  # '#' starts a comment, as in the shell
        try:
            tokens = list(lexer)
        except ValueError:  # unbalanced quotes: not a command we can read
            continue
        for arg in _pip_install_args(tokens):
            try:
                req = Requirement(arg)
            except InvalidRequirement:  # a path, a URL, a variable, ...
                continue
            sites.append(Site(path, _line_of(full_text, start), "requirement", arg,
                              canonicalize_name(req.name), start, end))
    return sites


def parse_shell(text: str, path: str = "-") -> list[Site]:
    return _shell_sites(text, text, 0, path)


def _blank(text: str, start: int, end: int) -> str:
    """Replace text[start:end] by spaces, keeping newlines (offsets stay valid)."""
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def parse_markdown(text: str, path: str = "README.md") -> list[Site]:
    """Sites in fenced code blocks and in inline code spans; HTML comments are ignored."""
    work = text
    for m in re.finditer(r"<!--.*?-->", text, re.S):
        work = _blank(work, m.start(), m.end())
    sites: list[Site] = []
    fence = None
    block_start = 0
    prose: list[tuple[int, int]] = []
    prose_start = 0
    for m in re.finditer(r"^.*$", work, re.M):
        line = m.group(0)
        f = re.match(r"\s{0,3}(`{3,}|~{3,})", line)
        if fence is None and f:
            fence = f.group(1)
            block_start = m.end() + 1
            prose.append((prose_start, m.start()))
        elif fence is not None and f and f.group(1)[0] == fence[0] and len(f.group(1)) >= len(fence) \
                and not line.strip()[len(f.group(1)):].strip():
            sites += _shell_sites(work[block_start : m.start()], text, block_start, path)
            fence = None
            prose_start = m.end() + 1
    if fence is None:
        prose.append((prose_start, len(work)))
    for ps, pe in prose:
        for m in re.finditer(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", work[ps:pe], re.S):
            s = ps + m.start(2)
            sites += _shell_sites(work[s : ps + m.end(2)], text, s, path)
    return sorted(sites, key=lambda s: s.start)


def parse_requirements_txt(text: str, path: str = "requirements.txt") -> list[Site]:
    sites = []
    for m in re.finditer(r"^.*$", text, re.M):
        line = re.sub(r"(^|\s)#.*", "", m.group(0)).strip()
        if not line or line.startswith("-"):
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        sites.append(Site(path, _line_of(text, m.start()), "requirement", line,
                          canonicalize_name(req.name), m.start(), m.end()))
    return sites


# CMake ---------------------------------------------------------------------------

_CMAKE_SITES = [
    # find_package(executorch 1.5.1 [EXACT] ...)
    re.compile(r"find_package\s*\(\s*(executorch)\s+([0-9][^\s)]*)", re.I),
    # set(ETRT_EXECUTORCH_VERSION "1.5.1")   (any ETRT_<NAME>_VERSION set to a literal
    # version; a value read at configure time, "${CMAKE_MATCH_1}", is not a pin)
    re.compile(r"set\s*\(\s*ETRT_([A-Z0-9_]+?)_VERSION\s+\"?([0-9][^\s\")]*)\"?", re.I),
]


def parse_cmake(text: str, path: str = "CMakeLists.txt") -> list[Site]:
    work = text
    for m in re.finditer(r"#\[(=*)\[.*?\]\1\]", text, re.S):  # bracket comments
        work = _blank(work, m.start(), m.end())
    for m in re.finditer(r'"(?:\\.|[^"\\])*"|(#[^\n]*)', work):  # line comments
        if m.group(1):
            work = _blank(work, m.start(1), m.end(1))
    sites = []
    for rx in _CMAKE_SITES:
        for m in rx.finditer(work):
            name = canonicalize_name(m.group(1).replace("_", "-"))
            sites.append(Site(path, _line_of(text, m.start()), "cmake", m.group(2), name,
                              m.start(2), m.end(2)))
    return sorted(sites, key=lambda s: s.start)


_PARSERS = {
    "pyproject": parse_pyproject,
    "shell": parse_shell,
    "markdown": parse_markdown,
    "requirements": parse_requirements_txt,
    "cmake": parse_cmake,
}


def parse_file(path: Path, rel: str | None = None, text: str | None = None) -> list[Site]:
    kind = file_kind(path)
    if kind is None:
        raise ValueError(f"{path}: no pin-site parser for this kind of file")
    if text is None:
        text = read_text(path)
    return _PARSERS[kind](text, rel or str(path))


def pinned_sites(sites: list[Site], pins: Pins) -> list[Site]:
    return [s for s in sites if s.name in pins.python]


def site_problem(site: Site, pins: Pins) -> str | None:
    """Why `site` does not pin exactly what pins.toml pins, or None."""
    pin = pins.python[site.name]
    where = f"{site.path}:{site.line}"
    if site.kind == "cmake":
        try:
            ok = Version(site.text) == Version(pin)
        except InvalidVersion:
            ok = False
        if ok:
            return None
        return f"{where}: CMake names {site.name} {site.text!r}, but pins.toml pins {pin}"
    req = Requirement(site.text)
    specs = list(req.specifier)
    found = str(req.specifier) or (f"@ {req.url}" if req.url else "no version")
    if req.url is None and len(specs) == 1 and specs[0].operator == "==" \
            and not specs[0].version.endswith(".*"):
        try:
            if Version(specs[0].version) == Version(pin):
                return None
        except InvalidVersion:
            pass
    return (f"{where}: {site.text!r} requires {site.name}{found}, "
            f"but pins.toml pins {site.name}=={pin}")


def check_file(path: Path, rel: str, expected: int, pins: Pins, text: str | None = None) -> list[str]:
    if text is None and not Path(path).exists():
        return [f"{rel}: listed in tools/release/pins.py SITES but does not exist"]
    sites = pinned_sites(parse_file(path, rel, text), pins)
    problems = [p for s in sites if (p := site_problem(s, pins))]
    if len(sites) != expected:
        found = ", ".join(f"line {s.line} {s.text!r}" for s in sites) or "none"
        problems.append(f"{rel}: expected {expected} pin sites, found {len(sites)} ({found}); "
                        "update SITES in tools/release/pins.py if this was intended")
    return problems


def check(root: Path | str = ROOT, pins: Pins | None = None,
          sites: dict[str, int] | None = None) -> list[str]:
    root = Path(root)
    pins = pins or load_pins(root)
    sites = SITES if sites is None else sites
    problems: list[str] = []
    for rel, expected in sites.items():
        problems += check_file(root / rel, rel, expected, pins)
    return problems


# discovering files that name pins but are not in SITES ------------------------------

# Measurement records name the versions they ran with; a pin move must not rewrite them.
EVIDENCE_DIR = "docs/evidence/"
_SKIP_DIRS = {".git", ".venv", "venv", "build", "dist", "_skbuild", "node_modules", "__pycache__"}


def candidate_files(root: Path | str = ROOT) -> list[str]:
    """Files (relative posix paths) a pin site could live in: tracked or untracked, not ignored."""
    root = Path(root)
    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root,
                             capture_output=True, check=True).stdout.decode()
        files = [f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
            files += [Path(dirpath, f).relative_to(root).as_posix() for f in filenames]
    return sorted(f for f in files if file_kind(f) and (root / f).is_file()
                  and not set(Path(f).parts) & _SKIP_DIRS)


def unlisted_sites(root: Path | str = ROOT, pins: Pins | None = None,
                   sites: dict[str, int] | None = None) -> list[str]:
    root = Path(root)
    pins = pins or load_pins(root)
    sites = SITES if sites is None else sites
    problems = []
    for rel in candidate_files(root):
        if rel in sites or rel == PINS_FILE or rel.startswith(EVIDENCE_DIR):
            continue
        try:
            found = pinned_sites(parse_file(root / rel, rel), pins)
        except (ValueError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        if found:
            lines = ", ".join(f"line {s.line} {s.text!r}" for s in found)
            problems.append(f"{rel}: names pinned versions ({lines}) but is not in SITES in "
                            f"tools/release/pins.py; add \"{rel}\": {len(found)}")
    return problems
