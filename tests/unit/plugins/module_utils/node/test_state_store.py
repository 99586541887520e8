"""The state store: atomic durable writes, the previous generation, locking, corruption kept, reset,
crash safety under SIGKILL and many concurrent writers."""

from __future__ import annotations

import fcntl
import json
import os
import random
import re
import signal
import stat
import subprocess
import sys
import time

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import (CheckpointError,
                                                                                 StaleCheckpointError, StoreError)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint import decode, encode
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node import state_store
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore, fingerprint
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.kubelet_cases import ROOT, fixture_as_document

KUBECPU = os.path.join(ROOT, "bin", "kubecpu")


def _state(n):
    return CPUState("static", CPUSet(range(n, 64)), {"pod-%d" % i: {"c": CPUSet([i])} for i in range(n)})


def test_save_is_mode_0600_and_keeps_the_previous_generation(tmp_path):
    store = StateStore(str(tmp_path / "d" / "cpu_manager_state"))
    assert store.load() is None
    assert store.save(_state(1)) is True
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert not os.path.exists(store.previous_path)
    store.save(_state(2))
    assert decode(open(store.previous_path, "rb").read(), "static").state == _state(1)
    assert store.load() == _state(2)
    assert store.save(_state(2)) is False  # unchanged: no new generation
    assert decode(open(store.previous_path, "rb").read(), "static").state == _state(1)
    assert sorted(os.listdir(tmp_path / "d")) == ["cpu_manager_state", "cpu_manager_state.prev"]


@pytest.mark.parametrize("content,reason", [
    (b"{", "unexpected end of JSON input"),
    (b'{"policyName":"static","defaultCpuSet":"0-3","checksum":1}', "checkpoint is corrupted"),
    (encode(CPUState("none")), 'configured policy "static" differs from state checkpoint policy "none"'),
])
def test_a_bad_file_is_reported_with_its_name_and_kept(tmp_path, content, reason):
    path = tmp_path / "cpu_manager_state"
    path.write_bytes(content)
    store = StateStore(str(path))
    with pytest.raises(CheckpointError) as err:
        store.load()
    assert err.value.reason == reason and str(path) in str(err.value)
    assert path.read_bytes() == content


def test_reset_moves_the_file_aside(tmp_path):
    path = tmp_path / "cpu_manager_state"
    path.write_bytes(b"garbage")
    store = StateStore(str(path))
    aside = store.reset()
    assert aside and open(aside, "rb").read() == b"garbage" and not path.exists()
    assert store.reset() is None


def test_read_only_store_never_writes(tmp_path):
    path = tmp_path / "cpu_manager_state"
    path.write_bytes(encode(_state(1)))
    store = StateStore(str(path), read_only=True)
    with store.locked():
        assert store.load() == _state(1)
    with pytest.raises(StoreError, match="read-only"):
        store.save(_state(2))
    with pytest.raises(StoreError, match="read-only"):
        store.reset()
    assert sorted(os.listdir(tmp_path)) == ["cpu_manager_state"]  # no lock file either


def test_the_kubelets_file_is_read_only_by_default():
    assert StateStore("/var/lib/kubelet/cpu_manager_state").read_only
    assert not StateStore("/var/lib/kubecpu/cpu_manager_state").read_only


def test_lock_timeout_names_the_file(tmp_path):
    path = str(tmp_path / "cpu_manager_state")
    holder = StateStore(path)
    waiter = StateStore(path, lock_timeout=0.2)
    with holder.locked():
        child = os.fork()
        if child == 0:  # a separate process: flock is per open file description
            try:
                with waiter.locked():
                    os._exit(0)
            except StoreError as exc:
                os._exit(3 if "timed out" in str(exc) and path in str(exc) else 4)
        _pid, status = os.waitpid(child, 0)
    assert os.WEXITSTATUS(status) == 3


def test_sigkill_at_random_points_never_leaves_a_broken_file(tmp_path):
    """1000 writers killed at random moments: the file is always one of the states written."""
    path = str(tmp_path / "cpu_manager_state")
    states = [_state(n) for n in range(40)]
    valid = {encode(s) for s in states}
    StateStore(path).save(states[0])
    rng = random.Random(1234)
    kills = 0
    for _kill in range(1000):
        child = os.fork()
        if child == 0:
            store = StateStore(path)
            n = 0
            while True:
                n += 1
                with store.locked():
                    store.save(states[n % len(states)])
        time.sleep(rng.uniform(0, 0.004))
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        kills += 1
        data = open(path, "rb").read()
        assert data in valid, "torn or foreign checkpoint after a kill"
        if os.path.exists(path + ".prev"):
            assert open(path + ".prev", "rb").read() in valid
    assert kills == 1000
    leftovers = [n for n in os.listdir(tmp_path) if n.startswith(".cpu_manager_state.tmp-")]
    assert len(leftovers) <= kills  # temp files of killed writers may remain; never the state itself


