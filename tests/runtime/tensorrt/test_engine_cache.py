"""The engine cache in a shared folder: only entries this user wrote, intact,
are used; a rejected entry is rebuilt; one process builds at a time."""
from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import stat
import time
from pathlib import Path

import pytest

from executorch_tensorrt.runtime.tensorrt.engine_cache import EngineCache, EntryFacts

KEY = "ab" * 32
ENGINE = b"engine bytes " * 100
NOBODY = 65534


class Builds:
    """A build callable that counts its calls."""

    def __init__(self, engine: bytes = ENGINE):
        self.engine, self.calls = engine, 0

    def __call__(self) -> bytes:
        self.calls += 1
        return self.engine


def entry(folder: Path) -> Path:
    return folder / f"{KEY}.engine"


def cached(folder: Path) -> EngineCache:
    """A cache in `folder` already holding ENGINE for KEY."""
    cache = EngineCache(folder)
    assert cache.get_or_build(KEY, Builds()) == ENGINE
    assert entry(folder).is_file()
    return cache


def test_a_stored_entry_is_used_and_private(tmp_path):
    folder = tmp_path / "a" / "cache"
    cache = cached(folder)
    again = Builds(b"other")
    assert cache.get_or_build(KEY, again) == ENGINE and again.calls == 0
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(entry(folder).stat().st_mode) == 0o600
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_a_planted_file_is_not_an_engine(tmp_path, capfd):
    tmp_path.chmod(0o700)
    entry(tmp_path).write_bytes(b"planted: not written by the cache")
    build = Builds()
    assert EngineCache(tmp_path).get_or_build(KEY, build) == ENGINE and build.calls == 1
    assert "rejected a cached engine" in capfd.readouterr().err
    assert EngineCache(tmp_path).get_or_build(KEY, Builds(b"x")) == ENGINE  # rebuilt entry


@pytest.mark.parametrize("change", ["flip", "truncate", "other key"])
def test_tampered_entries_are_rebuilt(tmp_path, change, capfd):
    cached(tmp_path)
    data = bytearray(entry(tmp_path).read_bytes())
    if change == "flip":
        data[-1] ^= 1
    elif change == "truncate":
        del data[-10:]
    else:
        data[8] ^= 1  # the key digest
    entry(tmp_path).write_bytes(bytes(data))
    build = Builds()
    assert EngineCache(tmp_path).get_or_build(KEY, build) == ENGINE and build.calls == 1
    assert "rejected a cached engine" in capfd.readouterr().err


def test_a_symlinked_entry_is_not_followed(tmp_path, capfd):
    target = tmp_path / "elsewhere"
    target.write_bytes(EngineCache._encode(KEY, b"attacker's engine"))
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir(mode=0o700)
    entry(cache_dir).symlink_to(target)
    build = Builds()
    assert EngineCache(cache_dir).get_or_build(KEY, build) == ENGINE and build.calls == 1
    assert "symbolic link" in capfd.readouterr().err
    assert target.read_bytes() == EngineCache._encode(KEY, b"attacker's engine")  # untouched
    assert not entry(cache_dir).is_symlink()


def test_a_symlinked_cache_folder_is_not_used(tmp_path, capfd):
    real = tmp_path / "real"
    cached(real)
    link = tmp_path / "link"
    link.symlink_to(real)
    build = Builds(b"fresh")
    assert EngineCache(link).get_or_build(KEY, build) == b"fresh" and build.calls == 1
    assert "symbolic link" in capfd.readouterr().err


def test_an_entry_owned_by_another_user_is_rejected(tmp_path, capfd):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a file to another user")  # CI runs as root
    cached(tmp_path)
    os.chown(entry(tmp_path), NOBODY, NOBODY)
    build = Builds()
    assert EngineCache(tmp_path).get_or_build(KEY, build) == ENGINE and build.calls == 1
    assert f"owned by uid {NOBODY}" in capfd.readouterr().err


def test_a_folder_owned_by_another_user_is_not_used(tmp_path, capfd):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a folder to another user")
    folder = tmp_path / "theirs"
    cached(folder)
    os.chown(folder, NOBODY, NOBODY)
    build = Builds(b"fresh")
    assert EngineCache(folder).get_or_build(KEY, build) == b"fresh" and build.calls == 1
    assert f"owned by uid {NOBODY}" in capfd.readouterr().err


@pytest.mark.parametrize("mode", [0o770, 0o777], ids=["group", "world"])
def test_a_group_or_world_writable_folder_is_not_used(tmp_path, mode, capfd):
    cached(tmp_path / "c")
    (tmp_path / "c").chmod(mode)
    build = Builds(b"fresh")
    assert EngineCache(tmp_path / "c").get_or_build(KEY, build) == b"fresh"
    assert "writable by group or others" in capfd.readouterr().err


def test_an_entry_writable_by_others_is_rejected(tmp_path, capfd):
    cached(tmp_path)
    entry(tmp_path).chmod(0o666)
    build = Builds()
    assert EngineCache(tmp_path).get_or_build(KEY, build) == ENGINE and build.calls == 1
    assert "writable by group or others" in capfd.readouterr().err


def test_a_shared_sticky_folder_gets_a_private_subfolder(tmp_path):
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    cache = EngineCache(shared)
    assert cache.get_or_build(KEY, Builds()) == ENGINE
    private = shared / f"executorch_tensorrt-{os.geteuid()}"
    assert entry(private).is_file() and stat.S_IMODE(private.stat().st_mode) == 0o700
    again = Builds(b"x")
    assert cache.get_or_build(KEY, again) == ENGINE and again.calls == 0


