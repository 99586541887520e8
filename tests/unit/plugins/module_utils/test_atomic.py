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
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.hook_view import view_path, write_view
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.housekeeping import IrqRecord
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.metrics import Metrics
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.resize import BaselineFile
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations import daemon_dropins
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.runtime_hook import (Containerd,
                                                                                                  hook_entry,
                                                                                                  install_crio)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.irqbalance import IrqBalance
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.containerd_corpus import containerd_reads, write_case


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


# --- every writer of the collection, on a file that is there ---------------------------------------------------------
def _file(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def _containerd(directory, broken=False):
    """A containerd 2.1 whose config dump says what containerd's rules read (or nothing, ``broken``), on a main file
    and a drop-in that redefines the runc table."""

    write_case(directory, "a drop-in redefines the runc table without the key (63.6)")

    def run(argv):
        if argv[1:] == ["--version"]:
            return "containerd github.com/containerd/containerd v2.1.9 x"
        if argv[1:] == ["oci", "spec"]:
            return '{"ociVersion": "1.1.0"}'
        value = None if broken else containerd_reads(argv[2], (2, 1))
        return "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n%s" % (
            "" if value is None else "  base_runtime_spec = '%s'\n" % value)

    return Containerd(os.path.join(directory, "config.toml"), "runc", os.path.join(directory, "spec.json"), run)


def _entry():
    return hook_entry("/usr/bin/python3", "/opt/kubecpu/bin/kubecpu", "/etc/kubecpu/agent.json", 10)


def containerd_install(directory):
    containerd = _containerd(directory)
    return os.path.join(directory, "conf.d", "50-runc.toml"), lambda: containerd.install(_entry(), check=False)


def containerd_removal(directory):
    containerd = _containerd(directory)
    containerd.install(_entry(), check=False)
    return os.path.join(directory, "conf.d", "50-runc.toml"), lambda: containerd.remove(check=False)


def containerd_roll_back(directory):
    """A failed verify writes the file back (its bytes as they were, a new file all the same)."""
    containerd = _containerd(directory, broken=True)

    def install():
        with pytest.raises(ConfigError, match="base_runtime_spec None"):
            containerd.install(_entry(), check=False)

    return os.path.join(directory, "conf.d", "50-runc.toml"), install


def containerd_main_file(directory):
    path = _file(os.path.join(directory, "config.toml"), "version = 3\n[grpc]\n  address = '/x'\n")
    containerd = Containerd(path, "runc", os.path.join(directory, "spec.json"),
                            _containerd(os.path.join(directory, "unused")).run)
    return path, lambda: containerd.install(_entry(), check=False)


def crio_hooks_d(directory):
    path = _file(os.path.join(directory, "hooks.d", "kubecpu.json"), "{}\n")
    return path, lambda: install_crio(os.path.dirname(path), _entry(), check=False)


def daemon_drop_in(directory):
    _file(os.path.join(directory, "cgroup", "cgroup.controllers"), "cpuset cpu\n")
    _file(os.path.join(directory, "sys/devices/system/cpu/online"), "0-3\n")
    path = _file(daemon_dropins.dropin_path(os.path.join(directory, "systemd"), "kubelet.service"), "[Service]\n")
    return path, lambda: daemon_dropins.apply(
        present=True, cpus="0-1", units=["kubelet.service"], cgroup_root=os.path.join(directory, "cgroup"),
        sysfs_root=directory, systemd_dir=os.path.join(directory, "systemd"), check_mode=False, reload=None)


def irqbalance_environment(directory):
    path = _file(os.path.join(directory, "irqbalance"), "IRQBALANCE_ARGS=\n")
    return path, lambda: IrqBalance(directory, path).persist(CPUSet.parse("2-3"))


def checkpoint(directory):
    """kubecpu's state file, and the kubelet's checkpoint when kubecpu writes it (the kubelet writes it 0600: the
    mode kubecpu gives a new one, and keeps on any)."""
    store = StateStore(os.path.join(directory, "cpu_manager_state"))
    store.save(CPUState("static", CPUSet.parse("0-3")))
    return store.path, lambda: store.save(CPUState("static", CPUSet.parse("0-2"), {"pod": {"c": CPUSet.parse("3")}}))


def metrics(directory):
    path = _file(os.path.join(directory, "kubecpu.prom"), "# old\n")
    return path, lambda: Metrics().write(path)


def interrupt_record(directory):
    path = _file(os.path.join(directory, "irq.json"), "{}\n")
    record = {"kept_off": "3", "originals": {}, "wrote": {}, "writing": {}, "actions": {}, "seen": "",
              "banned": None, "banned_pid": None, "refused": []}
    return path, lambda: IrqRecord(path).save(record)


def resize_baselines(directory):
    path = _file(os.path.join(directory, "baselines.json"), "{}\n")
    return path, lambda: BaselineFile(path).save({"pod": {"c": CPUSet.parse("1")}})


def hook_view(directory):
    state = os.path.join(directory, "state")
    path = _file(view_path(state), "{}\n")
    return path, lambda: write_view(state, [1, 2, 3, 4, 5], CPUState("static", CPUSet.parse("0-3")))


WRITERS = [containerd_install, containerd_removal, containerd_roll_back, containerd_main_file, crio_hooks_d,
           daemon_drop_in, irqbalance_environment, checkpoint, metrics, interrupt_record, resize_baselines, hook_view]


@pytest.mark.parametrize("writer", WRITERS, ids=[writer.__name__ for writer in WRITERS])
@settings(max_examples=15)
@given(st.tuples(*owners()), st.integers(0, 0o7777))
def test_every_writer_keeps_the_owner_group_and_mode_of_a_file_it_rewrites(writer, owner, mode):
    """Finding 62.3's rule for the whole collection: whatever owner, group and mode a file has, every kubecpu writer
    that rewrites it (containerd's config and drop-ins on install, removal and roll-back, CRI-O's hooks.d file, the
    daemons' drop-ins, irqbalance's environment file (rewritten in place), the checkpoint, the metrics, the interrupt
    record, the baselines, the hook's view) leaves them as they were."""
    with tempfile.TemporaryDirectory() as directory:
        path, rewrite = writer(directory)
        os.chown(path, *owner)
        os.chmod(path, mode)
        before, old = os.stat(path), open(path, "rb").read()
        os.link(path, os.path.join(directory, "held"))  # the old inode stays: no new file can get its number
        rewrite()
        after = os.stat(path)
        # replaced (a new inode: the roll-back's bytes are the old ones), or rewritten in place (irqbalance's file)
        assert after.st_ino != before.st_ino or open(path, "rb").read() != old
        assert (after.st_uid, after.st_gid, after.st_mode & 0o7777) == owner + (mode,)
