"""An on-disk cache of rebuilt engines that is safe in a shared directory.

An engine is code for the GPU: a file another user planted or changed must
never be deserialized. So, like pip's and ccache's caches:
- the cache folder is ours: created 0700, refused if it is a symbolic link,
  owned by another user, or writable by group/others; in a world-writable
  folder with the sticky bit (/tmp) a per-user subfolder is used instead;
- every file is opened relative to the verified folder's descriptor with
  O_NOFOLLOW, and an entry is used only if it is a regular file we own that
  nobody else can write, whose header (magic, key digest, length, SHA-256 of
  the engine) matches its content;
- entries are written to a temporary file in the same folder, fsynced and
  renamed into place, so a reader never sees half an entry;
- one lock file per key (flock): one process builds, the others wait and
  read what it wrote.
A rejected entry is reported on stderr, removed, and rebuilt; a folder that
cannot be used makes the build run uncached. Neither fails the load.

An entry written with `EntryFacts` (ETRTENG2: engines built at load or by
`prepare`, docs/gpu-runtime.md) also records what it was built for: the
program's digest, the target capability, the TensorRT flavour and version,
and how long the build took. A reader that expects other facts refuses the
entry with the field that differs (an entry copied in from another machine
or program), before the key's own check; `inspect` reads them back.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import secrets
import stat
import struct
import sys
import time
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from ...output_files import write_error

MAGIC = b"ETRTENG1"
MAGIC_FACTS = b"ETRTENG2"  # + u32 facts length and the facts' JSON before the engine
_HEADER = struct.Struct("<8s32sQ32s")  # magic, sha256(key), engine length, sha256(engine)
_FACTS_LEN = struct.Struct("<I")
_MAX_FACTS = 4096
_KEY = re.compile(r"[0-9A-Za-z_.-]{1,128}")
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC


class CacheUnusable(Exception):
    """The cache folder or an entry fails a check; the message says which."""


@dataclass(frozen=True)
class EntryFacts:
    """What an engine entry was built for, and the build's measured time."""

    program: str        # SHA-256 of the partition's ONNX and build inputs (portability.py)
    capability: str     # "SM89"
    trt_flavor: str
    trt_version: str
    build_seconds: float | None = None  # None: not measured

    _COMPARED = (("program", "program digest"), ("capability", "GPU capability"),
                 ("trt_flavor", "TensorRT flavour"), ("trt_version", "TensorRT version"))

    def to_json(self) -> bytes:
        return json.dumps({k: getattr(self, k) for k, _ in self._COMPARED}
                          | {"build_seconds": self.build_seconds}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, where: Callable[[], Path]) -> "EntryFacts":
        try:
            raw = json.loads(data)
            values = {k: raw[k] for k, _ in cls._COMPARED}
            seconds = raw.get("build_seconds")
            if (not all(isinstance(v, str) and 0 < len(v) <= 128 for v in values.values())
                    or not (seconds is None or (isinstance(seconds, (int, float))
                                                and not isinstance(seconds, bool)
                                                and 0 <= seconds < 1e7))):
                raise ValueError("a field has the wrong type or size")
        except (ValueError, KeyError, TypeError) as e:
            raise CacheUnusable(f"{where()} has unreadable build facts ({e})") from None
        return cls(**values, build_seconds=None if seconds is None else float(seconds))

    def mismatch(self, wanted: "EntryFacts") -> str | None:
        """Why this entry is not the engine `wanted` describes; None if it is."""
        for field, label in self._COMPARED:
            have, want = getattr(self, field), getattr(wanted, field)
            if have != want:
                return f"it was prepared for {label} {have}, and this load needs {want}"
        return None


@dataclass(frozen=True)
class Fetched:
    """An engine from the cache or a build: `built` says which (a cache hit
    never builds); `facts` as stored (None for an entry without them)."""

    engine: bytes
    built: bool
    facts: EntryFacts | None
    rejected: str | None = None  # why an entry found under the key was not used
    not_stored: str | None = None  # why a built engine could not be stored (disk full, ...)


