"""output_files.py: every file written whole or not at all, the files of one
export published together (companions first, the program last), staging
folders of dead writers removed (never a live writer's), a publish cut short by
a kill finished by the next writer, and errors that name the file, the cause
and a remedy.

No export here: real files, real child processes killed with SIGKILL, real
flocks. Children import output_files without loading the native adapter."""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import child_env
from executorch_tensorrt import output_files as of
from executorch_tensorrt.errors import ExportError, OutputWriteError

ENV = child_env(EXECUTORCH_TENSORRT_SKIP_REGISTRATION="1")
SET = ["m.ptd", "m.report.json", "m.expected", "m.expected.etensors", "m.pte"]


def leftovers(folder: Path) -> list[str]:
    """Our temporary entries in `folder` (there must be none after a writer ends)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".etrt-"))


def contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def write_set(folder: Path, tag: str, names=SET) -> None:
    for name in names:
        (folder / name).write_bytes(f"{tag} {name}".encode())


def child(script: str, *args, stdin=subprocess.PIPE) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


# ---- write_whole -----------------------------------------------------------------

def test_write_whole_replaces_the_file_whole(tmp_path):
    target = tmp_path / "m.pte"
    target.write_bytes(b"the earlier program")
    seen = []

    def write(f):
        # The writer fills a staged copy; the target is untouched until it is complete.
        seen.append((Path(f.name).parent.name, target.read_bytes()))
        f.write(b"x" * 100_000)
        f.write(b"end")

    assert of.write_whole(target, write) == target
    assert target.read_bytes() == b"x" * 100_000 + b"end"
    (staged_in, target_then), = seen
    assert staged_in.startswith(of.STAGING_PREFIX) and target_then == b"the earlier program"
    assert leftovers(tmp_path) == []
    assert of.write_bytes_whole(tmp_path / "new.txt", "text") == tmp_path / "new.txt"
    assert (tmp_path / "new.txt").read_text() == "text" and leftovers(tmp_path) == []


def test_a_writer_that_raises_leaves_the_target_as_it_was(tmp_path):
    target = tmp_path / "m.pte"
    target.write_bytes(b"the earlier program")

    def half_then_fail(f):
        f.write(b"y" * 50_000)
        f.flush()
        raise RuntimeError("the writer broke")

    with pytest.raises(RuntimeError, match="the writer broke"):
        of.write_whole(target, half_then_fail)
    assert target.read_bytes() == b"the earlier program"
    assert leftovers(tmp_path) == []
    # No earlier file: none is made.
    with pytest.raises(RuntimeError):
        of.write_whole(tmp_path / "fresh.pte", half_then_fail)
    assert not (tmp_path / "fresh.pte").exists() and leftovers(tmp_path) == []


def test_an_os_error_while_writing_names_the_target_not_the_staged_copy(tmp_path):
    target = tmp_path / "m.pte"
    target.write_bytes(b"the earlier program")

    def disk_full(f):
        f.write(b"z" * 10_000)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OutputWriteError) as info:
        of.write_whole(target, disk_full)
    text = str(info.value)
    assert f"could not write {target}:" in text and "the file system is full" in text, text
    assert of.STAGING_PREFIX not in text and "To fix:" in text
    assert info.value.path == str(target) and info.value.errno == errno.ENOSPC
    assert isinstance(info.value, ExportError)
    assert target.read_bytes() == b"the earlier program" and leftovers(tmp_path) == []


# ---- publish ---------------------------------------------------------------------

def test_publish_moves_companions_first_the_program_last_and_removes_stale_ones(
        tmp_path, monkeypatch):
    write_set(tmp_path, "old")
    (tmp_path / "other.bin").write_bytes(b"not ours")
    events = []
    replace, unlink = os.replace, os.unlink

    def recording_replace(src, dst, **kw):
        if Path(dst).parent == tmp_path:
            events.append(("replace", Path(dst).name))
        return replace(src, dst, **kw)

    def recording_unlink(path, **kw):
        if Path(path).parent == tmp_path:
            events.append(("unlink", Path(path).name))
        return unlink(path, **kw)

    new = ["m.ptd", "m.report.json", "m.pte"]
    with of.Staging(tmp_path) as staging:
        for name in new:
            staging.write(tmp_path / name, lambda f, n=name: f.write(f"new {n}".encode()))
        # Nothing is visible before the publish.
        assert contents(tmp_path)["m.pte"] == b"old m.pte"
        monkeypatch.setattr(os, "replace", recording_replace)
        monkeypatch.setattr(os, "unlink", recording_unlink)
        # A target not staged (m.extra) is skipped; a stale name that is also
        # published (m.ptd) is replaced, not removed first.
        staging.publish([tmp_path / n for n in ["m.ptd", "m.report.json", "m.extra", "m.pte"]],
                        remove=[tmp_path / n for n in ["m.ptd", "m.expected",
                                                       "m.expected.etensors"]])
        monkeypatch.undo()
    moved = [name for kind, name in events if kind == "replace"]
    assert moved == new, events
    assert events[-1] == ("replace", "m.pte"), events  # the program lands last
    removed = [name for kind, name in events if kind == "unlink"]
    assert sorted(removed) == ["m.expected", "m.expected.etensors"], events
    # Stale companions are gone before the program lands.
    assert all(events.index(("unlink", n)) < events.index(("replace", "m.pte")) for n in removed)
    assert contents(tmp_path) == {"m.ptd": b"new m.ptd", "m.report.json": b"new m.report.json",
                                  "m.pte": b"new m.pte", "other.bin": b"not ours"}
    assert leftovers(tmp_path) == []


def test_leaving_staging_without_publishing_removes_what_was_staged(tmp_path):
    write_set(tmp_path, "old")
    before = contents(tmp_path)
    with pytest.raises(KeyError):
        with of.Staging(tmp_path) as staging:
            for name in SET:
                staging.write(tmp_path / name, lambda f: f.write(b"new"))
            raise KeyError("failed before the publish")
    assert contents(tmp_path) == before and leftovers(tmp_path) == []
    with pytest.raises(ValueError, match="is not in"):
        with of.Staging(tmp_path) as staging:
            staging.path(tmp_path / "sub" / "m.pte")
    assert leftovers(tmp_path) == []


# ---- writers that die ------------------------------------------------------------

HOLD = """
import sys, pathlib
from executorch_tensorrt.output_files import Staging
folder = pathlib.Path(sys.argv[1])
staging = Staging(folder).__enter__()
staging.write(folder / "m.pte", lambda f: f.write(b"staged by a child"))
print(staging.dir, flush=True)
sys.stdin.readline()  # held open until the parent says so or kills it
"""


def start_holder(folder: Path) -> tuple[subprocess.Popen, Path]:
    proc = child(HOLD, folder)
    line = proc.stdout.readline().strip()
    if not line:
        proc.kill()
        pytest.fail(f"the holding child did not start: {proc.communicate()[1][-2000:]}")
    staged = Path(line)
    assert staged.parent == folder and staged.name.startswith(of.STAGING_PREFIX)
    assert (staged / "m.pte").read_bytes() == b"staged by a child"
    return proc, staged


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL


def test_a_live_writers_staging_folder_is_never_removed(tmp_path):
    (tmp_path / "m.pte").write_bytes(b"old")
    proc, staged = start_holder(tmp_path)
    try:
        assert of.recover_stale(tmp_path) == []
        # Other writers in the same folder come and go around it.
        of.write_bytes_whole(tmp_path / "m.pte", b"published beside a live writer")
        with of.Staging(tmp_path) as staging:
            staging.write(tmp_path / "m.report.json", lambda f: f.write(b"report"))
            staging.publish([tmp_path / "m.report.json"])
        assert (staged / "m.pte").read_bytes() == b"staged by a child"
        assert leftovers(tmp_path) == [staged.name]
        assert (tmp_path / "m.pte").read_bytes() == b"published beside a live writer"
    finally:
        kill(proc)
    # Dead now: the next writer clears it.
    assert of.recover_stale(tmp_path) == [
        f"removed {staged.name}, left by an export that did not finish"]
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("next_writer", ["recover_stale", "Staging", "write_whole"])
def test_a_killed_writers_staging_folder_stays_until_the_next_writer_removes_it(
        tmp_path, next_writer):
    (tmp_path / "m.pte").write_bytes(b"old")
    proc, staged = start_holder(tmp_path)
    kill(proc)
    # Nothing removes it by itself, and the target is untouched.
    assert leftovers(tmp_path) == [staged.name]
    assert (tmp_path / "m.pte").read_bytes() == b"old"
    if next_writer == "recover_stale":
        assert of.recover_stale(tmp_path) == [
            f"removed {staged.name}, left by an export that did not finish"]
    elif next_writer == "Staging":
        with of.Staging(tmp_path) as staging:
            assert leftovers(tmp_path) == [staging.dir.name] != [staged.name]
    else:
        of.write_bytes_whole(tmp_path / "m.expected", b"new reference")
        assert (tmp_path / "m.expected").read_bytes() == b"new reference"
    assert leftovers(tmp_path) == []
    assert (tmp_path / "m.pte").read_bytes() == b"old"


def test_an_init_folder_is_removed_only_once_it_is_old(tmp_path):
    """A staging folder before its lock is taken (`.etrt-init-*`) may be a live
    writer's a moment from locking it: removed only when old."""
    young, old = tmp_path / ".etrt-init-young", tmp_path / ".etrt-init-old"
    young.mkdir()
    old.mkdir()
    (old / "m.pte").write_bytes(b"x")
    past = time.time() - 2 * 3600
    os.utime(old, (past, past))
    done = of.recover_stale(tmp_path)
    assert done == [f"removed {old.name}, left by an export that did not finish"]
    assert leftovers(tmp_path) == [young.name]


