"""The OCI hook as the runtime runs it (services/hook.py): a container is created on the CPUs the static policy gives
it, or not at all. On a fake node (sysfs: 1 socket x 4 cores x 2 threads; cgroupfs v1 or v2 with the kubelet's
kubepods tree) and a state file, fed the OCI state and config.json containerd writes:

* a container that needs nothing new is checked without the lock and without a write;
* a Guaranteed integral container without an entry is allocated (whole cores), written into its cgroup, and the
  container cgroups overlapping its CPUs are moved to the shared pool left; every cgroup it wrote is marked;
* a container it cannot place is refused with one line naming it and the cause, and nothing changes: no free CPUs,
  a corrupt state (kept byte for byte), the lock not had in time, a cgroup it cannot write;
* killed at any point, the state is one complete generation.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import StoreError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import ManagerOptions
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.factory import build_manager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.hook_marks import CREATE_GRACE, CreatingMarks
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.hook_view import view_path
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroups import CgroupFS
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.services.hook import Hook, HookRefusal

from ansible_collections.kubecpu.cpu_manager.tests.unit.support import fake_sysfs
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.hook_node import ALL, ROOT, Node
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.cli_run import run as cli_run
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.proc_irq import affinity, proc_irq


@pytest.fixture(params=["v1", "v2"])
def node(request, tmp_path):
    return Node(tmp_path, request.param == "v2")


def written_when(path):
    return os.stat(path).st_mtime_ns, os.stat(path).st_ino


def test_a_guaranteed_container_gets_whole_cores_and_the_shared_ones_move_off_them(node):
    web = node.container("Burstable", 500)  # running already, on every CPU
    app = node.container("Guaranteed", 2000)
    result = node.run(app)
    held = node.saved().get(app["uid"], "app")
    assert result.action == "allocated" and CPUSet.parse(result.cpus) == held and len(held) == 2
    assert node.cpus(app) == held  # its cgroup, before its first instruction
    assert node.saved().default == ALL - held
    assert node.cpus(web) == ALL - held and result.moved == 1  # the shared container moved off them
    assert node.marks() == {app["id"], web["id"]}  # the runtime's record follows on the next pass
    assert "lab/pod-2/app (%s)" % app["id"][:12] == result.container


def test_a_v2_container_cgroup_never_written_is_moved_off_too(tmp_path):
    """cgroup v2: a container whose spec had no cpuset (the kubelet's none policy) has an empty ``cpuset.cpus`` and
    runs on its parent's CPUs, every one: it is moved like the others."""
    node = Node(tmp_path, v2=True)
    web = node.container("Burstable", 500)
    (node.directory(web["path"]) / "cpuset.cpus").write_text("\n")
    held = CPUSet.parse(node.run(node.container("Guaranteed", 2000)).cpus)
    assert node.cpus(web) == ALL - held


def test_whole_cores_are_the_two_siblings(node):
    app = node.container("Guaranteed", 2000)
    held = CPUSet.parse(node.run(app).cpus)
    siblings = fake_sysfs.machine(1, 4, 2)
    assert len({cpu.core for cpu in siblings if cpu.cpu in held}) == 1  # one core, both its threads


@pytest.mark.parametrize("qos, millicpu", [("Burstable", 500), ("BestEffort", 0), ("Guaranteed", 1500)])
def test_a_container_without_exclusive_cpus_is_put_in_the_shared_pool(node, qos, millicpu):
    pinned = node.container("Guaranteed", 2000)
    held = CPUSet.parse(node.run(pinned).cpus)
    other = node.container(qos, millicpu)  # its cgroup made on every CPU, as runc makes it
    result = node.run(other)
    assert result.action == "set" and node.cpus(other) == ALL - held
    assert other["id"] in node.marks()
    again = node.run(other)  # now right: checked, nothing written
    assert again.action == "checked" and CPUSet.parse(again.cpus) == ALL - held


def test_a_container_that_is_already_right_is_checked_without_the_lock_or_a_write(node):
    app = node.container("Guaranteed", 2000)
    node.run(app)
    before = written_when(node.state)
    hook = node.hook()
    with StateStore(node.state).locked():  # another process holds the lock: the check does not wait for it
        result = hook.run(io.BytesIO(app["stdin"]))
    assert result.action == "checked" and written_when(node.state) == before


def test_a_restarted_container_gets_the_cpus_its_entry_holds(node):
    first = node.container("Guaranteed", 2000)
    held = CPUSet.parse(node.run(first).cpus)
    node.write_cpus(first["path"], ALL)  # the runtime made its cgroup again, on every CPU
    result = node.run(first)
    assert result.action == "set" and node.cpus(first) == held and node.saved().get(first["uid"], "app") == held


def test_what_is_not_a_kubernetes_container_passes_untouched(node):
    plain = node.container("Guaranteed", 2000, annotations=False)
    assert node.run(plain).action == "passed"
    assert node.cpus(plain) == ALL and not os.path.exists(node.state)


def test_under_the_none_policy_everything_passes(node):
    app = node.container("Guaranteed", 2000)
    assert node.run(app, policy="none").action == "passed" and node.cpus(app) == ALL


def test_no_state_and_no_exclusive_request_passes_without_making_a_state(node):
    web = node.container("Burstable", 500)
    assert node.run(web).action == "passed" and not os.path.exists(node.state)


def test_no_free_cpus_refuses_the_container_and_changes_nothing(node):
    for _pod in range(3):  # 3 x 2 CPUs of the 7 not reserved
        node.run(node.container("Guaranteed", 2000))
    before = open(node.state, "rb").read()
    late = node.container("Guaranteed", 2000)
    with pytest.raises(HookRefusal) as refused:
        node.run(late)
    message = str(refused.value)
    assert message.startswith("container lab/pod-4/app (%s) not created: no exclusive CPUs" % late["id"][:12])
    assert "\n" not in message and open(node.state, "rb").read() == before and node.cpus(late) == ALL


def test_a_corrupt_state_is_refused_named_and_kept(node):
    app = node.container("Guaranteed", 2000)
    with open(node.state, "w", encoding="utf-8") as handle:
        handle.write('{"policyName": "static", "defaultCpuSet": "0-7", "checksum": 1')
    before = open(node.state, "rb").read()
    with pytest.raises(HookRefusal, match="not created: .*%s" % node.state):
        node.run(app)
    assert open(node.state, "rb").read() == before and node.cpus(app) == ALL


def test_a_lock_not_had_in_time_refuses_the_container(node):
    node.run(node.container("Guaranteed", 2000))
    app = node.container("Guaranteed", 2000)
    started = time.monotonic()
    with StateStore(node.state).locked(), pytest.raises(HookRefusal, match="waiting for the lock"):
        node.run(app)
    assert time.monotonic() - started < 5 and node.cpus(app) == ALL
    assert node.hook().store.hard_timeout  # within the runtime's hook timeout even while the lock changes hands


def test_a_cgroup_it_cannot_write_refuses_the_container(node):
    app = node.container("Guaranteed", 2000)
    target = node.directory(app["path"]) / "cpuset.cpus"
    target.unlink()
    target.mkdir()  # not a file: the write fails as a vanished or read-only cgroup does
    with pytest.raises(HookRefusal, match=r"cannot write .*cpuset\.cpus"):
        node.run(app)
    assert not os.path.exists(node.state)  # its entry was never committed: the retry allocates again


# --- the bad day (issue 34): an entry saved before the others moved, nested and non-root trees, a kubelet that pins


def committed(node, made, cpus):
    """An entry saved while the others still run on its CPUs: the NRI plugin saved it and its reply was dropped (the
    runtime's timeout), or an earlier writer was killed before it moved them."""
    state = CPUState("static", ALL - CPUSet.parse(cpus))
    state.set(made["uid"], "app", CPUSet.parse(cpus))
    with StateStore(node.state).locked():
        StateStore(node.state).save(state)


@pytest.mark.parametrize("own", ["on its entry already", "on every CPU"])
def test_an_entry_found_moves_every_other_container_off_its_cpus(node, own):
    """The "checked" and "set" paths: the retry of a container whose entry was committed moves the shared container
    that still holds its CPUs, and says so."""
    web = node.container("Burstable", 500)  # running, on every CPU
    app = node.container("Guaranteed", 2000, cpus=CPUSet.parse("1,5") if own.startswith("on its") else ALL)
    committed(node, app, "1,5")
    assert node.overlaps()
    result = node.run(app)
    assert (result.action, result.cpus, result.moved) == ("checked" if own.startswith("on its") else "set", "1,5", 1)
    assert node.cpus(web) == ALL - CPUSet.parse("1,5") and node.cpus(app) == CPUSet.parse("1,5")
    assert not node.overlaps() and web["id"] in node.marks()
    again = node.run(app)  # nothing left to move: checked, no write
    assert (again.action, again.moved) == ("checked", 0)


class Killed(BaseException):
    """SIGKILL in the middle of a write (runc's hook timeout): nothing after it runs."""


@pytest.mark.parametrize("fail_at", range(4))
@pytest.mark.parametrize("how", [Killed, OSError])
def test_killed_or_failing_at_any_cgroup_write_leaves_no_cpu_to_two_containers(node, monkeypatch, fail_at, how):
    """An allocation writes the container's cgroup, then each overlapping container's, and only then saves the
    entry. Stopped at any of those writes (killed, or the kernel refusing one), nothing is committed; the runtime's
    retry allocates again, and no CPU of an entry is left to another container."""
    others = [node.container("Burstable", 500), node.container("BestEffort", 0), node.container("Burstable", 250)]
    app = node.container("Guaranteed", 2000)
    real_write, writes = CgroupFS._write, []

    def write(directory, target, value):
        if target == "cpuset.cpus" and len(writes) == fail_at:
            writes.append(directory)
            raise how("stopped at write %d" % fail_at) if how is Killed else StoreError("cannot write: EBUSY")
        writes.append(directory)
        real_write(directory, target, value)

    monkeypatch.setattr(CgroupFS, "_write", staticmethod(write))
    with pytest.raises((Killed, HookRefusal)):
        node.run(app)
    assert not os.path.exists(node.state) or node.saved().get(app["uid"], "app") is None  # nothing committed
    monkeypatch.setattr(CgroupFS, "_write", staticmethod(real_write))
    result = node.run(app)  # the kubelet's retry
    assert result.action == "allocated" and not node.overlaps()
    assert all(node.cpus(other).isdisjoint(CPUSet.parse(result.cpus)) for other in others)


def test_a_shared_container_with_cgroups_of_its_own_moves_with_them(node):
    """systemd or Docker inside a container: its cgroup has children. The container's cgroup moves (v1: its children
    first, whose cpusets must stay within it)."""
    web = node.container("Burstable", 500)
    for child in ("init.scope", "system.slice/docker.service"):
        node.write_cpus(web["path"] + "/" + child, ALL)
    result = node.run(node.container("Guaranteed", 2000))
    held = CPUSet.parse(result.cpus)
    assert result.moved == 1 and node.cpus(web) == ALL - held
    deep = node.cpus_at(web["path"] + "/system.slice/docker.service")
    assert deep == (ALL if node.v2 else ALL - held)  # v2: the kernel narrows its effective set by itself


@pytest.mark.parametrize("root, driver, prefix", [
    ("kubelet/kubepods", "cgroupfs", ""),  # cgroupRoot: /kubelet
    ("kubepods", "systemd", "cri-containerd"),
    ("kubepods", "systemd", "crio"),  # CRI-O's crio-<id>.scope
    ("kubelet-kubepods", "systemd", "crio"),  # cgroupRoot: /kubelet.slice
])
def test_the_mover_finds_containers_below_any_cgroup_root_and_driver(node, root, driver, prefix):
    web = node.container("Burstable", 500, root=root, driver=driver, prefix=prefix)
    idle = node.container("BestEffort", 0, root=root, driver=driver, prefix=prefix)
    app = node.container("Guaranteed", 2000, root=root, driver=driver, prefix=prefix)
    result = node.run(app)
    held = CPUSet.parse(result.cpus)
    assert result.action == "allocated" and result.moved == 2 and node.cpus(app) == held
    assert node.cpus(web) == ALL - held and node.cpus(idle) == ALL - held and not node.overlaps()
    assert node.marks() == {app["id"], web["id"], idle["id"]}


@pytest.mark.parametrize("qos, millicpu", [("Burstable", 500), ("Guaranteed", 2000), ("Guaranteed", 1000)])
def test_when_the_kubelet_pins_cpus_kubecpu_steps_aside_on_every_path(node, qos, millicpu):
    """A kubelet switched to the static policy while the hook stays installed: every container passes untouched (the
    kubelet gave it its cpuset), none is refused, nothing is written; the answer says why."""
    node.run(node.container("Guaranteed", 2000))  # kubecpu placed one before the switch: its state has a pool
    before = open(node.state, "rb").read()
    node.kubelet_pins("2,6")
    made = node.container(qos, millicpu, cpus=CPUSet.parse("2,6") if qos == "Guaranteed" else ALL - CPUSet.parse("2,6"))
    had = node.cpus(made)
    result = node.run(made)
    assert (result.action, result.cpus, result.moved) == ("passed", "", 0)
    assert "kubelet pins CPUs on this node itself" in result.note and node.kubelet_state in result.note
    assert node.cpus(made) == had and open(node.state, "rb").read() == before
    forced = node.run(made, force=True)  # the operator's override: kubecpu decides again
    assert forced.action in ("allocated", "set") and not forced.note


def test_an_agent_pass_while_the_runtime_is_still_creating_keeps_what_the_hook_allocated(tmp_path):
    """CRI-O lists a container only once its CreateContainer is over, and the hook runs inside it: a pass of the agent
    in between sees an entry without a container. It keeps the entry (the hook marked it) until the runtime lists
    the container, then drops the mark; a mark past its grace (a creation that failed for good) no longer keeps it."""
    node = Node(tmp_path, False)
    app = node.container("Guaranteed", 2000)
    held = CPUSet.parse(node.run(app).cpus)
    runtime = FakeRuntime(str(node.cgroup))
    manager = build_manager(node.config(), with_runtime=True, runtime=runtime)
    plan = manager.reconcile()
    assert node.saved().get(app["uid"], "app") == held and not [a for a in plan.actions if a.action == "release"]
    assert CreatingMarks(node.state).fresh() == {(app["uid"], "app"): app["path"]}
    runtime.add(app["uid"], "app", "Guaranteed", 2000)  # created: the runtime lists it
    manager.reconcile()
    assert CreatingMarks(node.state).fresh() == {} and node.saved().get(app["uid"], "app") == held
    for end in ("removed", "stuck"):  # runc removed its cgroup (failed, or removed before any pass); grace over
        failed = node.container("Guaranteed", 1000)
        node.run(failed)
        if end == "removed":
            shutil.rmtree(node.directory(failed["path"]))
        else:
            old = time.time() - CREATE_GRACE - 1
            os.utime(os.path.join(node.state + ".creating", "%s.app" % failed["uid"]), (old, old))
        released = [a for a in manager.reconcile().actions if a.action == "release"]
        assert [(a.pod_uid, a.reason) for a in released] == [(failed["uid"], "pod is gone")]
        assert node.saved().get(failed["uid"], "app") is None and node.saved().get(app["uid"], "app") == held


def hook_argv(node):
    """``bin/kubecpu hook`` as the runtime's spec runs it on this node."""
    return ["hook", "--state", node.state, "--sysfs-root", node.sysfs, "--cgroup-root", str(node.cgroup),
            "--reserved-cpus", "0", "--kubelet-state", node.kubelet_state]


def test_the_cli_exits_1_with_one_line_and_0_with_what_it_did(node):
    app = node.container("Guaranteed", 2000)
    argv = hook_argv(node)
    code, out, _err = cli_run(argv, stdin=app["stdin"].decode())
    assert code == 0 and json.loads(out)["action"] == "allocated"
    code, out, err = cli_run(argv, stdin="{")
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1 and "not JSON" in err


def unwritable_view(node):
    """The view's path is a directory: its rename fails as on a full disk or a read-only /var/lib."""
    if os.path.isfile(view_path(node.state)):
        os.unlink(view_path(node.state))
    os.makedirs(view_path(node.state))


@pytest.mark.parametrize("step", ["allocated", "set", "checked"])
def test_a_view_it_cannot_write_costs_speed_and_a_line_never_a_refusal(node, step):
    """The view is a cache for the quick path: allocated, set or checked, the container is placed and created, the
    answer says why the view is missing, and no temporary file is left beside it."""
    pinned = node.container("Guaranteed", 2000)
    if step != "allocated":
        node.run(pinned)
    odd = node.container("Guaranteed", 1500)  # on the shared pool: no exclusive CPUs for 1.5 CPUs
    if step == "checked":
        node.run(odd)
    unwritable_view(node)
    made = {"allocated": pinned, "set": odd, "checked": odd}[step]
    result = node.run(made)
    assert result.action == step and "cannot write %s" % view_path(node.state) in result.view_error
    assert result.to_dict()["view_error"] == result.view_error
    held = node.saved().get(made["uid"], "app") if step == "allocated" else node.saved().default
    assert node.cpus(made) == held
    assert [name for name in os.listdir(os.path.dirname(node.state)) if ".tmp-" in name] == []


def test_the_cli_warns_of_a_view_it_cannot_write_and_creates_the_container(node):
    app = node.container("Guaranteed", 2000)
    unwritable_view(node)
    argv = hook_argv(node)
    code, out, err = cli_run(argv, stdin=app["stdin"].decode())
    assert code == 0 and json.loads(out)["action"] == "allocated"
    assert err.startswith("kubecpu hook: warning: cannot write %s" % view_path(node.state))


def test_a_written_view_leaves_no_view_error_in_the_answer(node):
    result = node.run(node.container("Guaranteed", 2000))
    assert result.view_error == "" and "view_error" not in result.to_dict()


def test_a_pod_with_kubernetes_largest_annotations_is_placed(node):
    """256 KiB of annotations (Kubernetes' limit) in the state and in config.json: read whole, the container placed
    through the CLI's quick path and the full hook."""
    app = node.container("Guaranteed", 2000)
    state = json.loads(app["stdin"])
    state["annotations"].update({"example.com/blob-%d" % n: "x" * (64 * 1024 - 32) for n in range(4)})
    argv = hook_argv(node)
    code, out, err = cli_run(argv, stdin=json.dumps(state))
    assert code == 0 and json.loads(out)["action"] == "allocated", err
    assert node.cpus(app) == node.saved().get(app["uid"], "app")


def test_killed_at_any_moment_the_state_is_one_complete_generation(node):
    """``bin/kubecpu hook`` killed with SIGKILL at random moments of its run (the first run, not killed, says how long
    one takes): the state file is the one before or the one after, valid each time; an entry it holds is off the
    shared pool. The runtime's retry then places the container, and no CPU of an entry is left to another
    container (a shared one runs on every CPU at the start)."""
    rng = random.Random(7)
    argv = [sys.executable, os.path.join(ROOT, "bin", "kubecpu")] + hook_argv(node)
    env = dict(os.environ, KUBECPU_PYTHON=sys.executable)
    node.container("Burstable", 500)
    took, outcomes = None, []
    for _pod in range(7):  # 7 x 1 CPU of the 7 not reserved
        app = node.container("Guaranteed", 1000)
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env=env)
        started = time.monotonic()
        timer = threading.Timer(rng.uniform(0.0, took * 1.2) if took else 3600,
                                lambda p=proc: p.poll() is None and p.send_signal(signal.SIGKILL))
        timer.start()
        _out, err = proc.communicate(app["stdin"], timeout=60)
        timer.cancel()
        assert proc.returncode in (0, -signal.SIGKILL), err.decode()
        took = took or time.monotonic() - started
        saved = node.saved()  # validated as the kubelet would: checksum, every CPU accounted for
        held = saved.get(app["uid"], "app")
        assert held is None or held.isdisjoint(saved.default)
        outcomes.append((proc.returncode, held is not None))
        if proc.returncode:
            code, _out, err = cli_run(hook_argv(node), stdin=app["stdin"].decode())  # the kubelet's retry
            assert code == 0, err
        assert not node.overlaps()
    assert outcomes[0] == (0, True) and all(done for code, done in outcomes if code == 0), outcomes