def test_a_failed_build_says_why_the_entry_was_rejected(tmp_path):
    tmp_path.chmod(0o700)
    entry(tmp_path).write_bytes(b"planted")

    def failing() -> bytes:
        raise RuntimeError("no TensorRT here")

    with pytest.raises(RuntimeError) as raised:
        EngineCache(tmp_path).get_or_build(KEY, failing)
    assert any("rejected a cached engine" in note for note in raised.value.__notes__)


def _slow_build_in_a_process(folder: str, marker: str, start) -> None:
    def build() -> bytes:
        with open(marker, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(1.0)
        return ENGINE

    start.wait()
    assert EngineCache(folder).get_or_build(KEY, build) == ENGINE


def test_two_processes_build_an_engine_once(tmp_path):
    context = multiprocessing.get_context("fork")  # the child runs only engine_cache.py
    start = context.Barrier(2)
    marker = tmp_path / "builds.txt"
    processes = [context.Process(target=_slow_build_in_a_process,
                                 args=(str(tmp_path / "cache"), str(marker), start))
                 for _ in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
    assert [p.exitcode for p in processes] == [0, 0]
    assert len(marker.read_text().splitlines()) == 1


FACTS = EntryFacts("cd" * 32, "SM89", "tensorrt_rtx", "1.7.1.116")


def test_an_entry_with_facts_records_the_build_time_and_is_found_by_them(tmp_path):
    fetched = EngineCache(tmp_path).fetch(KEY, Builds(), FACTS)
    assert fetched.built and fetched.facts.build_seconds is not None
    again = EngineCache(tmp_path).fetch(KEY, Builds(b"other"), FACTS)
    assert not again.built and again.engine == ENGINE and again.facts == fetched.facts
    assert EngineCache(tmp_path).peek(KEY, FACTS) == (again, None)


def _facts_entry(facts_json: bytes, declared: int | None = None) -> bytes:
    """An ETRTENG2 entry with these facts bytes and a correct digest."""
    import hashlib
    import struct

    body = struct.pack("<I", len(facts_json) if declared is None else declared) \
        + facts_json + ENGINE
    return struct.pack("<8s32sQ32s", b"ETRTENG2", hashlib.sha256(KEY.encode()).digest(),
                       len(body), hashlib.sha256(body).digest()) + body


@pytest.mark.parametrize("data, reason", [
    (_facts_entry(b"{}", declared=1 << 20), "build-facts length past its end"),
    (_facts_entry(b"not json"), "unreadable build facts"),
    (_facts_entry(json.dumps({"program": 1, "capability": "SM89", "trt_flavor": "x",
                              "trt_version": "1"}).encode()), "unreadable build facts"),
    (EngineCache._encode(KEY, ENGINE), "does not record what it was built for"),
    (EngineCache._encode(KEY, ENGINE, FACTS)[:-1], "truncated or modified"),
], ids=["facts length", "facts not json", "facts wrong type", "no facts", "truncated"])
def test_damaged_entries_with_facts_are_rebuilt(tmp_path, capfd, data, reason):
    tmp_path.chmod(0o700)
    entry(tmp_path).write_bytes(data)
    entry(tmp_path).chmod(0o600)
    found, refused = EngineCache(tmp_path).peek(KEY, FACTS)  # inspect: reads only
    assert found is None and reason in refused and entry(tmp_path).exists()
    build = Builds(b"fresh")
    fetched = EngineCache(tmp_path).fetch(KEY, build, FACTS)
    assert fetched.engine == b"fresh" and build.calls == 1 and reason in fetched.rejected
    assert reason in capfd.readouterr().err


def test_a_changed_build_time_is_a_modified_entry(tmp_path):
    tmp_path.chmod(0o700)
    data = EngineCache._encode(KEY, ENGINE, dataclasses.replace(FACTS, build_seconds=1.0))
    entry(tmp_path).write_bytes(data.replace(b'"build_seconds": 1.0', b'"build_seconds": 9.0'))
    entry(tmp_path).chmod(0o600)
    assert "truncated or modified" in EngineCache(tmp_path).peek(KEY, FACTS)[1]


def test_a_dead_writers_temporary_goes_with_the_next_write(tmp_path):
    """A writer killed mid-write leaves `.<key>.<pid>.<rand>.tmp`; the next
    write of that key (under its lock, so never a live writer's) removes it."""
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    stale = folder / f".{KEY}.99999.deadbeef.tmp"
    stale.write_bytes(b"half an engine")
    other = folder / f".{'cd' * 32}.99999.deadbeef.tmp"  # another key's: not ours to judge
    other.write_bytes(b"x")
    assert EngineCache(folder).get_or_build(KEY, Builds()) == ENGINE
    assert not stale.exists() and other.exists()
    assert sorted(p.name for p in folder.iterdir() if p.suffix == ".tmp") == [other.name]


STORE_OVER_LIMIT = """
import resource, signal, sys
from executorch_tensorrt.runtime.tensorrt.engine_cache import EngineCache
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # the write fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
fetched = EngineCache(sys.argv[1]).fetch("%s", lambda: b"e" * 5000)
print(len(fetched.engine), fetched.built, bool(fetched.not_stored))
""" % KEY


def test_an_engine_that_cannot_be_stored_is_used_uncached(tmp_path):
    """A file-size limit (a real EFBIG from the kernel) makes the store fail:
    the load still gets its engine, says why it is not cached, and leaves no
    partial entry or temporary."""
    import subprocess
    import sys

    folder = tmp_path / "cache"
    done = subprocess.run([sys.executable, "-c", STORE_OVER_LIMIT, str(folder)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["5000", "True", "True"]
    assert "larger than the file system allows" in done.stderr
    assert "used without being cached" in done.stderr
    assert [p.name for p in folder.iterdir() if not p.name.endswith(".lock")] == []
