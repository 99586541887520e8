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
import signal
import subprocess
import sys
import threading
import time

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import ManagerOptions
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.hook_view import view_path
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.services.hook import HookRefusal

from ansible_collections.kubecpu.cpu_manager.tests.unit.support import fake_sysfs
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.hook_node import ALL, ROOT, Node
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.cli_run import run as cli_run
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


def test_a_cgroup_it_cannot_write_refuses_the_container(node):
    app = node.container("Guaranteed", 2000)
    target = node.directory(app["path"]) / "cpuset.cpus"
    target.unlink()
    target.mkdir()  # not a file: the write fails as a vanished or read-only cgroup does
    with pytest.raises(HookRefusal, match=r"cannot write .*cpuset\.cpus"):
        node.run(app)


def hook_argv(node):
    """``bin/kubecpu hook`` as the runtime's spec runs it on this node."""
    return ["hook", "--state", node.state, "--sysfs-root", node.sysfs, "--cgroup-root", str(node.cgroup),
            "--reserved-cpus", "0", "--kubelet-state", str(node.tmp / "no-kubelet-state")]


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
    shared pool."""
    rng = random.Random(7)
    argv = [sys.executable, os.path.join(ROOT, "bin", "kubecpu"), "hook", "--state", node.state, "--sysfs-root",
            node.sysfs, "--cgroup-root", str(node.cgroup), "--reserved-cpus", "0", "--kubelet-state",
            str(node.tmp / "no-kubelet-state")]
    env = dict(os.environ, KUBECPU_PYTHON=sys.executable)
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
