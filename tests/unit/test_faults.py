"""Faults: a full disk (a real 64 KiB tmpfs, and an injected write error), a state directory that cannot be
written, and the next pass recovering. Documented behaviour: the write fails with a StoreError naming the file,
the previous bytes stay, no temporary file is left behind, and the next write succeeds."""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.checkpoint import encode
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import StoreError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.state_store import StateStore


def big_state(entries):
    state = CPUState("static", CPUSet.parse("0-1"))
    for n in range(entries):
        state.set("pod-%05d-%s" % (n, "x" * 40), "container-%d" % n, CPUSet([2 + n]))
    return state


def leftovers(directory):
    return [name for name in os.listdir(directory) if ".tmp-" in name]


def test_an_injected_write_error_keeps_the_file_and_the_next_write_recovers(tmp_path, monkeypatch):
    path = str(tmp_path / "state")
    store = StateStore(path)
    store.save(big_state(1))
    before = open(path, "rb").read()

    def full(_fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StoreError, match="cannot write state file %s: No space left on device" % path):
        store.save(big_state(2))
    assert open(path, "rb").read() == before and leftovers(tmp_path) == []
    monkeypatch.undo()
    assert store.save(big_state(2)) and open(path, "rb").read() == encode(big_state(2))


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_really_full_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], check=False,
                      stderr=subprocess.DEVNULL).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        path = str(mount / "state")
        store = StateStore(path)
        store.save(big_state(1))
        before = open(path, "rb").read()
        with open(mount / "filler", "wb", buffering=0) as filler:  # fill the disk: no room for the next state
            try:
                while filler.write(b"\0" * 4096):
                    pass
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
        with pytest.raises(StoreError, match="No space left on device"):
            store.save(big_state(400))
        assert open(path, "rb").read() == before and leftovers(mount) == []
        os.unlink(mount / "filler")
        assert store.save(big_state(400))  # room again: the next pass recovers
        assert StateStore(path).load() == big_state(400)
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_state_directory_that_cannot_be_written(tmp_path, monkeypatch):
    path = str(tmp_path / "state")
    store = StateStore(path)
    store.save(big_state(1))
    before = open(path, "rb").read()

    def read_only(*_args, **_kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr("tempfile.mkstemp", read_only)
    with pytest.raises(StoreError, match="Read-only file system"):
        store.save(big_state(3))
    assert open(path, "rb").read() == before