def test_a_hundred_concurrent_allocations(tmp_path):
    topo = tmp_path / "topology.json"
    topo.write_text(json.dumps(fixture_as_document("topoDualSocketMultiNumaPerSocketHTLarge")))
    state = str(tmp_path / "cpu_manager_state")
    procs = []
    for n in range(100):
        pod = tmp_path / ("pod-%d.json" % n)
        pod.write_text(json.dumps({"uid": "uid-%d" % n, "name": "p%d" % n, "namespace": "ns", "containers": [
            {"name": "app", "cpu_request": "2", "cpu_limit": "2", "memory_request": "1G", "memory_limit": "1G"}]}))
        procs.append(subprocess.Popen(
            [KUBECPU, "allocate", "--topology", str(topo), "--state", state, "--num-reserved", "2",
             "--pod", str(pod), "--container", "app"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=dict(os.environ, KUBECPU_PYTHON=sys.executable)))
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 100, [e for _out, e in outputs]
    results = [CPUSet.parse(json.loads(out)["cpus"]) for out, _err in outputs]
    final = StateStore(state).load()
    assert final is not None and len(final.entries) == 100
    seen = CPUSet()
    for n, cpus in enumerate(results):
        assert len(cpus) == 2 and cpus.isdisjoint(seen)
        assert final.get("uid-%d" % n, "app") == cpus
        seen = seen.union(cpus)
    assert final.default.isdisjoint(seen) and len(final.default.union(seen)) == 256
    assert open(state, "rb").read() == encode(final)


def test_the_bytes_decide_whether_a_read_decodes_again(tmp_path):
    """A store remembers the file it wrote; another writer's file, or a damaged one, is read afresh."""
    path = str(tmp_path / "cpu_manager_state")
    mine, theirs = StateStore(path), StateStore(path)
    mine.save(_state(1))
    first = mine.load()
    first.set("pod-x", "c", CPUSet([63]))  # a caller's change to what it loaded stays its own
    assert mine.load() == _state(1)
    theirs.save(_state(3))
    assert mine.load() == _state(3)
    damaged = bytearray(open(path, "rb").read())
    damaged[damaged.index(b'"c":"1"') + 5] = ord("2")
    open(path, "wb").write(bytes(damaged))
    with pytest.raises(CheckpointError, match="checkpoint is corrupted"):
        mine.load()


def _holder(path, seconds):
    """A process keeping the lock ``seconds`` (its beat touching the lock file, as every holder's does): returns its pid
    once it holds the lock."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        with StateStore(path).locked():
            os.write(write_end, b"x")
            time.sleep(seconds)
        os._exit(0)
    os.close(write_end)
    os.read(read_end, 1)
    os.close(read_end)
    return pid


@pytest.mark.parametrize("hard, outcome", [(False, 0), (True, 3)])
def test_a_waiter_waits_while_the_holder_lives_and_a_hard_one_does_not(tmp_path, monkeypatch, hard, outcome):
    """A holder keeps the lock 2.5 s, its beat touching the lock file every 0.05 s: a waiter with a timeout of 1 s gets
    it after that; with hard_timeout (the hook's, the NRI plugin's) it gives up after 1 s in all."""
    monkeypatch.setattr(state_store, "LOCK_BEAT", 0.05)
    path = str(tmp_path / "cpu_manager_state")
    holder = _holder(path, 2.5)
    child = os.fork()
    if child == 0:
        try:
            with StateStore(path, lock_timeout=1.0, hard_timeout=hard).locked():
                os._exit(0)
        except StoreError as exc:
            os._exit(3 if "timed out after 1s waiting for the lock" in str(exc) else 4)
    assert os.WEXITSTATUS(os.waitpid(child, 0)[1]) == outcome
    assert os.WEXITSTATUS(os.waitpid(holder, 0)[1]) == 0


def test_a_holder_with_no_sign_of_life_is_given_up_on(tmp_path):
    """A lock held by something that never touches the file (a stuck holder, another program): the waiter's timeout."""
    path = str(tmp_path / "cpu_manager_state")
    with StateStore(path).locked():  # the lock file made
        pass
    fd = os.open(path + ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(StoreError, match="timed out after 0s waiting for the lock on %s \\(another kubecpu process "
                           "holds it with no sign of life\\)" % re.escape(path)):
            with StateStore(path, lock_timeout=0.2).locked():
                pass
    finally:
        os.close(fd)


def test_taking_the_lock_touches_the_lock_file(tmp_path):
    path = str(tmp_path / "cpu_manager_state")
    with StateStore(path).locked():
        pass
    os.utime(path + ".lock", (0, 0))
    with StateStore(path).locked():
        assert os.stat(path + ".lock").st_mtime_ns > 0  # what a waiter watches


def test_the_lock_is_reentrant_within_a_holder(tmp_path):
    """The OCI hook allocates (which locks) under the lock it took to decide: a nested locked() does not wait for
    itself, and the lock is released only when the outermost block ends."""
    path = str(tmp_path / "cpu_manager_state")
    store = StateStore(path, lock_timeout=0.2)
    with store.locked():
        with store.locked():
            assert store.save(CPUState("static", CPUSet.parse("0-3")))
        child = os.fork()
        if child == 0:  # still held after the inner block: another process times out
            try:
                with StateStore(path, lock_timeout=0.2).locked():
                    os._exit(4)
            except StoreError:
                os._exit(3)
        assert os.WEXITSTATUS(os.waitpid(child, 0)[1]) == 3
    with StateStore(path, lock_timeout=0.2).locked():  # and free after the outer one
        pass


def test_the_first_save_of_a_process_sweeps_what_killed_writers_left(tmp_path):
    """A hook or agent killed between writing a temporary file and renaming it leaves it; the next writer's first save
    removes those of this state's files older than a minute (a write in progress is younger), not later ones."""
    path = str(tmp_path / "state")
    stale = time.time() - 120
    for name in (".state.tmp-0123456789ab", ".state.hookview.tmp-0123456789ab", "state.prev-tmp-77"):
        (tmp_path / name).write_bytes(b"left")
        os.utime(tmp_path / name, (stale, stale))
    (tmp_path / ".state.irq.json.tmp-ba9876543210").write_bytes(b"in progress")
    store = StateStore(path)
    with store.locked():
        store.save(CPUState("static", CPUSet.parse("0-3")))
    assert sorted(n for n in os.listdir(tmp_path) if "tmp-" in n) == [".state.irq.json.tmp-ba9876543210"]


@pytest.mark.parametrize("data, want", [
    (None, "absent"),
    (b"", "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    (b"{}", "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"),
])
def test_a_fingerprint_names_the_bytes_or_their_absence(data, want):
    assert fingerprint(data) == want


def test_expect_gives_the_bytes_while_they_are_the_ones_planned_from(tmp_path):
    store = StateStore(str(tmp_path / "state"), "none")
    assert store.expect(None) is None and store.expect("absent") is None
    store.save(CPUState("none"))
    data = (tmp_path / "state").read_bytes()
    assert store.expect(fingerprint(data)) == data and store.expect(None) == data
    with pytest.raises(StaleCheckpointError, match=r"state changed since the plan was made \(planned from absent, now "
                                                   r"sha256:"):
        store.expect("absent")


def test_a_failed_hold_removes_the_lock_file_it_made_and_keeps_one_it_found(tmp_path):
    """Issue 64: a failed reconcile left its lock file. A hold that created the lock file and ends in an error removes
    it; a lock file that was there stays (another holder may be waiting on it), as does one a successful hold made."""
    path = str(tmp_path / "cpu_manager_state")
    with pytest.raises(RuntimeError):
        with StateStore(path).locked():
            assert os.path.exists(path + ".lock")
            raise RuntimeError("the runtime is down")
    assert os.listdir(str(tmp_path)) == []
    with StateStore(path).locked():
        pass
    with pytest.raises(RuntimeError):
        with StateStore(path).locked():
            raise RuntimeError("the runtime is down")
    assert os.listdir(str(tmp_path)) == ["cpu_manager_state.lock"]


def test_a_waiter_on_a_removed_lock_file_takes_the_one_there_now(tmp_path):
    """The waiter opened the lock file before its holder failed and removed it: it gets the lock of a file no longer
    at the path, sees so, and takes the one there now; a third process then cannot take the lock while it holds it
    (without the check both would hold a lock at once)."""
    path = str(tmp_path / "cpu_manager_state")
    go_read, go_write = os.pipe()
    held_read, held_write = os.pipe()
    child = os.fork()
    if child == 0:  # forked before the lock is taken: it holds none of the parent's descriptors' locks
        try:
            os.read(go_read, 1)
            with StateStore(path, lock_timeout=10.0).locked():
                os.write(held_write, b"x")
                time.sleep(1.5)
            os._exit(0)
        except BaseException:  # pylint: disable=broad-except
            os._exit(5)
    os.close(held_write)
    with pytest.raises(RuntimeError):
        with StateStore(path).locked():
            os.write(go_write, b"x")
            time.sleep(0.5)  # the child has opened the lock file and waits on it
            raise RuntimeError("this hold fails")
    assert os.read(held_read, 1) == b"x"  # the child holds the lock
    with pytest.raises(StoreError, match="timed out"):
        with StateStore(path, lock_timeout=0.3, hard_timeout=True).locked():
            pass
    assert os.WEXITSTATUS(os.waitpid(child, 0)[1]) == 0
    with StateStore(path, lock_timeout=1.0).locked():
        pass


def test_the_checkpoint_the_configuration_names_as_the_kubelets_is_read_only_until_the_kubelet_is_stopped(tmp_path):
    """Issue 63's review: a kubelet with --root-dir keeps its checkpoint elsewhere; named as the kubelet's
    (``kubelet_path``: --kubelet-state, kubelet_state_path), that file is only ever read unless the caller stopped the
    kubelet, as /var/lib/kubelet/cpu_manager_state always was."""
    path = str(tmp_path / "kubelet" / "cpu_manager_state")
    assert StateStore(path, kubelet_path=path).read_only
    assert not StateStore(path, kubelet_path=path, kubelet_stopped=True).read_only
    assert not StateStore(path).read_only  # not named as the kubelet's: kubecpu's own
