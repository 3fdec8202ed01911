#!/usr/bin/env python3
"""Move the executorch pin to the newest release on a Python package index.

    python tools/release/update_pins.py [--index-url URL] [--pre] [--allow-downgrade] [--dry-run] [--root DIR]

Asks a PEP 503/691 simple index for the executorch project, picks the newest
release (pre-releases only with --pre, yanked files ignored), downloads one wheel
of it, reads ``executorch/version.py`` out of the wheel (``__version__`` and
``git_version``), and rewrites ``pins.toml`` and every pin site listed in
``tools/release/pins.py`` (SITES). Nothing is written unless every file can be rewritten
and the result passes the same checks as tests/tools/test_pins.py.

Only the standard library and ``packaging`` are used.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import io
import json
import re
import sys
import tomllib
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from packaging.tags import sys_tags
from packaging.utils import (InvalidSdistFilename, InvalidWheelFilename, canonicalize_name,
                             parse_sdist_filename, parse_wheel_filename)
from packaging.version import InvalidVersion, Version

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pins as pinslib  # noqa: E402

DEFAULT_INDEX = "https://pypi.org/simple"
PROJECT = "executorch"
VERSION_PY = "executorch/version.py"
ACCEPT = ("application/vnd.pypi.simple.v1+json, "
          "application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1")


class UpdateError(Exception):
    """A failure with a message meant for the user."""


# ----------------------------------------------------------------------------- index


@dataclass
class IndexFile:
    filename: str
    url: str
    hashes: dict[str, str] = field(default_factory=dict)
    yanked: bool = False
    version: Version | None = None
    is_wheel: bool = False


class _AnchorParser(HTMLParser):
    def __init__(self):
        super().__init__()
        self.anchors: list[tuple[dict[str, str | None], str]] = []
        self._current: dict | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._current = dict(attrs)
            self._text = []

    def handle_data(self, data):
        if self._current is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._current is not None:
            self.anchors.append((self._current, "".join(self._text).strip()))
            self._current = None


def _open(url: str, accept: str | None = None, timeout: float = 60):
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    return urllib.request.urlopen(req, timeout=timeout)


def fetch_project_files(index_url: str, project: str = PROJECT) -> list[IndexFile]:
    url = index_url.rstrip("/") + "/" + canonicalize_name(project) + "/"
    try:
        with _open(url, ACCEPT) as resp:
            body = resp.read()
            ctype = resp.headers.get("Content-Type", "")
            final_url = resp.geturl()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise UpdateError(f"project {project!r} not found on index {index_url} ({url}: HTTP 404)") from None
        raise UpdateError(f"index {index_url} answered HTTP {e.code} {e.reason} for {url}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise UpdateError(f"cannot reach index {index_url}: {reason}") from None

    files: list[IndexFile] = []
    if "json" in ctype.split(";")[0]:
        try:
            data = json.loads(body)
            entries = data["files"]
        except (ValueError, KeyError, TypeError) as e:
            raise UpdateError(f"index {index_url}: unreadable JSON project page {url}: {e}") from None
        for entry in entries:
            href = entry.get("url", "")
            full = urllib.parse.urljoin(final_url, href)
            hashes = dict(entry.get("hashes") or {})
            files.append(IndexFile(entry.get("filename") or _basename(full), _defrag(full),
                                   hashes, bool(entry.get("yanked", False))))
    else:
        parser = _AnchorParser()
        parser.feed(body.decode("utf-8", "replace"))
        for attrs, text in parser.anchors:
            href = attrs.get("href")
            if not href:
                continue
            full = urllib.parse.urljoin(final_url, href)
            hashes = {}
            frag = urllib.parse.urldefrag(full).fragment
            if "=" in frag:
                algo, _, value = frag.partition("=")
                hashes[algo] = value
            files.append(IndexFile(text or _basename(full), _defrag(full), hashes,
                                   "data-yanked" in attrs))

    name = canonicalize_name(project)
    for f in files:
        try:
            if f.filename.endswith(".whl"):
                n, v, _, _ = parse_wheel_filename(f.filename)
                f.is_wheel = True
            else:
                n, v = parse_sdist_filename(f.filename)
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            continue
        if n == name:
            f.version = v
    return [f for f in files if f.version is not None]


def _defrag(url: str) -> str:
    return urllib.parse.urldefrag(url).url


def _basename(url: str) -> str:
    return urllib.parse.unquote(urllib.parse.urlparse(url).path.rsplit("/", 1)[-1])


def public(v: Version) -> Version:
    return Version(v.public)


def newest_release(files: list[IndexFile], pre: bool) -> tuple[Version, list[IndexFile]]:
    releases: dict[Version, list[IndexFile]] = {}
    for f in files:
        if f.yanked or (f.version.is_prerelease and not pre):
            continue
        releases.setdefault(public(f.version), []).append(f)
    if not releases:
        what = "releases" if pre else "final releases (pre-releases need --pre)"
        raise UpdateError(f"the index lists no usable {PROJECT} {what}")
    newest = max(releases)
    return newest, releases[newest]


def pick_wheel(files: list[IndexFile], version: Version) -> IndexFile:
    wheels = [f for f in files if f.is_wheel]
    if not wheels:
        names = ", ".join(f.filename for f in files)
        raise UpdateError(f"{PROJECT} {version} has no wheel on the index (files: {names})")
    rank = {str(t): i for i, t in enumerate(sys_tags())}

    def key(f: IndexFile):
        _, _, _, tags = parse_wheel_filename(f.filename)
        best = min((rank.get(str(t), len(rank)) for t in tags), default=len(rank))
        return (best, f.filename)

    return min(wheels, key=key)


def download(f: IndexFile) -> bytes:
    try:
        with _open(f.url, timeout=600) as resp:
            data = resp.read()
    except urllib.error.HTTPError as e:
        raise UpdateError(f"downloading {f.url} failed: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise UpdateError(f"downloading {f.url} failed: {getattr(e, 'reason', e)}") from None
    checked = False
    for algo, expected in f.hashes.items():
        if algo not in hashlib.algorithms_guaranteed:
            continue
        got = hashlib.new(algo, data).hexdigest()
        if got.lower() != str(expected).lower():
            raise UpdateError(f"hash mismatch for {f.filename}: index says {algo}={expected}, "
                              f"downloaded file has {algo}={got}")
        checked = True
    if not checked:
        print(f"note: the index gives no usable hash for {f.filename}; not verified")
    return data


def read_version_py(wheel: bytes, filename: str) -> tuple[str, str]:
    """(__version__, git_version) from executorch/version.py inside the wheel."""
    try:
        with zipfile.ZipFile(io.BytesIO(wheel)) as z:
            source = z.read(VERSION_PY)
    except zipfile.BadZipFile:
        raise UpdateError(f"{filename} is not a valid wheel (not a zip file)") from None
    except KeyError:
        raise UpdateError(f"{filename} has no {VERSION_PY}") from None
    try:
        tree = ast.parse(source, VERSION_PY)
    except (SyntaxError, ValueError) as e:
        raise UpdateError(f"{filename}: cannot parse {VERSION_PY}: {e}") from None
    values: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant) \
                and isinstance(value.value, str):
            values[target.id] = value.value
    missing = [k for k in ("__version__", "git_version") if k not in values]
    if missing:
        raise UpdateError(f"{filename}: {VERSION_PY} does not assign {' and '.join(missing)} "
                          "as a string literal")
    return values["__version__"], values["git_version"]


# ----------------------------------------------------------------------------- rewriting


def _name_regex(name: str) -> str:
    return "[-_.]+".join(re.escape(p) for p in re.split(r"[-_.]+", name))


def rewrite_sites(text: str, sites: list[pinslib.Site], name: str, new_version: str) -> str:
    """Replace the version in every site of `name` in `text`; everything else stays as is."""
    mine = [s for s in sites if s.name == name]
    by_span: dict[tuple[int, int], list[pinslib.Site]] = {}
    for s in mine:
        by_span.setdefault((s.start, s.end), []).append(s)
    for (start, end), group in sorted(by_span.items(), reverse=True):
        chunk = text[start:end]
        if group[0].kind == "cmake":
            new_chunk, n = new_version, 1
        else:
            olds = {str(next(iter(s.requirement().specifier)).version) for s in group}
            n = 0
            new_chunk = chunk
            for old in olds:
                rx = re.compile(r"(?<![\w.-])(" + _name_regex(name) + r"\s*(?:\[[^\]]*\])?\s*==\s*)"
                                + re.escape(old) + r"(?![\w.+!*-])", re.I)
                new_chunk, k = rx.subn(lambda m: m.group(1) + new_version, new_chunk)
                n += k
        if n != len(group):
            s = group[0]
            raise UpdateError(f"{s.path}:{s.line}: found {len(group)} {name} pin(s) but could "
                              f"rewrite {n} in {chunk!r}; edit it by hand")
        text = text[:start] + new_chunk + text[end:]
    return text


def rewrite_pins_toml(text: str, version: str, git_version: str) -> str:
    """Replace [python] executorch and [executorch] git_version; keep every other byte."""
    section = None
    out = []
    done = set()
    for line in text.splitlines(keepends=True):
        head = re.match(r"\s*\[([^\]]+)\]", line)
        key = re.match(r"(\s*([\"']?)([A-Za-z0-9._-]+)\2\s*=\s*)([\"'])[^\"'\n]*\4", line)
        if head:
            section = head.group(1).strip()
        elif key and section == "python" and canonicalize_name(key.group(3)) == PROJECT:
            line = key.group(1) + key.group(4) + version + key.group(4) + line[key.end():]
            done.add("version")
        elif key and section == "executorch" and key.group(3) == "git_version":
            line = key.group(1) + key.group(4) + git_version + key.group(4) + line[key.end():]
            done.add("git_version")
        out.append(line)
    if done != {"version", "git_version"}:
        raise UpdateError("pins.toml: could not find the [python] executorch and "
                          "[executorch] git_version lines")
    return "".join(out)


# ----------------------------------------------------------------------------- main


def update(root: Path, index_url: str, pre: bool, allow_downgrade: bool, dry_run: bool,
           sites: dict[str, int] | None = None) -> int:
    sites = pinslib.SITES if sites is None else sites
    pins = pinslib.load_pins(root)
    problems = pinslib.check(root, pins, sites)
    if problems:
        raise UpdateError("the pin sites do not match pins.toml; fix them first:\n  "
                          + "\n  ".join(problems))
    current = Version(pins.python[PROJECT])

    files = fetch_project_files(index_url)
    if not files:
        raise UpdateError(f"the index lists no {PROJECT} files")
    newest, newest_files = newest_release(files, pre)
    if newest == public(current):
        print(f"{PROJECT} is already at the newest release {newest}")
        return 0
    if newest < public(current) and not allow_downgrade:
        print(f"error: the newest {PROJECT} release on {index_url} is {newest}, older than the "
              f"pinned {current}; refusing to downgrade (use --allow-downgrade)", file=sys.stderr)
        return 1

    wheel = pick_wheel(newest_files, newest)
    print(f"reading {wheel.filename}")
    data = download(wheel)
    wheel_version, git_version = read_version_py(data, wheel.filename)
    try:
        if public(Version(wheel_version)) != newest:
            raise UpdateError(f"{wheel.filename}: {VERSION_PY} says __version__ = {wheel_version!r}, "
                              f"expected {newest}")
    except InvalidVersion:
        raise UpdateError(f"{wheel.filename}: {VERSION_PY} has an invalid __version__ "
                          f"{wheel_version!r}") from None
    if not re.fullmatch(r"[0-9a-f]{40}", git_version):
        raise UpdateError(f"{wheel.filename}: {VERSION_PY} git_version {git_version!r} is not a commit")
    new = str(newest)

    # Compute every new file first; write only if all of them check out.
    new_texts: dict[str, str] = {}
    old_pins = pinslib.read_text(root / pinslib.PINS_FILE)
    new_texts[pinslib.PINS_FILE] = rewrite_pins_toml(old_pins, new, git_version)
    new_pins = pinslib.Pins({**pins.python, PROJECT: new}, git_version)
    parsed = tomllib.loads(new_texts[pinslib.PINS_FILE])
    if pinslib.Pins({canonicalize_name(k): v for k, v in parsed["python"].items()},
                    parsed["executorch"]["git_version"]) != new_pins:
        raise UpdateError("pins.toml: rewriting changed more than the executorch pin")
    problems = []
    for rel, expected in sites.items():
        path = root / rel
        text = pinslib.read_text(path)
        found = pinslib.parse_file(path, rel, text)
        new_texts[rel] = rewrite_sites(text, found, PROJECT, new)
        problems += pinslib.check_file(path, rel, expected, new_pins, new_texts[rel])
    if problems:
        raise UpdateError("the rewritten files would not pass the pin checks:\n  " + "\n  ".join(problems))

    print(f"{PROJECT} {current} -> {new} (git_version {git_version})")
    for rel, text in new_texts.items():
        path = root / rel
        if pinslib.read_text(path) == text:
            continue
        if dry_run:
            print(f"would rewrite {rel}")
        else:
            path.write_bytes(text.encode("utf-8"))
            print(f"rewrote {rel}")
    return 0


def main(argv: list[str] | None = None, sites: dict[str, int] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index-url", default=DEFAULT_INDEX, help=f"simple index (default {DEFAULT_INDEX})")
    ap.add_argument("--pre", action="store_true", help="consider pre-releases")
    ap.add_argument("--allow-downgrade", action="store_true",
                    help="move the pin even if the newest release is older than it")
    ap.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")
    ap.add_argument("--root", type=Path, default=pinslib.ROOT, help="repository root (default: this repo)")
    args = ap.parse_args(argv)
    try:
        return update(args.root, args.index_url, args.pre, args.allow_downgrade, args.dry_run, sites)
    except UpdateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
