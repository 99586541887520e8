"""atomic_write: a reader sees the old file or the new one; on any failure the old bytes stay and no temporary file
is left; ``durable`` fsyncs the file before the rename and the directory after."""

from __future__ import annotations

import errno
import os
import signal
import stat
import tempfile
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils import atomic


def temporaries(directory):
    return [name for name in os.listdir(directory) if ".tmp-" in name]


@pytest.mark.parametrize("durable, syncs", [(True, 2), (False, 0)])
def test_a_replaced_file_keeps_its_mode_a_new_one_gets_the_given_mode_and_syncs_only_when_durable(
        tmp_path, monkeypatch, durable, syncs):
    path = tmp_path / "file"
    path.write_bytes(b"old")
    os.chmod(path, 0o640)
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd) or real(fd))
    written = atomic.atomic_write(str(path), b"new", durable=durable, mode=0o644)
    assert path.read_bytes() == b"new" and os.stat(path).st_mode & 0o7777 == 0o640  # the file's, not the default
    assert written.st_ino == os.stat(path).st_ino and len(calls) == syncs and temporaries(tmp_path) == []
    atomic.atomic_write(str(tmp_path / "new"), b"x", durable=durable, mode=0o644)
    atomic.atomic_write(str(tmp_path / "private"), b"x", durable=durable)
    assert [os.stat(tmp_path / name).st_mode & 0o7777 for name in ("new", "private")] == [0o644, 0o600]


def owners():
    """Owners and groups this process can give a file: any as root, else its own."""
    if os.geteuid() == 0:
        return st.integers(0, 65534), st.integers(0, 65534)
    return st.just(os.geteuid()), st.sampled_from(sorted(set(os.getgroups()) | {os.getegid()}))


@settings(max_examples=200)
@given(st.tuples(*owners()), st.integers(0, 0o7777))
def test_a_replaced_file_keeps_its_owner_group_and_mode_setuid_setgid_and_sticky_included(owner, mode):
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "file")
        with open(path, "wb") as handle:
            handle.write(b"old")
        os.chown(path, *owner)
        os.chmod(path, mode)
        atomic.atomic_write(path, b"new", durable=False)
        after = os.stat(path)
        assert (after.st_uid, after.st_gid, after.st_mode & 0o7777) == owner + (mode,)


def test_an_owner_that_cannot_be_given_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    """A writer that is not root replacing another user's file: the rename would hand the file to the writer, so
    nothing is replaced."""
    path = tmp_path / "file"
    path.write_bytes(b"old")
    before = os.stat(path)
    real_stat = os.stat

    def owned_by_another(name, *args, **kwargs):  # the file is another user's (as this process sees it)
        found = real_stat(name, *args, **kwargs)
        if str(name) != str(path):
            return found
        fields = list(found)
        fields[stat.ST_UID] = found.st_uid + 1
        return os.stat_result(fields)

    monkeypatch.setattr(os, "stat", owned_by_another)

    def refused(*_args):
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(os, "fchown", refused)
    with pytest.raises(PermissionError):
        atomic.atomic_write(str(path), b"new", durable=True)
    assert path.read_bytes() == b"old" and os.stat(path).st_ino == before.st_ino and temporaries(tmp_path) == []


@pytest.mark.parametrize("failing", ["fsync", "replace", "fchmod"])
def test_a_failure_keeps_the_old_bytes_and_removes_the_temporary_file(tmp_path, monkeypatch, failing):
    path = tmp_path / "file"
    path.write_bytes(b"old")

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, failing, full)
    with pytest.raises(OSError, match="No space left on device"):
        atomic.atomic_write(str(path), b"new", durable=True)
    assert path.read_bytes() == b"old" and temporaries(tmp_path) == []


def test_before_rename_runs_once_the_data_is_written_and_its_failure_removes_the_temporary(tmp_path):
    path = tmp_path / "file"
    path.write_bytes(b"old")
    seen = []
    atomic.atomic_write(str(path), b"new", durable=False, before_rename=lambda: seen.append(path.read_bytes()))
    assert seen == [b"old"] and path.read_bytes() == b"new"

    def refuse():
        raise OSError(errno.EIO, "no")

    with pytest.raises(OSError):
        atomic.atomic_write(str(path), b"newer", durable=False, before_rename=refuse)
    assert path.read_bytes() == b"new" and temporaries(tmp_path) == []


def test_an_interrupt_also_removes_the_temporary_file(tmp_path, monkeypatch):
    def interrupted(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic.atomic_write(str(tmp_path / "file"), b"x", durable=False)
    assert os.listdir(tmp_path) == []


def test_a_temporary_file_is_new_private_and_named_after_its_file(tmp_path, monkeypatch):
    taken = tmp_path / ".state.tmp-000000000000"
    taken.write_bytes(b"someone else's")
    draws = iter([bytes(6), bytes(6), b"\x01" * 6])  # the first two names are taken: a third is drawn
    monkeypatch.setattr(os, "urandom", lambda _n: next(draws))
    fd, tmp = atomic.create_temporary(str(tmp_path), "state")
    os.close(fd)
    assert tmp == str(tmp_path / ".state.tmp-010101010101") and os.stat(tmp).st_mode & 0o777 == 0o600
    assert taken.read_bytes() == b"someone else's"


def test_a_writer_killed_before_its_rename_leaves_its_temporary_and_the_next_sweeps_it(tmp_path):
    """SIGKILL runs no clean-up (a real one, in a child process): the temporary file stays. ``sweep_temporaries``
    removes those older than ``STALE_AFTER`` of the file and the files named after it; a write in progress (a fresh
    temporary) and other files are left alone."""
    path = tmp_path / "state"
    child = os.fork()
    if child == 0:  # the writer, killed between writing and renaming
        atomic.atomic_write(str(path), b"new", durable=False, before_rename=lambda: os.kill(os.getpid(), signal.SIGKILL))
        os._exit(0)
    _pid, status = os.waitpid(child, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    left = temporaries(tmp_path)
    assert len(left) == 1 and left[0].startswith(".state.tmp-") and not path.exists()
    for name in (".state.hookview.tmp-0a0b0c0d0e0f", "state.prev-tmp-4242", ".other.tmp-0a0b0c0d0e0f"):
        (tmp_path / name).write_bytes(b"x")
    fresh = ".state.containers.json.tmp-111111111111"
    (tmp_path / fresh).write_bytes(b"being written")
    stale = time.time() - atomic.STALE_AFTER - 1
    for name in left + [".state.hookview.tmp-0a0b0c0d0e0f", "state.prev-tmp-4242", ".other.tmp-0a0b0c0d0e0f"]:
        os.utime(tmp_path / name, (stale, stale))
    removed = atomic.sweep_temporaries(str(tmp_path), "state")
    assert sorted(removed) == sorted(left + [".state.hookview.tmp-0a0b0c0d0e0f", "state.prev-tmp-4242"])
    assert sorted(os.listdir(tmp_path)) == sorted([".other.tmp-0a0b0c0d0e0f", fresh])
    assert atomic.sweep_temporaries(str(tmp_path / "missing"), "state") == []
