"""tools/release/update_pins.py against a synthetic simple index served on 127.0.0.1."""

from __future__ import annotations

import hashlib
import html
import io
import json
import os
import socket
import subprocess
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "release"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import pins as pinslib  # noqa: E402
import update_pins  # noqa: E402
from test_pins import SYNTHETIC_SITES, make_repo  # noqa: E402

PINS = pinslib.load_pins(REPO)
OLD = PINS.python["executorch"]
OLD_SHA = PINS.git_version
NEW_SHA = "0123456789abcdef0123456789abcdef01234567"
HERE_TAG = "cp311-cp311-manylinux_2_28_x86_64"
OTHER_TAG = "cp311-cp311-macosx_14_0_arm64"


def version_py(version: str, sha: str) -> str:
    return ("from typing import Optional\n"
            "__all__ = [\"__version__\", \"git_version\"]\n"
            f"__version__ = \"{version}+cpu\"\n"
            f"git_version: Optional[str] = '{sha}'\n")


def wheel(version: str, sha: str = NEW_SHA, tag: str = HERE_TAG, source: str | None = None,
          local: str = "") -> tuple[str, bytes]:
    name = f"executorch-{version}{local}-{tag}.whl"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        if source is not False:
            z.writestr("executorch/version.py", version_py(version, sha) if source is None else source)
        z.writestr("executorch/__init__.py", "")
        z.writestr(f"executorch-{version}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: executorch\nVersion: {version}\n")
    return name, buf.getvalue()


class Index:
    """A PEP 503 (HTML) / PEP 691 (JSON) index of one project, executorch."""

    def __init__(self):
        self.mode = "json"  # "json": answers JSON when asked; "html": an HTML-only index
        self.files: list[dict] = []  # filename, data, yanked, sha256 (override)
        self.requests: list[str] = []
        self.served: list[str] = []  # which form each project page was answered in
        self.project = "executorch"

    def add(self, filename: str, data: bytes, yanked: bool | str = False, sha256: str | None = None):
        self.files.append({"filename": filename, "data": data, "yanked": yanked,
                           "sha256": sha256 or hashlib.sha256(data).hexdigest()})

    def add_wheel(self, *args, **kw):
        yanked = kw.pop("yanked", False)
        sha256 = kw.pop("sha256", None)
        self.add(*wheel(*args, **kw), yanked=yanked, sha256=sha256)

    def downloads(self) -> list[str]:
        return [r.rsplit("/", 1)[-1] for r in self.requests if r.startswith("/files/")]


