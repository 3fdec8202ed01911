"""An export that fails leaves every earlier file byte-for-byte as it was, and
no temporary file behind (output_files.py, aot/export_files.py).

Real exports over an earlier set (m.pte, m.ptd, m.report.json, m.expected,
m.expected.etensors of another model). A real full disk: a small tmpfs mounted
in a private mount namespace (`unshare`, so the mount dies with the child
process), sized in pages so that the file system fills while export writes
each file of its set in turn. Real kills: SIGKILL from this process while the
export child waits on one of its own progress lines. Real read-only and
permission-denied folders, a folder removed mid-export, two exports racing
for one path. After each: the earlier files hash as before, the earlier
program verifies against its reference, and no `.etrt-*` entry remains."""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
import torch

from helpers import FALLBACK, child_env, cli_main
from executorch_tensorrt import cli
from executorch_tensorrt.aot.export import RunCheckError, export_program
from executorch_tensorrt.errors import OutputWriteError

PAGE = 4096
TESTS = Path(__file__).resolve().parent.parent
X = torch.randn(2, 64, generator=torch.Generator().manual_seed(0))
XW = torch.randn(2, 256, generator=torch.Generator().manual_seed(0))
# The order export writes its set in (program, weights, report, reference).
NEW_SET = ["m.pte", "m.ptd", "m.report.json", "m.expected.etensors", "m.expected"]