DIE_IN_PUBLISH = """
import os, signal, sys, pathlib
from executorch_tensorrt.output_files import Staging
folder = pathlib.Path(sys.argv[1])
names = sys.argv[2].split(",")
calls = []
real_replace = os.replace

def replace_then_die(src, dst):
    calls.append(dst)
    if len(calls) == 2:  # the first file moved, the second not
        os.kill(os.getpid(), signal.SIGKILL)
    return real_replace(src, dst)

with Staging(folder) as staging:
    for name in names:
        staging.write(folder / name, lambda f, n=name: f.write(("new " + n).encode()))
    print(staging.dir, flush=True)
    os.replace = replace_then_die
    staging.publish([folder / n for n in names],
                    remove=[folder / "m.expected", folder / "m.expected.etensors"])
print("published", flush=True)  # never reached
"""


@pytest.mark.parametrize("next_writer", ["recover_stale", "write_whole"])
def test_a_publish_cut_short_by_a_kill_is_finished_by_the_next_writer(tmp_path, next_writer):
    write_set(tmp_path, "old")
    new = ["m.ptd", "m.report.json", "m.pte"]
    proc = child(DIE_IN_PUBLISH, tmp_path, ",".join(new), stdin=subprocess.DEVNULL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, err[-2000:]
    staged = Path(out.split()[0])
    assert "published" not in out
    # Cut short: the stale companions went, the first file moved, the rest not;
    # the journal says what was still to do.
    assert contents(tmp_path) == {"m.ptd": b"new m.ptd", "m.report.json": b"old m.report.json",
                                  "m.pte": b"old m.pte"}
    assert leftovers(tmp_path) == [staged.name]
    plan = json.loads((staged / of._JOURNAL).read_text())  # noqa: SLF001
    assert plan["moves"] == new
    if next_writer == "recover_stale":
        done = of.recover_stale(tmp_path)
        assert f"finished an interrupted publish of {', '.join(new)}" in done, done
    else:
        of.write_bytes_whole(tmp_path / "unrelated.txt", b"another file in the folder")
        assert (tmp_path / "unrelated.txt").read_bytes() == b"another file in the folder"
    # The set is the new one whole, and nothing of ours remains.
    assert {n: contents(tmp_path)[n] for n in new} == {n: f"new {n}".encode() for n in new}
    assert not (tmp_path / "m.expected").exists()
    assert not (tmp_path / "m.expected.etensors").exists()
    assert leftovers(tmp_path) == []


PUBLISHER = """
import fcntl, json, os, sys, pathlib
from executorch_tensorrt.output_files import Staging
folder, tag, rounds = pathlib.Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
ALL = ["m.ptd", "m.report.json", "m.expected", "m.expected.etensors", "m.pte"]
# Set A writes every file; set B no reference, so it removes A's as stale.
names = ALL if tag == "A" else ["m.ptd", "m.report.json", "m.pte"]
stale = [n for n in ALL if n not in names]

def snapshot():
    # A reader that takes the folder's lock sees no publish half done.
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        return {n: (folder / n).read_text() for n in ALL if (folder / n).exists()}
    finally:
        os.close(fd)

print("ready", flush=True)
sys.stdin.readline()
snapshots = []
for i in range(rounds):
    with Staging(folder) as staging:
        for n in names:
            staging.write(folder / n, lambda f, n=n: f.write(f"{tag} {i} {n}".encode()))
        staging.publish([folder / n for n in names], remove=[folder / n for n in stale])
    snapshots.append(snapshot())
print(json.dumps(snapshots), flush=True)
"""


def one_set(files: dict[str, str]) -> str | None:
    """Why `files` (name -> content) is not one whole publish of A or B, or None."""
    stamps = {tuple(text.split()[:2]) for text in files.values()}
    if len(stamps) != 1:
        return f"a mix of publishes {sorted(stamps)}"
    (tag, i), = stamps
    if any(text != f"{tag} {i} {name}" for name, text in files.items()):
        return f"a file with foreign content: {files}"
    want = set(SET) if tag == "A" else {"m.ptd", "m.report.json", "m.pte"}
    if set(files) != want:
        return f"set {tag} with the files {sorted(files)}"
    return None


def test_concurrent_publishers_never_interleave(tmp_path):
    rounds = 200
    procs = [child(PUBLISHER, tmp_path, tag, rounds) for tag in "AB"]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready", proc.communicate()[1][-2000:]
    for proc in procs:  # both start together
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = [proc.communicate(timeout=300) for proc in procs]
    for proc, (out, err) in zip(procs, results):
        assert proc.returncode == 0, err[-3000:]
    snapshots = [s for out, _ in results for s in json.loads(out.strip().splitlines()[-1])]
    assert len(snapshots) == 2 * rounds
    mixes = [why for why in map(one_set, snapshots) if why]
    assert mixes == [], mixes[:5]
    final = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert one_set(final) is None, final
    assert leftovers(tmp_path) == []


# ---- errors ----------------------------------------------------------------------

@pytest.mark.parametrize("code,cause,remedy", [
    (errno.ENOSPC, "the file system is full", "free space there or export to another folder"),
    (errno.EROFS, "the file system is read-only", "export to a writable folder"),
    (errno.EACCES, "permission denied", "make the folder writable for this user"),
    (errno.ENOENT, "the folder does not exist", "create the folder and export again"),
    (errno.EISDIR, "the path is a folder", "name a file"),
], ids=["ENOSPC", "EROFS", "EACCES", "ENOENT", "EISDIR"])
def test_write_error_names_the_file_the_cause_and_a_remedy(tmp_path, code, cause, remedy):
    target = tmp_path / "m.pte"
    for written in (target, tmp_path / f"{of.STAGING_PREFIX}0a1b2c" / "m.pte"):
        e = of.write_error(OSError(code, os.strerror(code)), written)
        assert isinstance(e, OutputWriteError) and isinstance(e, ExportError)
        text = str(e)
        assert text.startswith(f"could not write {target}: {cause}"), text
        assert os.strerror(code) in text and f"To fix: {remedy}" in text, text
        assert of.STAGING_PREFIX not in text  # the staged copy is named by its target
        assert e.path == str(target) and e.errno == code


def test_a_disk_full_error_says_what_was_needed_and_what_is_free(tmp_path, monkeypatch):
    monkeypatch.setattr(of, "free_bytes", lambda folder: 4096)
    e = of.write_error(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), tmp_path / "m.ptd",
                       needed=2_500_000_000)
    assert "it needs about 2.50 GB, 4,096 bytes are free there" in str(e), str(e)
    assert e.needed == 2_500_000_000