@pytest.fixture
def index(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    idx = Index()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, code: int, ctype: str, body: bytes):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            idx.requests.append(self.path)
            if self.path.startswith("/files/"):
                for f in idx.files:
                    if self.path == "/files/" + f["filename"]:
                        return self._send(200, "application/octet-stream", f["data"])
                return self._send(404, "text/plain", b"no such file")
            if self.path != f"/simple/{idx.project}/":
                return self._send(404, "text/plain", b"not found")
            accept = self.headers.get("Accept", "")
            if idx.mode == "json" and "application/vnd.pypi.simple.v1+json" in accept:
                body = {"meta": {"api-version": "1.0"}, "name": idx.project, "files": [
                    {"filename": f["filename"], "url": f"../../files/{f['filename']}",
                     "hashes": {"sha256": f["sha256"]}, "yanked": f["yanked"]} for f in idx.files]}
                idx.served.append("json")
                return self._send(200, "application/vnd.pypi.simple.v1+json", json.dumps(body).encode())
            links = []
            for f in idx.files:
                attrs = f' data-yanked="{html.escape(f["yanked"] if isinstance(f["yanked"], str) else "")}"' \
                    if f["yanked"] else ""
                links.append(f'<a href="../../files/{f["filename"]}#sha256={f["sha256"]}"{attrs}>'
                             f'{f["filename"]}</a><br/>')
            body = ("<!DOCTYPE html><html><body><h1>Links for executorch</h1>\n"
                    + "\n".join(links) + "\n</body></html>\n")
            idx.served.append("html")
            return self._send(200, "text/html; charset=utf-8", body.encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    idx.url = f"http://127.0.0.1:{server.server_address[1]}/simple"
    try:
        yield idx
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    return make_repo(root)


def snapshot(root: Path) -> dict[str, bytes]:
    return {rel: (root / rel).read_bytes() for rel in ["pins.toml", *SYNTHETIC_SITES]}


def run(repo: Path, index: Index, *args: str) -> int:
    return update_pins.main(["--root", str(repo), "--index-url", index.url, *args], sites=SYNTHETIC_SITES)


def expected_after(before: dict[str, bytes], new: str, sha: str = NEW_SHA) -> dict[str, bytes]:
    """What every file must be after moving executorch OLD -> new: only the pin changes."""
    out = {}
    for rel, data in before.items():
        text = data.decode()
        if rel == "pins.toml":
            text = text.replace(f'executorch = "{OLD}"', f'executorch = "{new}"').replace(OLD_SHA, sha)
        elif rel.endswith("CMakeLists.txt"):
            text = text.replace(f'ETRT_EXECUTORCH_VERSION "{OLD}"', f'ETRT_EXECUTORCH_VERSION "{new}"')
        else:
            text = text.replace(f"executorch=={OLD}", f"executorch=={new}")
        out[rel] = text.encode()
    return out


# ------------------------------------------------------------------------ cases


@pytest.mark.parametrize("mode", ["json", "html"])
def test_newer_release_rewrites_pins_and_every_site(repo, index, capsys, mode):
    index.mode = mode
    index.add_wheel(OLD, OLD_SHA)
    index.add_wheel("1.6.0", tag=OTHER_TAG, sha="f" * 40)  # same release, other platform
    index.add_wheel("1.6.0")
    index.add("executorch-1.6.0.tar.gz", b"sdist")
    before = snapshot(repo)
    assert run(repo, index) == 0
    out = capsys.readouterr().out
    assert f"executorch {OLD} -> 1.6.0 (git_version {NEW_SHA})" in out
    after = snapshot(repo)
    assert after == expected_after(before, "1.6.0")
    for rel in SYNTHETIC_SITES:  # every site moved, none lost
        assert after[rel] != before[rel], rel
    new_pins = pinslib.load_pins(repo)
    assert new_pins.python["executorch"] == "1.6.0" and new_pins.git_version == NEW_SHA
    assert pinslib.check(repo, new_pins, SYNTHETIC_SITES) == []
    # exactly one wheel was downloaded: the one for this platform
    assert index.downloads() == [f"executorch-1.6.0-{HERE_TAG}.whl"]
    assert index.served == [mode]


def test_html_index_is_used_when_json_is_not_offered(repo, index):
    index.mode = "html"
    index.add_wheel("1.7.0", tag=OTHER_TAG)
    assert run(repo, index) == 0
    assert pinslib.load_pins(repo).python["executorch"] == "1.7.0"
    assert index.downloads() == [f"executorch-1.7.0-{OTHER_TAG}.whl"]  # none matches: any wheel


@pytest.mark.parametrize("mode", ["json", "html"])
def test_no_newer_release_rewrites_nothing(repo, index, capsys, mode):
    index.mode = mode
    index.add_wheel("1.0.0")
    index.add_wheel(OLD, OLD_SHA)
    index.add_wheel(OLD, OLD_SHA, local="+cu130")  # a local-version variant is the same release
    before = snapshot(repo)
    assert run(repo, index) == 0
    assert f"executorch is already at the newest release {OLD}" in capsys.readouterr().out
    assert snapshot(repo) == before
    assert index.downloads() == []


def test_older_release_is_refused_unless_allowed(repo, index, capsys):
    index.add_wheel("1.0.0", sha="a" * 40)
    before = snapshot(repo)
    assert run(repo, index) == 1
    err = capsys.readouterr().err
    assert "older than the pinned" in err and "--allow-downgrade" in err
    assert snapshot(repo) == before
    assert run(repo, index, "--allow-downgrade") == 0
    assert snapshot(repo) == expected_after(before, "1.0.0", "a" * 40)


@pytest.mark.parametrize("mode", ["json", "html"])
def test_pre_release_needs_pre(repo, index, capsys, mode):
    index.mode = mode
    index.add_wheel(OLD, OLD_SHA)
    index.add_wheel("1.6.0rc1")
    index.add_wheel("1.6.0.dev20260101")
    before = snapshot(repo)
    assert run(repo, index) == 0
    assert "already at the newest release" in capsys.readouterr().out
    assert snapshot(repo) == before
    assert run(repo, index, "--pre") == 0
    assert snapshot(repo) == expected_after(before, "1.6.0rc1")


@pytest.mark.parametrize("mode", ["json", "html"])
def test_yanked_release_is_ignored(repo, index, capsys, mode):
    index.mode = mode
    index.add_wheel(OLD, OLD_SHA)
    index.add_wheel("1.6.0", yanked="broken build")
    index.add_wheel("1.6.1", yanked=True)
    before = snapshot(repo)
    assert run(repo, index) == 0
    assert f"already at the newest release {OLD}" in capsys.readouterr().out
    assert snapshot(repo) == before
    assert index.downloads() == []


@pytest.mark.parametrize("mode", ["json", "html"])
def test_hash_mismatch_is_an_error(repo, index, capsys, mode):
    index.mode = mode
    index.add_wheel("1.6.0", sha256="0" * 64)
    before = snapshot(repo)
    assert run(repo, index) == 1
    err = capsys.readouterr().err
    assert "hash mismatch" in err and "0" * 64 in err
    assert snapshot(repo) == before


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ERRORS = {
    "project-missing": "not found on index",
    "no-wheels": "has no wheel",
    "no-files": "lists no usable executorch",
    "version-py-missing": "has no executorch/version.py",
    "version-py-unparsable": "cannot parse executorch/version.py",
    "version-py-no-git-version": "does not assign git_version",
    "version-py-wrong-version": "expected 1.6.0",
    "not-a-zip": "not a valid wheel",
    "index-unreachable": "cannot reach index",
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_clear_errors(repo, index, capsys, case):
    if case == "project-missing":
        index.project = "something-else"
    elif case == "no-wheels":
        index.add("executorch-1.6.0.tar.gz", b"sdist")
    elif case == "no-files":
        index.add("executorch-1.6.0rc1.tar.gz", b"sdist")
    elif case == "version-py-missing":
        index.add_wheel("1.6.0", source=False)
    elif case == "version-py-unparsable":
        index.add_wheel("1.6.0", source="__version__ = '1.6.0\n")
    elif case == "version-py-no-git-version":
        index.add_wheel("1.6.0", source="__version__ = '1.6.0'\ngit_version = compute()\n")
    elif case == "version-py-wrong-version":
        index.add_wheel("1.6.0", source=version_py("1.5.9", NEW_SHA))
    elif case == "not-a-zip":
        index.add(f"executorch-1.6.0-{HERE_TAG}.whl", b"not a zip")
    elif case == "index-unreachable":
        index.url = f"http://127.0.0.1:{_free_port()}/simple"
    before = snapshot(repo)
    assert run(repo, index) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and ERRORS[case] in err, err
    assert "Traceback" not in err
    assert snapshot(repo) == before


def test_dry_run_writes_nothing(repo, index, capsys):
    index.add_wheel("1.6.0")
    before = snapshot(repo)
    assert run(repo, index, "--dry-run") == 0
    out = capsys.readouterr().out
    assert snapshot(repo) == before
    for rel in ["pins.toml", *SYNTHETIC_SITES]:
        assert f"would rewrite {rel}" in out


def test_inconsistent_tree_is_refused_before_asking_the_index(repo, index, capsys):
    index.add_wheel("1.6.0")
    text = (repo / ".ci/run").read_text().replace(f"executorch=={OLD}", "executorch>=1.0")
    (repo / ".ci/run").write_text(text)
    before = snapshot(repo)
    assert run(repo, index) == 1
    assert "fix them first" in capsys.readouterr().err
    assert snapshot(repo) == before and index.requests == []


def test_crlf_files_stay_byte_identical(repo, index):
    for rel in [".ci/run", "README.md"]:
        (repo / rel).write_bytes((repo / rel).read_bytes().replace(b"\n", b"\r\n"))
    index.add_wheel("1.6.0")
    before = snapshot(repo)
    assert run(repo, index) == 0
    assert snapshot(repo) == expected_after(before, "1.6.0")


def test_command_line_on_a_copy_of_this_repository(tmp_path, index):
    """The script itself, with the real SITES table, on copies of the real files."""
    for rel in ["pins.toml", *pinslib.SITES]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes((REPO / rel).read_bytes())
    index.add_wheel("9.0.0", sha="b" * 40)
    before = {rel: (tmp_path / rel).read_bytes() for rel in ["pins.toml", *pinslib.SITES]}
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    proc = subprocess.run([sys.executable, str(REPO / "tools/release/update_pins.py"), "--root", str(tmp_path),
                           "--index-url", index.url], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"executorch {OLD} -> 9.0.0" in proc.stdout
    pins = pinslib.load_pins(tmp_path)
    assert pins.python["executorch"] == "9.0.0" and pins.git_version == "b" * 40
    assert pinslib.check(tmp_path, pins) == []
    for rel in pinslib.SITES:
        if pinslib.file_kind(rel) == "cmake":
            continue
        old_text = before[rel].decode()
        assert (tmp_path / rel).read_bytes().decode() == old_text.replace(f"executorch=={OLD}", "executorch==9.0.0")
    # the real repository was not touched
    assert pinslib.load_pins(REPO).python["executorch"] == OLD