def _note(message: str) -> None:
    print(f"[executorch_tensorrt] engine cache: {message}", file=sys.stderr, flush=True)


def _read_up_to(fd: int, n: int) -> bytes:
    """Up to `n` bytes from `fd`'s position: fewer only at its end (a single
    read returns at most about 2 GiB on Linux)."""
    data = os.read(fd, n)
    if len(data) == n or not data:
        return data
    parts, got = [data], len(data)
    while got < n:
        more = os.read(fd, n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _check_ours(st: os.stat_result, what: str | Callable[[], str]) -> None:
    """`what` names the file in the error; a callable is formed only on failure
    (a path formed on every lookup was a measurable part of a load's)."""
    if not st.st_uid == os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        _refuse_foreign(st, what() if callable(what) else what)


def _refuse_foreign(st: os.stat_result, what: str) -> None:
    if st.st_uid != os.geteuid():
        raise CacheUnusable(f"{what} is owned by uid {st.st_uid}, not by this user "
                            f"(uid {os.geteuid()}), so its content cannot be trusted")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheUnusable(f"{what} is writable by group or others (mode "
                            f"{stat.S_IMODE(st.st_mode):o}), so its content cannot be trusted")


def _open_dir(path: Path, dir_fd: int | None = None, name: str | None = None) -> int:
    """Opens a folder without following a symbolic link in its last component."""
    try:
        return os.open(name if name is not None else path,
                       os.O_RDONLY | os.O_DIRECTORY | _OPEN_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise CacheUnusable(f"{path} is a symbolic link or not a folder") from None
        raise


class EngineCache:
    """`EngineCache(folder).get_or_build(key, build)`: the cached bytes for
    `key`, or `build()`'s, stored for the next process."""

    def __init__(self, directory: Path | str):
        self.directory = Path(directory)

    # -- the folder ---------------------------------------------------------
    def _make(self, path: Path) -> None:
        """Creates `path` (and missing parents) 0700."""
        missing = []
        while not os.path.lexists(path) and path != path.parent:
            missing.append(path)
            path = path.parent
        for folder in reversed(missing):
            try:
                os.mkdir(folder, 0o700)
            except FileExistsError:
                pass

    def _open_folder(self, create: bool = True) -> tuple[int, Path]:
        """A descriptor of the verified cache folder and its path; without
        `create`, a missing folder raises FileNotFoundError."""
        path = self.directory
        if create:
            self._make(path)
        fd = _open_dir(path)
        try:
            st = os.fstat(fd)
            if st.st_mode & stat.S_IWOTH and st.st_mode & stat.S_ISVTX:
                # A shared folder such as /tmp: use our own subfolder in it.
                name = f"executorch_tensorrt-{os.geteuid()}"
                try:
                    os.mkdir(name, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
                sub = _open_dir(path / name, dir_fd=fd, name=name)
                os.close(fd)
                fd, path = sub, path / name
                st = os.fstat(fd)
            _check_ours(st, f"the cache folder {path}")
            return fd, path
        except BaseException:
            os.close(fd)
            raise

    # -- entries ------------------------------------------------------------
    @staticmethod
    def _encode(key: str, engine: bytes, facts: EntryFacts | None = None) -> bytes:
        if facts is None:
            return _HEADER.pack(MAGIC, hashlib.sha256(key.encode()).digest(), len(engine),
                                hashlib.sha256(engine).digest()) + engine
        # The digest covers the facts too: a changed build time is a modified entry.
        body = _FACTS_LEN.pack(len(facts.to_json())) + facts.to_json() + engine
        return _HEADER.pack(MAGIC_FACTS, hashlib.sha256(key.encode()).digest(), len(body),
                            hashlib.sha256(body).digest()) + body

    def _read(self, fd: int, key: str, where: Path) -> bytes | None:
        """The verified engine for `key`, None if there is no entry; raises
        CacheUnusable for an entry that must not be used."""
        found = self._read_entry(fd, key, where, None)
        return found[0] if found is not None else None

    def _read_entry(self, fd: int, key: str, where: Path,
                    wanted: EntryFacts | None) -> tuple[bytes, EntryFacts | None] | None:
        """(engine, its facts) for `key`, None if there is no entry; raises
        CacheUnusable for an entry that must not be used, or whose facts are
        not `wanted`."""
        name = f"{key}.engine"
        try:
            entry = os.open(name, os.O_RDONLY | _OPEN_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise CacheUnusable(f"{where / name} is a symbolic link") from None
            raise
        try:  # unbuffered reads of the descriptor: a file object cost more than the reads
            st = os.fstat(entry)
            if not stat.S_ISREG(st.st_mode):
                raise CacheUnusable(f"{where / name} is not a regular file")
            _check_ours(st, lambda: str(where / name))
            # Read in parts, so the engine is read once and never copied.
            head = _read_up_to(entry, _HEADER.size)
            if len(head) < _HEADER.size:
                raise CacheUnusable(f"{where / name} is too short to be a cache entry")
            magic, key_digest, length, digest = _HEADER.unpack(head)
            if magic not in (MAGIC, MAGIC_FACTS):
                raise CacheUnusable(f"{where / name} is not an entry this cache wrote")
            prefix, facts_json = b"", None
            if magic == MAGIC_FACTS:
                prefix = _read_up_to(entry, _FACTS_LEN.size)
                (size,) = (_FACTS_LEN.unpack(prefix) if len(prefix) == _FACTS_LEN.size
                           else (None,))
                facts_json = (_read_up_to(entry, size) if size is not None and size <= _MAX_FACTS
                              else b"")
                if size is None or len(facts_json) != size:
                    raise CacheUnusable(f"{where / name} has a build-facts length past its end")
                prefix += facts_json
            # The rest of the file as fstat sized it: what is checked below is what is used.
            engine = _read_up_to(entry, max(st.st_size - _HEADER.size - len(prefix), 0))
        finally:
            os.close(entry)
        checked = hashlib.sha256(prefix)
        checked.update(engine)
        if length != len(prefix) + len(engine) or checked.digest() != digest:
            raise CacheUnusable(f"{where / name} does not match its recorded length and "
                                "SHA-256 (truncated or modified)")
        facts = (EntryFacts.from_json(facts_json, lambda: where / name)
                 if facts_json is not None else None)
        if wanted is not None:
            why = (facts.mismatch(wanted) if facts is not None
                   else "it does not record what it was built for")
            if why:
                raise CacheUnusable(f"{where / name} is not this program's engine: {why}")
        if key_digest != hashlib.sha256(key.encode()).digest():
            raise CacheUnusable(f"{where / name} is not an entry this cache wrote for this key")
        return engine, facts

    def _write(self, fd: int, key: str, engine: bytes,
               facts: EntryFacts | None = None) -> None:
        """Written whole under the key's lock; so a temporary of this key found
        here is a dead writer's, and goes."""
        for name in os.listdir(fd):
            if name.startswith(f".{key}.") and name.endswith(".tmp"):
                try:
                    os.unlink(name, dir_fd=fd)
                except OSError:
                    pass
        temp = f".{key}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, 0o600, dir_fd=fd)
        try:
            with os.fdopen(out, "wb") as f:
                f.write(self._encode(key, engine, facts))
                f.flush()
                os.fsync(f.fileno())
            os.replace(temp, f"{key}.engine", src_dir_fd=fd, dst_dir_fd=fd)
            os.fsync(fd)  # the rename itself survives a crash
        except BaseException:
            try:
                os.unlink(temp, dir_fd=fd)
            except OSError:
                pass
            raise

    def _lock(self, fd: int, key: str, where: Path) -> int:
        lock = os.open(f"{key}.lock", os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o600, dir_fd=fd)
        try:
            _check_ours(os.fstat(lock), str(where / f"{key}.lock"))
            fcntl.flock(lock, fcntl.LOCK_EX)
            return lock
        except BaseException:
            os.close(lock)
            raise

    def _cached(self, fd: int, key: str, where: Path, locked: bool,
                wanted: EntryFacts | None = None) -> tuple[Fetched | None, str | None]:
        """(what the entry holds or None, why an entry was rejected). Under the
        lock a rejected entry is reported and removed."""
        try:
            found = self._read_entry(fd, key, where, wanted)
            return (Fetched(found[0], False, found[1]) if found else None), None
        except (CacheUnusable, OSError) as e:
            reason = f"rejected a cached engine: {e}; rebuilding it"
            if locked:
                _note(reason)
                try:
                    os.unlink(f"{key}.engine", dir_fd=fd)  # removes a link, never its target
                except OSError:
                    pass
            return None, reason

    def get_or_build(self, key: str, build: Callable[[], bytes]) -> bytes:
        return self.fetch(key, build).engine

    def fetch(self, key: str, build: Callable[[], bytes],
              facts: EntryFacts | None = None) -> Fetched:
        """The entry for `key` if it is intact (and, with `facts`, built for
        them), else `build()`'s result, stored with `facts` and the measured
        build time."""
        if not _KEY.fullmatch(key):
            raise ValueError(f"cache key {key!r} is not a plain name ([0-9A-Za-z_.-], 1-128)")
        try:
            fd, where = self._open_folder()
        except (CacheUnusable, OSError) as e:
            _note(f"not using {self.directory}: {e}; building without the cache")
            return _timed_build(build, f"the engine cache at {self.directory} was not used: "
                                f"{e}", facts)
        try:
            found, _ = self._cached(fd, key, where, locked=False, wanted=facts)
            if found is not None:
                return found
            try:
                lock = self._lock(fd, key, where)
            except (CacheUnusable, OSError) as e:
                _note(f"cannot lock {where / key}.lock: {e}; building without the cache")
                return _timed_build(build, f"the engine cache lock was not usable: {e}", facts)
            try:
                # Another process may have built it while we waited.
                found, rejected = self._cached(fd, key, where, locked=True, wanted=facts)
                if found is not None:
                    return found
                fetched = replace(_timed_build(build, rejected, facts), rejected=rejected)
                try:
                    self._write(fd, key, fetched.engine, fetched.facts)
                except OSError as e:
                    # The engine is good; a load runs it uncached (prepare refuses).
                    why = str(write_error(e, where / f"{key}.engine", len(fetched.engine)))
                    _note(f"{why} The engine is used without being cached.")
                    return replace(fetched, not_stored=why)
                return fetched
            finally:
                os.close(lock)  # releases the flock
        finally:
            os.close(fd)

    def peek(self, key: str, facts: EntryFacts | None = None) -> tuple[Fetched | None, str | None]:
        """(the usable entry for `key` or None, why an entry there is refused):
        reads only, never builds, locks or removes (for `inspect`)."""
        if not _KEY.fullmatch(key):
            raise ValueError(f"cache key {key!r} is not a plain name ([0-9A-Za-z_.-], 1-128)")
        try:
            fd, where = self._open_folder(create=False)
        except FileNotFoundError:
            return None, None
        except (CacheUnusable, OSError) as e:
            return None, f"the cache folder is not used: {e}"
        try:
            return self._cached(fd, key, where, locked=False, wanted=facts)
        finally:
            os.close(fd)


def _timed_build(build: Callable[[], bytes], note: str | None,
                 facts: EntryFacts | None) -> Fetched:
    start = time.perf_counter()
    engine = _build(build, note)
    seconds = time.perf_counter() - start
    return Fetched(engine, True, replace(facts, build_seconds=round(seconds, 3))
                   if facts is not None else None)


def _build(build: Callable[[], bytes], note: str | None) -> bytes:
    try:
        engine = build()
    except Exception as e:
        if note:
            e.add_note(note)
        raise
    if not isinstance(engine, (bytes, bytearray, memoryview)):
        raise TypeError(f"the engine build returned {type(engine).__name__}, not bytes")
    return bytes(engine)