def test_check_free_space_refuses_with_the_numbers(tmp_path, monkeypatch):
    free = of.free_bytes(tmp_path)
    assert free is not None and free > 0
    of.check_free_space(tmp_path, 1, "m.pte")  # enough: nothing said
    with pytest.raises(OutputWriteError) as info:
        of.check_free_space(tmp_path, 10**18, "m.pte (its weights alone)")
    text = str(info.value)
    assert text.startswith(f"not enough free space for m.pte (its weights alone) in {tmp_path}: "
                           "it needs at least 1000000000.00 GB and "), text
    assert "Nothing was written" in text and info.value.errno == errno.ENOSPC
    # The free space in the message is the file system's own.
    monkeypatch.setattr(os, "statvfs", lambda folder: os.statvfs_result(
        (4096, 4096, 100, 10, 3, 100, 10, 10, 0, 255)))
    with pytest.raises(OutputWriteError) as info:
        of.check_free_space(tmp_path, 20_000, "m.ptd")
    assert "it needs at least 20,000 bytes and 12,288 bytes are free" in str(info.value)
    assert info.value.needed == 20_000 and info.value.path == str(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_check_target_refuses_a_folder_a_missing_folder_and_a_file_as_folder(tmp_path):
    (tmp_path / "m.pte").mkdir()
    with pytest.raises(OutputWriteError, match="the path is a folder"):
        of.check_target(tmp_path / "m.pte")
    with pytest.raises(OutputWriteError, match=f"could not write {tmp_path}/gone/m.pte: the "
                                               "folder does not exist"):
        of.check_target(tmp_path / "gone" / "m.pte")
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputWriteError, match="a part of the path is not a folder"):
        of.check_target(tmp_path / "file" / "m.pte")
    of.check_target(tmp_path / "ok.pte")
