"""Faults: a full disk (a real 64 KiB tmpfs, and an injected write error), a state directory that cannot be
written, a filesystem remounted read-only, 100 module runs and the agent at once, and the next pass recovering.
Documented behaviour: the write fails with a StoreError naming the file, the previous bytes stay, no temporary file
is left behind, and the next write succeeds."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import time

import ansible
import pytest

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils import atomic
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint import encode
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.container_cache import ContainerCache
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import StoreError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.metrics import Metrics
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import NodeConfig
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.factory import build_manager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.model import ContainerInfo
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore

from ansible_collections.kubecpu.cpu_manager.tests.unit.support import fake_crictl
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.kubelet_cases import ROOT, collections_path


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


@contextlib.contextmanager
def tmpfs(directory, size):
    """A real tmpfs of ``size`` mounted at ``directory`` (root only), unmounted afterwards."""
    directory.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", str(directory)],
                                           check=False, stderr=subprocess.DEVNULL).returncode:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield directory
    finally:
        subprocess.run(["umount", str(directory)], check=False)


def test_a_really_full_disk(tmp_path):
    with tmpfs(tmp_path / "small", "64k") as mount:
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


def test_a_state_directory_that_cannot_be_written(tmp_path, monkeypatch):
    path = str(tmp_path / "state")
    store = StateStore(path)
    store.save(big_state(1))
    before = open(path, "rb").read()

    def read_only(*_args, **_kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(atomic, "create_temporary", read_only)
    with pytest.raises(StoreError, match="Read-only file system"):
        store.save(big_state(3))
    assert open(path, "rb").read() == before


def test_a_read_only_filesystem_is_a_clear_error_and_the_next_pass_recovers(tmp_path):
    """The state's filesystem remounted read-only (what the kernel does after an I/O error): a writer fails naming
    the file and the cause, a reader still reads, nothing is lost; remounted read-write, the next write succeeds."""
    with tmpfs(tmp_path / "ro", "1m") as mount:
        path = str(mount / "state")
        store = StateStore(path)
        with store.locked():
            store.save(big_state(1))
        before = open(path, "rb").read()
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        with pytest.raises(StoreError, match="cannot open lock file %s.lock: Read-only file system" % path):
            with store.locked():
                store.save(big_state(2))
        with pytest.raises(StoreError, match="cannot write state file %s: Read-only file system" % path):
            store.save(big_state(2))  # even without the lock (a caller that skipped it)
        assert StateStore(path, read_only=True).load() == big_state(1)
        assert open(path, "rb").read() == before
        subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=True)
        with store.locked():
            assert store.save(big_state(2))
        assert StateStore(path).load() == big_state(2) and leftovers(mount) == []


FORKS = 25  # module runs at once: a hundred Python start-ups at once on two CPUs hold the lock back past its 60 s
# Seconds a module run may take, a guard against a hang: the runs take the lock in no set order, so one run can wait
# for most of the others. The whole test takes 90 s alone (180 CPU seconds: the runs' Python, the stand-in crictl's);
# beside the guests' emulation, under a CPU left to the units, its first run had not ended after 300 s (2026-12-07).
RUN_TIMEOUT = 1200


def test_a_hundred_module_allocations_and_the_agent_together(tmp_path):
    """100 cpu_manager_allocate runs, FORKS at a time (separate processes, as Ansible's forks start them; every other one
    with apply=false, recording only) and the agent looping at 50 ms share one state file on a 128-CPU node whose
    runtime lists 100 new Guaranteed 1-CPU pods. Whoever comes first allocates; nobody double-books a CPU, every
    module run succeeds, the runtime ends up with what the state says, and the file stays valid. Concurrent runs
    share their inspections through the container cache, which each reads again under the lock."""
    node = fake_crictl.make_node(str(tmp_path), cpus="0-127")
    added = fake_crictl.add_guaranteed(str(tmp_path), 100, "0-127")
    state = str(tmp_path / "state")
    common = {"state_path": state, "crictl_path": node["crictl"], "cgroup_root": node["cgroup"],
              "topology_path": node["topology"], "num_reserved": 2, "kubelet_state_path": str(tmp_path / "none")}
    # the collection and the ansible-core this test runs with (ansible-test units puts it on sys.path itself)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([collections_path(), os.path.dirname(os.path.dirname(
        ansible.__file__))]))
    module = os.path.join(ROOT, "plugins", "modules", "cpu_manager_allocate.py")
    agent = subprocess.Popen(
        [os.path.join(ROOT, "bin", "kubecpu"), "reconcile", "--loop", "--period", "50ms", "--crictl",
         node["crictl"], "--cgroup-root", node["cgroup"], "--topology", node["topology"], "--state", state,
         "--num-reserved", "2", "--kubelet-state", str(tmp_path / "none")],
        env=dict(env, KUBECPU_PYTHON=sys.executable), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        runs, results = {}, {}
        for n, (uid, cid) in enumerate(added.items()):
            if n >= FORKS:  # a window of FORKS runs at a time, as Ansible's forks start them
                done = list(runs)[n - FORKS]
                results[done] = runs[done].communicate(timeout=RUN_TIMEOUT)
            args = tmp_path / ("args-%s.json" % uid)
            args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(common, container_id=cid, apply=n % 2 == 0)}))
            runs[uid] = subprocess.Popen([sys.executable, module, str(args)], env=env, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
        results.update({uid: run.communicate(timeout=RUN_TIMEOUT) for uid, run in runs.items() if uid not in results})
        assert [run.returncode for run in runs.values()] == [0] * 100, [  # the first three failures' messages
            json.loads(out)["msg"] if out.strip().startswith("{") else err[-500:]
            for run, (out, err) in zip(runs.values(), results.values()) if run.returncode][:3]
        deadline = time.monotonic() + 60
        while not all(fake_crictl.cgroup_cpus(node, cid) != "0-127" for cid in added.values()):
            assert time.monotonic() < deadline, "the agent did not apply the allocations"
            time.sleep(0.2)
        time.sleep(0.5)  # one more agent pass over the settled node
    finally:
        agent.send_signal(signal.SIGTERM)
        _out, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err
    saved = build_manager(NodeConfig(state_path=state, num_reserved=2, topology_path=node["topology"],
                                     read_only=True)).read_state()  # validated as the kubelet would at a restart
    taken = CPUSet()
    for uid, cid in added.items():
        answer = json.loads(results[uid][0])
        cpus = saved.get(uid, "main")
        assert cpus is not None and len(cpus) == 1 and answer["exclusive"], answer
        assert CPUSet.parse(answer["cpus"]) == cpus  # what the module said is what the state holds
        assert fake_crictl.cgroup_cpus(node, cid) == str(cpus)  # and what the runtime applied
        assert cpus.isdisjoint(taken)
        taken = taken.union(cpus)
    assert len(taken) == 100 and saved.default.isdisjoint(taken)


def test_a_full_disk_leaves_no_temporary_file_of_the_cache_or_the_metrics(tmp_path):
    """Each agent pass writes the container cache and the metrics: on a full disk neither may leave a temporary file
    behind (one more per pass would fill what little room is left), and both recover once there is room."""
    with tmpfs(tmp_path / "small", "64k") as mount:
        cache = ContainerCache(str(mount / "state.containers.json"))
        for n in range(100):
            cache.put(ContainerInfo("%064d" % n, "pod-%d" % n, "p", "ns", "app", 0, "Guaranteed",
                                    "/kubepods/pod%d/%064d" % (n, n), 1024, 100000, 100000, 0), "CONTAINER_RUNNING")
        metrics = Metrics()
        for n in range(300):
            metrics.inc("kubecpu_runtime_calls_total", call="call-%d" % n)
        with open(mount / "filler", "wb", buffering=0) as filler:
            with contextlib.suppress(OSError):
                while filler.write(b"\0" * 4096):
                    pass
        for _pass in range(3):  # three passes
            cache.save()
            with pytest.raises(OSError):
                metrics.write(str(mount / "kubecpu.prom"))
        assert leftovers(mount) == [] and cache.dirty
        os.unlink(mount / "filler")
        cache.save()
        metrics.write(str(mount / "kubecpu.prom"))
        assert not cache.dirty and len(ContainerCache(cache.path).infos) == 100
        assert sorted(os.listdir(mount)) == ["kubecpu.prom", "state.containers.json"]