class Small(torch.nn.Module):
    def __init__(self, out: int = 4, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.fc = torch.nn.Linear(64, out)  # 1 kB and more: weights in a .ptd

    def forward(self, x):
        return torch.relu(self.fc(x))


class Wide(torch.nn.Module):
    """Some 320 kB of weights: each file of its set is a distinct number of pages."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.fc = torch.nn.Linear(256, 320)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Noisy(torch.nn.Module):
    """Exports and runs, but its output is random: it fails the run check."""

    def forward(self, x):
        return torch.relu(x) + torch.rand_like(x)


def listing(folder: Path) -> dict[str, str]:
    """relative path -> sha256 (or "<dir>") of everything under `folder`."""
    found = {}
    for p in sorted(Path(folder).rglob("*")):
        rel = str(p.relative_to(folder))
        found[rel] = "<dir>" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return found


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in Path(folder).iterdir() if p.name.startswith(".etrt-"))


def copy_set(source: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for p in source.iterdir():
        shutil.copy2(p, dest / p.name)
    return dest / "m.pte"


def matches_reference(pte: Path) -> tuple[int, str]:
    """Runs the program on its stored inputs (`run --outputs`, into a folder of
    its own) and compares every element with its reference (`verify`)."""
    outputs = Path(tempfile.mkdtemp(prefix="etrt-test-outputs-"))
    try:
        code, out, err = cli_main("run", pte, "--outputs", outputs / "out.etensors")
        if code == 0:
            code, out2, err2 = cli_main("verify", pte, outputs / "out.etensors")
            out, err = out + out2, err + err2
        return code, out + err
    finally:
        shutil.rmtree(outputs, ignore_errors=True)


def verify(pte: Path) -> None:
    code, text = matches_reference(pte)
    assert code == 0 and "in every element" in text, text


def pages(nbytes: int) -> int:
    return math.ceil(nbytes / PAGE)


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> Path:
    """The earlier set: Small with external weights, every companion."""
    folder = tmp_path_factory.mktemp("earlier")
    export_program(Small(), (X,), folder / "m.pte", progress=None, external_weights=True,
                   run_check=False)
    assert sorted(p.name for p in folder.iterdir()) == sorted(NEW_SET)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(*next(iter(FALLBACK.items())))
        verify(folder / "m.pte")
    return folder


# ---- a full disk, a read-only and a forbidden folder, in a mount namespace ----------

NAMESPACE_CHILD = r"""
import contextlib, hashlib, io, json, os, shutil, subprocess, sys, traceback
from pathlib import Path

cfg = json.loads(sys.stdin.read())
sys.path[:0] = cfg["paths"]
from test_export_atomic import Wide, XW, listing, matches_reference
from executorch_tensorrt.aot.export import export_program

mount, earlier = Path(cfg["mount"]), Path(cfg["earlier"])
results = {}
for sc in cfg["scenarios"]:
    r = results[sc["name"]] = {}
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={sc['pages'] * 4096},mode=0755",
                    "tmpfs", str(mount)], check=True)
    for p in earlier.iterdir():
        shutil.copy2(p, mount / p.name)
    if sc["mode"] == "full":  # nothing left at all
        with contextlib.suppress(OSError), open(mount / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    st = os.statvfs(mount)
    r["free_pages"] = st.f_bavail * st.f_frsize // 4096
    r["before"] = listing(mount)
    if sc["mode"] == "ro":
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
    if sc["mode"] == "setuid":  # the last scenario: this cannot be undone
        os.setgid(65534)
        os.setuid(65534)
    messages = r["messages"] = []
    try:
        if sc["mode"] == "full":
            run = subprocess.run([sys.executable, "-m", "executorch_tensorrt", "export",
                                  "--example", "add", str(mount / "add.pte")],
                                 capture_output=True, text=True)
            r["cli"] = [run.returncode, run.stdout[-3000:], run.stderr[-3000:]]
        else:
            export_program(Wide(), (XW,), mount / "m.pte", progress=messages.append,
                           external_weights=sc["external_weights"], run_check=False)
        r["error"] = None
    except Exception as e:
        r["error"] = {"types": [t.__name__ for t in type(e).__mro__], "text": str(e),
                      "path": getattr(e, "path", None),
                      "traceback": traceback.format_exc()[-3000:]}
    r["after"] = listing(mount)
    if (mount / "m.pte").exists():
        r["verify"] = matches_reference(mount / "m.pte")
    if sc["mode"] != "setuid":
        subprocess.run(["umount", str(mount)], check=True)
print("RESULT " + json.dumps(results), flush=True)
"""


def in_mount_namespace(script: str, payload: dict, timeout: int = 900) -> dict:
    """Runs `script` (reading `payload` as JSON on stdin) in a private mount
    namespace: as root `unshare --mount`, else in a user namespace as its root."""
    prefix = (["unshare", "--mount", "--propagation", "private"] if os.geteuid() == 0 else
              ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"])
    if shutil.which("unshare") is None:
        pytest.fail("these tests need `unshare` (util-linux) to mount a small tmpfs in a "
                    "private mount namespace; install util-linux")
    run = subprocess.run([*prefix, sys.executable, "-c", script], input=json.dumps(payload),
                         capture_output=True, text=True, timeout=timeout,
                         env=child_env(**FALLBACK))
    lines = [l for l in run.stdout.splitlines() if l.startswith("RESULT ")]
    if run.returncode != 0 or not lines:
        pytest.fail(f"the mount-namespace child failed ({' '.join(prefix)}, exit "
                    f"{run.returncode}); a private tmpfs is needed for these tests (as root: "
                    "unshare --mount; otherwise user namespaces must be enabled). stderr:\n"
                    + run.stderr[-4000:])
    return json.loads(lines[-1][len("RESULT "):])


def set_pages(folder: Path) -> dict[str, int]:
    return {p.name: pages(p.stat().st_size) for p in folder.iterdir()}


@pytest.fixture(scope="module")
def plan(earlier, tmp_path_factory):
    """The tmpfs size of each scenario, from the new set measured in a normal folder."""
    weights = sum(t.numel() * t.element_size() for t in Wide().state_dict().values())
    measured = {}
    for ew in (False, True):
        folder = tmp_path_factory.mktemp(f"measure-{int(ew)}")
        export_program(Wide(), (XW,), folder / "m.pte", progress=None, external_weights=ew,
                       run_check=False)
        measured[ew] = set_pages(folder)
    base = sum(set_pages(earlier).values())  # the earlier set is copied in first
    scenarios = []
    # The inline program: the weights pass the free-space check, the rest does not fit.
    free = measured[False]["m.pte"] - 1
    assert free * PAGE >= weights, (measured, weights)
    scenarios.append({"name": "m.pte", "free": free, "external_weights": False})
    # External weights: everything before the file fits, the file does not.
    for i, name in enumerate(NEW_SET[1:], 1):
        free = sum(measured[True][n] for n in NEW_SET[:i]) + measured[True][name] - 1
        assert free * PAGE >= weights, (name, measured, weights)
        scenarios.append({"name": name, "free": free, "external_weights": True})
    scenarios.append({"name": "precheck", "free": pages(weights) - 8, "external_weights": True})
    scenarios.append({"name": "read-only", "free": 400, "external_weights": False,
                      "mode": "ro"})
    scenarios.append({"name": "cli", "free": 4, "mode": "full"})
    if os.geteuid() == 0:
        scenarios.append({"name": "permission", "free": 400, "external_weights": False,
                          "mode": "setuid"})
    for sc in scenarios:
        sc["pages"] = base + sc["free"]
        sc.setdefault("mode", "rw")
        sc.setdefault("external_weights", False)
    return scenarios, weights


@pytest.fixture(scope="module")
def namespace_run(plan, earlier):
    """Every tmpfs scenario in one child (one import of torch); its failure is
    kept, so that each test fails with it rather than running the child again."""
    scenarios, weights = plan
    # The mount point's parents must let the unprivileged user of the
    # permission scenario through (pytest's own folders are 0700).
    mount = Path(tempfile.mkdtemp(prefix="etrt-test-tmpfs-"))
    mount.chmod(0o755)
    try:
        results = in_mount_namespace(NAMESPACE_CHILD, {
            "paths": [str(TESTS), str(TESTS / "aot")], "mount": str(mount),
            "earlier": str(earlier), "scenarios": scenarios})
        assert list(mount.iterdir()) == []  # the mount died with the namespace
        return results, {sc["name"]: sc for sc in scenarios}, mount, weights
    except BaseException as e:  # noqa: BLE001 - reported by each test below
        return e
    finally:
        shutil.rmtree(mount, ignore_errors=True)


@pytest.fixture
def namespace(namespace_run):
    if isinstance(namespace_run, BaseException):
        pytest.fail(f"the tmpfs scenarios could not run: {namespace_run}")
    return namespace_run


def assert_earlier_intact(r: dict, earlier: Path) -> None:
    want = listing(earlier)
    assert r["before"] == want
    assert r["after"] == want, {k: v for k, v in r["after"].items() if want.get(k) != v}
    code, text = r["verify"]
    assert code == 0 and "in every element" in text, text


@pytest.mark.parametrize("name", NEW_SET)
def test_disk_full_while_writing_each_file_leaves_the_earlier_set(namespace, earlier, name):
    results, scenarios, mount, _ = namespace
    r = results[name]
    assert r["free_pages"] == scenarios[name]["free"]
    assert r["error"] is not None, "export succeeded on a file system too small for it"
    assert "OutputWriteError" in r["error"]["types"] and "ExportError" in r["error"]["types"]
    text = r["error"]["text"]
    assert text.startswith(f"could not write {mount / name}: the file system is full"), \
        r["error"]["traceback"]
    assert ".etrt-" not in text and "To fix:" in text
    assert r["error"]["path"] == str(mount / name)
    # The files before it were written (into staging): export got as far as this one.
    assert "partitioning and building TensorRT engines..." in r["messages"]
    assert_earlier_intact(r, earlier)


def test_free_space_is_checked_before_lowering(namespace, earlier):
    results, scenarios, mount, weights = namespace
    r = results["precheck"]
    assert r["free_pages"] * PAGE < weights
    text = r["error"]["text"]
    assert "OutputWriteError" in r["error"]["types"]
    assert text.startswith(f"not enough free space for m.pte (its weights alone) in {mount}: "
                           f"it needs at least {weights:,} bytes and "
                           f"{r['free_pages'] * PAGE:,} bytes are free"), text
    assert "Nothing was written" in text
    assert "partitioning and building TensorRT engines..." not in r["messages"]
    assert_earlier_intact(r, earlier)


def test_a_read_only_folder_fails_naming_the_file_and_keeps_the_earlier_set(namespace,
                                                                          earlier):
    results, _, mount, _ = namespace
    r = results["read-only"]
    assert r["error"] is not None and "OutputWriteError" in r["error"]["types"]
    text = r["error"]["text"]
    assert str(mount / "m.pte") in text and "read-only" in text, text
    assert "partitioning and building TensorRT engines..." not in r["messages"]
    assert_earlier_intact(r, earlier)


def test_a_folder_without_write_permission_fails_naming_the_file(namespace, earlier, tmp_path):
    if os.geteuid() == 0:
        r = namespace[0]["permission"]
        mount = namespace[2]
        assert r["error"] is not None and "OutputWriteError" in r["error"]["types"]
        text = r["error"]["text"]
        assert_earlier_intact(r, earlier)
    else:  # a folder this user cannot write
        mount = tmp_path / "locked"
        pte = copy_set(earlier, mount)
        before = listing(mount)
        mount.chmod(0o555)
        try:
            with pytest.raises(OutputWriteError) as info:
                export_program(Wide(), (XW,), pte, progress=None, run_check=False)
        finally:
            mount.chmod(0o755)
        text = str(info.value)
        assert listing(mount) == before
    assert text.startswith(f"could not write {mount / 'm.pte'}: permission denied"), text
    assert "To fix: make the folder writable" in text


def test_cli_export_into_a_full_disk_exits_4_naming_the_file_and_cause(namespace):
    results, _, mount, _ = namespace
    r = results["cli"]
    assert r["free_pages"] == 0
    code, out, err = r["cli"]
    assert code == 4, out + err
    assert f"could not write {mount / 'add.pte'}: the file system is full" in err, err
    assert "Traceback" not in err
    assert set(r["after"]) == set(r["before"]) and r["after"] == r["before"]
    assert not any(".etrt-" in k for k in r["after"])


# ---- early refusals and a folder that vanishes ---------------------------------------

def test_a_path_that_is_a_folder_is_refused_before_any_work(tmp_path):
    (tmp_path / "m.pte").mkdir()
    said = []
    with pytest.raises(OutputWriteError) as info:
        export_program(Small(), (X,), tmp_path / "m.pte", progress=said.append)
    assert str(info.value).startswith(f"could not write {tmp_path / 'm.pte'}: the path is a "
                                      "folder"), str(info.value)
    assert said == [] and listing(tmp_path) == {"m.pte": "<dir>"}


def test_a_missing_folder_is_refused_before_any_work(tmp_path):
    said = []
    with pytest.raises(OutputWriteError) as info:
        export_program(Small(), (X,), tmp_path / "missing" / "m.pte", progress=said.append)
    assert str(info.value).startswith(f"could not write {tmp_path / 'missing' / 'm.pte'}: the "
                                      "folder does not exist"), str(info.value)
    assert said == [] and list(tmp_path.iterdir()) == []
    code, out, err = cli_main("export", "--example", "add", tmp_path / "missing" / "add.pte")
    assert code == 4 and f"could not write {tmp_path / 'missing' / 'add.pte'}" in err, out + err
    assert list(tmp_path.iterdir()) == []


def test_a_folder_that_vanishes_mid_export_fails_naming_the_file(tmp_path, earlier):
    folder = tmp_path / "out"
    pte = copy_set(earlier, folder)

    def remove_folder(message):
        if message.startswith("partitioning"):
            shutil.rmtree(folder)

    with pytest.raises(OutputWriteError) as info:
        export_program(Small(6), (X,), pte, progress=remove_folder, run_check=False)
    text = str(info.value)
    assert f"could not write {pte}:" in text, text
    assert "vanished" in text or "does not exist" in text, text
    assert not folder.exists()  # nothing recreated it


# ---- killed exports --------------------------------------------------------------

KILLED_CHILD = r"""
import sys
sys.path[:0] = sys.argv[3:]
from test_export_atomic import Small, X
from executorch_tensorrt.aot.export import export_program

stop = sys.argv[2]

def progress(message):
    print(message, file=sys.stderr, flush=True)
    if message.startswith(stop):
        print("STOPPED", file=sys.stderr, flush=True)
        sys.stdin.readline()  # killed here

export_program(Small(6, seed=1), (X,), sys.argv[1], progress=progress)
print("EXPORTED", file=sys.stderr, flush=True)
"""

KILL_POINTS = ["partitioning and building TensorRT engines...", "wrote ", "run check:"]


def test_killed_exports_leave_the_earlier_set_and_the_next_export_cleans_up(tmp_path,
                                                                            earlier,
                                                                            allow_fallback):
    folder = tmp_path / "out"
    pte = copy_set(earlier, folder)
    before = listing(folder)
    procs = [subprocess.Popen([sys.executable, "-c", KILLED_CHILD, str(pte), point,
                               str(TESTS), str(TESTS / "aot")],
                              stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=child_env(**FALLBACK)) for point in KILL_POINTS]
    try:
        for proc, point in zip(procs, KILL_POINTS):
            said = []
            for line in proc.stderr:
                said.append(line)
                if line.strip() == "STOPPED":
                    break
            else:
                pytest.fail(f"the export child ended before {point!r}:\n{''.join(said)[-4000:]}")
            assert any(l.startswith(f"[executorch_tensorrt] {point}") or l.startswith(point)
                       for l in said), said
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    assert [p.returncode for p in procs] == [-signal.SIGKILL] * 3
    # The earlier set is intact and still verifies; the two children killed
    # after writing left their staging folders (their writers are dead).
    after = listing(folder)
    assert {k: v for k, v in after.items() if not k.startswith(".etrt-")} == before
    assert len(leftovers(folder)) == 2, leftovers(folder)
    verify(pte)
    # The next export into that folder removes them and publishes a whole set.
    result = export_program(Small(5, seed=2), (X,), pte, progress=None, run_check=False)
    assert leftovers(folder) == []
    assert sorted(p.name for p in folder.iterdir()) == [
        "m.expected", "m.expected.etensors", "m.pte", "m.report.json"]  # the old .ptd is gone
    assert result.path == pte and listing(folder)["m.pte"] != before["m.pte"]
    verify(pte)


# ---- two exports racing for one path --------------------------------------------

RACER = r"""
import json, sys
sys.path[:0] = sys.argv[5:]
from test_export_atomic import Small, X
from executorch_tensorrt.aot.export import export_program
from executorch_tensorrt.errors import OutputWriteError

out, external, rounds = int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
model = Small(out, seed=out)
print("ready", flush=True)
sys.stdin.readline()
failed = []
for _ in range(rounds):
    try:
        export_program(model, (X,), sys.argv[1], progress=None, external_weights=external,
                       run_check=False)
    except OutputWriteError as e:
        failed.append(str(e))
print(json.dumps(failed), flush=True)
"""


def test_concurrent_exports_to_one_path_end_as_one_whole_set(tmp_path, earlier,
                                                             allow_fallback):
    pte = copy_set(earlier, tmp_path / "out")
    # Output 4 with external weights (a .ptd) against output 6 inline (none).
    sides = {4: "1", 6: "0"}
    for attempt in range(2):
        procs = [subprocess.Popen([sys.executable, "-c", RACER, str(pte), str(out), external,
                                   "2", str(TESTS), str(TESTS / "aot")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=child_env(**FALLBACK))
                 for out, external in sides.items()]
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready", proc.communicate()[1][-3000:]
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err[-3000:]
            assert json.loads(out.strip().splitlines()[-1]) == []
        assert leftovers(pte.parent) == []
        expected = json.loads(pte.with_suffix(".expected").read_text())
        shape = expected["outputs"][0]["shape"]
        assert shape in ([2, 4], [2, 6]), shape
        names = {"m.pte", "m.report.json", "m.expected", "m.expected.etensors"}
        if shape == [2, 4]:
            names.add("m.ptd")
        assert {p.name for p in pte.parent.iterdir()} == names, (attempt, shape)
        verify(pte)  # the program against its own reference


# ---- a failed run check ------------------------------------------------------------

def test_a_failed_run_check_keeps_the_earlier_set_and_a_later_export_publishes(
        tmp_path, earlier, allow_fallback):
    pte = copy_set(earlier, tmp_path)
    before = listing(tmp_path)
    with pytest.raises(RunCheckError) as info:
        export_program(Noisy(), (X,), pte, progress=None)
    assert info.value.target == pte and info.value.path == tmp_path / "m.rejected" / "m.pte"
    after = listing(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("m.rejected")} == before
    assert sorted(p.name for p in (tmp_path / "m.rejected").iterdir()) == [
        "m.expected", "m.expected.etensors", "m.pte", "m.report.json"]
    assert leftovers(tmp_path) == []
    verify(pte)
    export_program(Small(6, seed=1), (X,), pte, progress=None)
    assert leftovers(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [
        "m.expected", "m.expected.etensors", "m.pte", "m.report.json"]
    assert listing(tmp_path)["m.pte"] != before["m.pte"]
    verify(pte)


def test_an_etrecord_goes_with_its_set_or_whole_after_it(tmp_path, earlier):
    """An ETRecord named after the program is published with the set (and a
    stale one goes when the next export writes none); one in another folder
    is written whole after the program."""
    pte = copy_set(earlier, tmp_path / "set")
    beside = pte.with_suffix(".etrecord")
    export_program(Small(), (X,), pte, progress=None, etrecord_path=beside, run_check=False)
    assert beside.is_file() and zipfile.is_zipfile(beside)
    elsewhere = tmp_path / "records" / "m.etrecord"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(b"an earlier record")
    export_program(Small(), (X,), pte, progress=None, etrecord_path=elsewhere, run_check=False)
    assert not beside.exists()  # the new program has no record beside it: the stale one went
    assert zipfile.is_zipfile(elsewhere)
    assert leftovers(pte.parent) == [] and leftovers(elsewhere.parent) == []