def test_with_irq_isolation_the_hook_moves_interrupts_off_what_it_allocates(tmp_path):
    node = Node(tmp_path, True)
    irq = proc_irq(os.path.join(node.sysfs, "proc", "irq"), {24: "0-7", 25: "0-3"})
    app = node.container("Guaranteed", 2000)
    result = node.run(app, options=ManagerOptions(irq_isolation="exclusive"))
    held = CPUSet.parse(result.cpus)
    assert result.action == "allocated" and len(held) == 2
    assert CPUSet.parse(affinity(irq, 24)) == ALL.difference(held)
    assert CPUSet.parse(affinity(irq, 25)) == CPUSet.parse("0-3").difference(held)
    assert os.path.exists(node.state + ".irq.json")  # what they had, for when the CPUs are released


# --- issue 62, finding 1: a pod holds what the kubelet charges it ------------------------------------------------
def shown(node, runtime, made, state="CONTAINER_RUNNING"):
    """The runtime lists a container the hook placed (``made``), in ``state``."""
    runtime.add(made["uid"], made["name"], made["qos"], made["milli"], state=state, cid=made["id"],
                cgroup_path=made["path"])


def test_init_containers_do_not_hoard_exclusive_cpus_in_hook_mode(tmp_path):
    """The review's reproduction: 8 CPUs, CPU 0 reserved; a pod of init 3 + init 3 + app 1 is charged 3 CPUs. Each
    container after the first is allocated in its pod as the runtime shows it, so the second init container and the
    app container reuse the first's CPUs, as the kubelet's static policy does: the pod holds 3 CPUs, not 7, and another
    tenant's 1-CPU Guaranteed pod is placed, not refused."""
    node = Node(tmp_path, False)
    runtime = FakeRuntime(str(node.cgroup))

    def run(made):
        return Hook(node.config(), lock_timeout=0.3, runtime=lambda: runtime).run(io.BytesIO(made["stdin"]))

    first = node.container("Guaranteed", 3000, name="init-1")
    uid = first["uid"]
    assert run(first).action == "allocated"
    shown(node, runtime, first)
    runtime.exit(first["id"])
    for name, milli in (("init-2", 3000), ("app", 1000)):
        made = node.container("Guaranteed", milli, uid=uid, name=name)
        assert run(made).action == "allocated"
        shown(node, runtime, made)
        if name != "app":
            runtime.exit(made["id"])
    held = CPUSet().union(*(cpus for pod, _name, cpus in node.saved().assignments() if pod == uid))
    assert len(held) == 3, held
    other = node.container("Guaranteed", 1000)
    assert run(other).action == "allocated"  # another tenant still fits
    assert len(node.saved().default) >= 3  # the shared pool keeps more than the reserved CPU


def test_a_pod_the_runtime_cannot_show_is_refused_rather_than_hoarding(tmp_path):
    """The pod holds CPUs already and the runtime does not answer: its init containers cannot be told apart, so the
    container is refused (the kubelet retries) and nothing changes; the first container of a pod needs no runtime."""
    node = Node(tmp_path, False)
    runtime = FakeRuntime(str(node.cgroup))
    hook = Hook(node.config(), lock_timeout=0.3, runtime=lambda: runtime)
    first = node.container("Guaranteed", 2000, name="init")
    runtime.down = True
    assert hook.run(io.BytesIO(first["stdin"])).action == "allocated"  # alone in its pod: no runtime call
    before = open(node.state, "rb").read()
    second = node.container("Guaranteed", 2000, uid=first["uid"], name="app")
    with pytest.raises(HookRefusal, match="runtime could not show the pod"):
        hook.run(io.BytesIO(second["stdin"]))
    assert open(node.state, "rb").read() == before
