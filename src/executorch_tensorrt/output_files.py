"""Files written whole or not at all, and the files of one export published together.

An export writes into the folder an application (or a fleet sync) loads from,
so a failure between its first and its last byte must leave what was there.
Every file goes first into a private staging folder beside its target
(`.etrt-staging-<random>`, same file system, so the final step is a rename),
is flushed and synced, and is renamed over its target only when the whole set
is complete. `publish` renames the companions first and the program last
(docs/output-files.md says what a reader can rely on).

A staging folder is held with an exclusive flock for as long as its writer
lives; a later `Staging` in the same folder removes staging folders whose lock
is free (their writer died), never a live one. A publish that a crash cut
short (its journal says which files were still to move) is finished by the
next `Staging` there, so the set on disk becomes the new one whole. Publishes
into one folder take a lock on the folder, so two exports to one path end as
one set or the other, never a mix.

Failures are `OutputWriteError`s naming the file, the cause, the bytes needed
where known, and what to do.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import shutil
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Sequence

from .errors import OutputWriteError

STAGING_PREFIX = ".etrt-staging-"
_INIT_PREFIX = ".etrt-init-"        # a staging folder before its lock is held
_JOURNAL = ".publishing"            # the renames a publish was making, in order
_STALE_INIT_SECONDS = 3600.0        # an unlocked init folder older than this is a dead one's

# errno -> (the cause in words, what to do)
_CAUSES = {
    errno.ENOSPC: ("the file system is full", "free space there or export to another folder"),
    errno.EDQUOT: ("the disk quota is exceeded", "free space in your quota or export elsewhere"),
    errno.EFBIG: ("the file is larger than the file system allows",
                  "export to a file system that takes large files, or use external_weights"),
    errno.EROFS: ("the file system is read-only", "export to a writable folder"),
    errno.EACCES: ("permission denied", "make the folder writable for this user or export "
                   "elsewhere"),
    errno.EPERM: ("the operation is not permitted", "make the folder writable for this user "
                  "or export elsewhere"),
    errno.ENOENT: ("the folder does not exist (or vanished during the export)",
                   "create the folder and export again"),
    errno.ENOTDIR: ("a part of the path is not a folder", "name a file inside a folder"),
    errno.EISDIR: ("the path is a folder", "name a file, e.g. model.pte"),
    errno.EIO: ("an I/O error from the device", "check the disk"),
}


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e9:.2f} GB" if nbytes >= 10**8 else f"{nbytes:,} bytes"


def write_error(e: OSError, path: Path | str, needed: int | None = None) -> OutputWriteError:
    """The OutputWriteError for an OSError raised while writing `path` (a
    staged copy is named by its target: the staging folder is ours, not the user's)."""
    path = Path(path)
    while path.parent.name.startswith((STAGING_PREFIX, _INIT_PREFIX)):
        path = path.parent.parent / path.name
    cause, todo = _CAUSES.get(e.errno, (e.strerror or str(e), "check the folder and retry"))
    need = f"; it needs about {_size(needed)}" if needed else ""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        free = free_bytes(Path(path).parent)
        need += f", {_size(free)} are free there" if free is not None else ""
    return OutputWriteError(
        f"could not write {path}: {cause} ({os.strerror(e.errno) if e.errno else e}){need}. "
        f"Any earlier file there is unchanged. To fix: {todo}.", path=str(path), errno=e.errno,
        needed=needed)


def free_bytes(folder: Path) -> int | None:
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def check_free_space(folder: Path, needed: int, what: str) -> None:
    """Refuses early when `folder`'s file system has less free space than `needed`."""
    free = free_bytes(folder)
    if free is not None and free < needed:
        raise OutputWriteError(
            f"not enough free space for {what} in {folder}: it needs at least {_size(needed)} "
            f"and {_size(free)} are free. Nothing was written. To fix: free space there or "
            "export to another folder.", path=str(folder), errno=errno.ENOSPC, needed=needed)


def check_target(path: Path) -> None:
    """Refuses a target that cannot be written before any work is done: a
    missing folder, a folder in its place, a folder that is not writable."""
    folder = path.parent
    if path.is_dir():
        raise write_error(OSError(errno.EISDIR, os.strerror(errno.EISDIR)), path)
    if not folder.is_dir():
        raise write_error(OSError(errno.ENOENT if not folder.exists() else errno.ENOTDIR,
                                  "no such folder"), path)
    if not os.access(folder, os.W_OK | os.X_OK):
        read_only = os.statvfs(folder).f_flag & os.ST_RDONLY
        code = errno.EROFS if read_only else errno.EACCES
        raise write_error(OSError(code, os.strerror(code)), path)


def _fsync_path(path: Path | str, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _locked_dir(path: Path, blocking: bool, follow: bool = False) -> int | None:
    """An open descriptor of `path` holding its exclusive flock, or None when
    another live process holds it (non-blocking) or the folder is gone.
    `follow`: the user's folder may be a symbolic link; our staging folders never are."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | (0 if follow else os.O_NOFOLLOW))
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except OSError:
        os.close(fd)
        return None
    return fd


def _unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing the last descriptor drops its flock


class Staging:
    """A private folder beside the targets in `folder`; `with Staging(folder) as s:`.

    `s.path(target)` is where to write `target` for now; `s.publish(targets)`
    moves them into place (the last one last); leaving the block without
    publishing removes everything staged, as does a failure in between."""

    def __init__(self, folder: Path | str, target: Path | str | None = None):
        self.folder = Path(folder)
        self.target = Path(target) if target is not None else None  # named in errors
        self._fd: int | None = None
        self.dir: Path | None = None
        self._journaled = False  # a publish under way: its folder must outlive a failure
        self._syncing: threading.Thread | None = None

    def __enter__(self) -> "Staging":
        try:
            recover_stale(self.folder)
            init = Path(_mkdtemp(self.folder, _INIT_PREFIX))
            self._fd = _locked_dir(init, blocking=True)
            if self._fd is None:
                raise OSError(errno.ENOENT, f"{init} vanished before it was locked")
            # Renamed while locked: a folder with the staging prefix is always
            # either locked by a live writer or left by a dead one.
            self.dir = self.folder / (STAGING_PREFIX + init.name[len(_INIT_PREFIX):])
            os.rename(init, self.dir)
        except OSError as e:
            self._cleanup()
            raise write_error(e, self.target or self.folder) from e
        return self

    def __exit__(self, *exc) -> None:
        self._cleanup()

    def sync_in_background(self) -> None:
        """Starts flushing what is staged to the disk while the caller does
        other work (the run check); publish waits for it, then syncs again,
        which is then cheap."""
        names = os.listdir(self.dir)

        def sync() -> None:
            for name in names:
                try:
                    _fsync_path(self.dir / name)
                except OSError:
                    pass  # publish syncs again and reports the error

        self._syncing = threading.Thread(target=sync, name="etrt-sync", daemon=True)
        self._syncing.start()

    def _cleanup(self) -> None:
        if self._syncing is not None:
            self._syncing.join()
        # A publish that failed between its renames keeps its folder and journal:
        # once unlocked, the next Staging here finishes it (_finish_interrupted).
        if self.dir is not None and self.dir.exists() and not self._journaled:
            shutil.rmtree(self.dir, ignore_errors=True)
        _unlock(self._fd)
        self._fd = None

    def path(self, target: Path | str) -> Path:
        target = Path(target)
        if target.parent.resolve() != self.folder.resolve():
            raise ValueError(f"{target} is not in {self.folder}")
        return self.dir / target.name

    def write(self, target: Path | str, write: Callable[[BinaryIO], None]) -> Path:
        """Writes `target`'s staged copy with `write(file)`; returns its staged path."""
        staged = self.path(target)
        with writing(target), open(staged, "xb") as f:
            write(f)
        return staged

    def publish(self, targets: Sequence[Path | str], remove: Iterable[Path | str] = ()) -> None:
        """Syncs the staged copies of `targets`, then, holding the folder's
        publish lock, removes `remove` (stale companions of an earlier set) and
        renames each target into place in order, so the last is published
        last. A target not staged is skipped."""
        moves = [Path(t).name for t in targets if self.path(t).exists()]
        stale = [Path(p).name for p in remove if Path(p).name not in moves]
        current = None
        if self._syncing is not None:
            self._syncing.join()
        try:
            for name in moves:
                current = self.folder / name
                _fsync_path(self.dir / name)
                if (self.folder / name).is_dir():
                    raise OSError(errno.EISDIR, os.strerror(errno.EISDIR))
            current = self.folder
            folder_lock = _locked_dir(self.folder, blocking=True, follow=True)
            if folder_lock is None:
                raise OSError(errno.ENOENT, "the folder vanished")
            try:
                # A publish a crash cut short lands before this one, never over it.
                _finish_interrupted(self.folder, skip=self.dir.name)
                journal = self.dir / _JOURNAL
                journal.write_text(json.dumps({"remove": stale, "moves": moves}))
                _fsync_path(journal)
                _fsync_path(self.dir, directory=True)
                self._journaled = True
                _apply(self.dir, self.folder, stale, moves)
                self._journaled = False
            finally:
                _unlock(folder_lock)
        except OSError as e:
            error = write_error(e, current or self.folder)
            if self._journaled:
                error.add_note(f"The publish stopped between its renames; {self.dir.name} "
                               f"keeps the rest, and the next export into {self.folder} "
                               "finishes it.")
            raise error from e

    def keep_as(self, name: str) -> Path:
        """Moves the staged files (not published) to the visible folder `name`
        beside the targets, replacing an earlier one; returns it."""
        kept = self.folder / name
        for name_ in os.listdir(self.dir):
            if name_.startswith("."):
                os.unlink(self.dir / name_)
        if kept.is_dir() and not kept.is_symlink():
            shutil.rmtree(kept)
        os.rename(self.dir, kept)
        self.dir = None
        return kept


def _apply(staging: Path, folder: Path, stale: Sequence[str], moves: Sequence[str]) -> None:
    for name in stale:
        try:
            os.unlink(folder / name)
        except FileNotFoundError:
            pass
    for name in moves:
        if (staging / name).exists():  # a resumed publish skips what it moved already
            os.replace(staging / name, folder / name)
    _fsync_path(folder, directory=True)
    os.unlink(staging / _JOURNAL)  # done: nothing to resume


def _dead_staging(folder: Path, names: Iterable[str], skip: str = ""):
    """(path, descriptor holding its lock) of each staging folder whose writer died."""
    for name in names:
        if name == skip:
            continue
        path = folder / name
        if name.startswith(_INIT_PREFIX):
            try:
                if time.time() - path.lstat().st_mtime < _STALE_INIT_SECONDS:
                    continue  # may be a live writer's, before it takes its lock
            except OSError:
                continue
        elif not name.startswith(STAGING_PREFIX):
            continue
        fd = _locked_dir(path, blocking=False)
        if fd is not None:  # else a live writer holds it
            yield path, fd


def _finish_interrupted(folder: Path, skip: str = "") -> list[str]:
    """Completes the publishes of dead writers (called holding the folder's
    lock): their new set was whole and synced before the first rename."""
    done = []
    for path, fd in _dead_staging(folder, os.listdir(folder), skip):
        try:
            journal = path / _JOURNAL
            if journal.exists():
                plan = json.loads(journal.read_text())
                _apply(path, folder, plan["remove"], plan["moves"])
                done.append(f"finished an interrupted publish of {', '.join(plan['moves'])}")
        except (OSError, ValueError, KeyError, TypeError):
            pass
        finally:
            _unlock(fd)
    return done


def _mkdtemp(folder: Path, prefix: str) -> str:
    for _ in range(100):
        path = folder / (prefix + secrets.token_hex(6))
        try:
            os.mkdir(path, 0o700)
            return str(path)
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, f"no free staging name in {folder}")


def recover_stale(folder: Path | str) -> list[str]:
    """Finishes publishes a crash cut short and removes the staging folders of
    writers that died, never a live writer's. Returns what it did."""
    folder = Path(folder)
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    if not any(n.startswith((STAGING_PREFIX, _INIT_PREFIX)) for n in names):
        return []
    folder_lock = _locked_dir(folder, blocking=True, follow=True)
    try:
        done = _finish_interrupted(folder)
        for path, fd in _dead_staging(folder, os.listdir(folder)):
            shutil.rmtree(path, ignore_errors=True)
            _unlock(fd)
            done.append(f"removed {path.name}, left by an export that did not finish")
    finally:
        _unlock(folder_lock)
    return done


@contextmanager
def writing(target: Path | str, needed: int | None = None):
    """Turns an OSError raised while writing `target` into an OutputWriteError."""
    try:
        yield
    except OSError as e:
        raise write_error(e, target, needed) from e


def write_whole(target: Path | str, write: Callable[[BinaryIO], None]) -> Path:
    """One file written whole or not at all: `write(file)` fills a staged copy,
    which replaces `target` once complete and synced."""
    target = Path(target)
    if target.parent.name.startswith(STAGING_PREFIX):
        # Already private to one export, which publishes or removes it whole.
        with writing(target), open(target, "xb") as f:
            write(f)
        return target
    check_target(target)
    with Staging(target.parent, target) as staging:
        staging.write(target, write)
        staging.publish([target])
    return target


def write_bytes_whole(target: Path | str, data: bytes | str) -> Path:
    raw = data.encode() if isinstance(data, str) else data
    return write_whole(target, lambda f: f.write(raw))
