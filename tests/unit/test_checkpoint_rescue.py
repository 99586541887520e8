"""cpu_manager_checkpoint as the kubelet role's no-drain change runs it, and the role's rescue after it: the role's
own tasks (roles/kubelet_cpu_manager/tasks/rewrite.yml) run in-process by ansible-core's templar (support.role_tasks),
the module in-process, a runtime in memory that fails where a test says, systemd a stand-in. (Here, not beside the
modules' tests: ansible-test runs those without the controller's packages, which the role's tasks need.)

The node: 4 single-thread CPUs. The kubelet ran with reserved CPU 0: pod-a's app (Guaranteed, 2 CPUs) on 1-2, pod-b's
web (Burstable) on the shared 0,3. The change reserves CPU 1: the rewritten checkpoint moves app to 0,2 and shares
1,3. The previous configuration (reserved 0) refuses the rewritten file ("not all reserved cpus"), so a rollback
that does not put the previous file back leaves a kubelet that does not start (issue 63, item 4).
"""

from __future__ import annotations

import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils import errors
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint_formats import write
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.kubelet_versions import (
    POD_LEVEL, KubeletVersion)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node import factory
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import NodeConfig
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import fingerprint
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.checkpoint_file import CheckpointFile
from ansible_collections.kubecpu.cpu_manager.plugins.modules import cpu_manager_checkpoint

from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_sysfs import build, machine
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.role_tasks import (
    Runner, Systemd, TaskFailed, load_tasks, run_module)

ROLE_TASKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles",
                          "kubelet_cpu_manager", "tasks")
WRITE_TASK = "Write the rewritten checkpoint and push the moved containers' cpusets"
V137 = KubeletVersion(37)
V136_POD_LEVEL = KubeletVersion(36, ((POD_LEVEL, True),))
BEFORE = {"pod-a": {"app": "1-2"}}  # reserved 0
AFTER = {"pod-a": {"app": "0,2"}}  # reserved 1


def state(default, entries):
    built = CPUState("static", CPUSet.parse(default))
    for pod, containers in entries.items():
        for name, cpus in containers.items():
            built.set(pod, name, CPUSet.parse(cpus))
    return built


class Faulty(FakeRuntime):
    """The runtime in memory, failing with ``fault`` at its list call once ``lists_left`` lists went through (the write
    gate lists the running pods for its judge before the write) or at an update once ``updates_left`` updates went
    through; ``fault = None``: it works again."""

    def __init__(self, root):
        super().__init__(root, "0-3", "0")
        self.fault = None
        self.fault_at = "list"
        self.updates_left = 0
        self.lists_left = 0

    def list_containers(self):
        if self.fault is not None and self.fault_at == "list":
            if self.lists_left == 0:
                raise self.fault
            self.lists_left -= 1
        return super().list_containers()

    def update(self, container_id, *args, **kwargs):
        if self.fault is not None and self.fault_at == "update":
            if self.updates_left == 0:
                raise self.fault
            self.updates_left -= 1
        super().update(container_id, *args, **kwargs)


class Node:
    """The node as the role finds it after it stopped the kubelet and planned again: the previous checkpoint (in
    ``old_format``'s bytes), the containers where it puts them, the kubelet configuration on disk."""

    def __init__(self, tmp_path, monkeypatch, kubelet=V137, old_format=None):
        self.tmp = tmp_path
        self.kubelet = kubelet
        self.sysfs = build(str(tmp_path / "sysroot"), machine(1, 4, 1))
        self.runtime = Faulty(str(tmp_path / "cgroup"))
        monkeypatch.setattr(factory, "build_runtime", lambda config: self.runtime)
        self.app = self.runtime.add("pod-a", "app", "Guaranteed", 2000)
        self.web = self.runtime.add("pod-b", "web", "Burstable", 500)
        self.place(BEFORE, "0,3")
        self.path = str(tmp_path / "cpu_manager_state")
        self.old = write(state("0,3", BEFORE), old_format or kubelet)
        with open(self.path, "wb") as handle:
            handle.write(self.old)
        self.new = write(state("1,3", AFTER), kubelet).decode()
        self.config = str(tmp_path / "config.yaml")
        self.old_config = b"cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
        with open(self.config, "wb") as handle:
            handle.write(self.old_config)

    def place(self, entries, shared):
        self.runtime.write("cpuset", self.runtime.infos[self.app].cgroup_path, "cpuset.cpus", entries["pod-a"]["app"])
        self.runtime.write("cpuset", self.runtime.infos[self.web].cgroup_path, "cpuset.cpus", shared)

    def cpus(self):
        return self.runtime.read(self.app), self.runtime.read(self.web)

    def bytes(self):
        with open(self.path, "rb") as handle:
            return handle.read()

    def variables(self):
        gates = dict(self.kubelet.gates)
        return {
            "kubelet_cpu_manager_service": "kubelet", "kubelet_cpu_manager_state_path": self.path,
            "kubelet_cpu_manager_config_path": self.config, "kubelet_cpu_manager_policy": "static",
            "kubelet_cpu_manager_runtime": "crictl", "kubelet_cpu_manager_runtime_endpoint": "",
            "kubelet_cpu_manager_runtime_timeout": 10, "kubelet_cpu_manager_crictl_path": "/usr/bin/crictl",
            "kubelet_cpu_manager_cgroup_root": str(self.tmp / "cgroup"), "kubelet_cpu_manager_sysfs_root": self.sysfs,
            "kubelet_cpu_manager_plan": {
                "migration": {"required": True, "reason": "reserved CPU 1 is pod-a/app's"},
                "rewritten_state": self.new, "planned_from": fingerprint(self.old), "reserved_cpus": "1",
                "config": {"cpuManagerPolicy": "static", "reservedSystemCPUs": "1"},
                "checkpoint": {"kubelet": self.kubelet.name, "feature_gates": gates},
                "current": {"policy": "static", "reserved_cpus": "0", "policy_options": {}}},
            "kubelet_cpu_manager_rewritten": {}, "__kubelet_cpu_manager_written": {},
        }

    def valid_under(self, reserved):
        config = NodeConfig.from_mapping({"state_path": self.path, "policy": "static", "reserved_cpus": reserved,
                                          "sysfs_root": self.sysfs, "kubelet_version": self.kubelet.name,
                                          "feature_gates": dict(self.kubelet.gates)})
        return CheckpointFile(config, kubelet_stopped=True).validate()


def block_and_rescue():
    (change,) = load_tasks(os.path.join(ROLE_TASKS, "rewrite.yml"))
    (write_task,) = [task for task in change["block"] if task.get("name") == WRITE_TASK]
    return write_task, change["rescue"]


def rolled_back(node, runner, failure):
    """The role's rescue after ``failure`` (what ``ansible_failed_result`` holds); its final message."""
    _write, rescue = block_and_rescue()
    runner.variables["ansible_failed_result"] = failure
    with pytest.raises(TaskFailed) as failed:
        runner.run(rescue)
    assert failed.value.name == "Fail this node, saying what was put back"
    return failed.value.result["msg"]


def the_write(node, runner):
    """The block's write and push task; its registered result (``failed`` when the module failed)."""
    write_task, _rescue = block_and_rescue()
    try:
        runner.run_one(write_task)
    except TaskFailed as failed:
        return failed.result
    return runner.variables["kubelet_cpu_manager_rewritten"]


def runtime_errors():
    """Every ContainerRuntimeError subclass errors.py defines, the base included."""
    found, todo = [], [errors.ContainerRuntimeError]
    while todo:
        kind = todo.pop()
        found.append(kind)
        todo.extend(kind.__subclasses__())
    return sorted(found, key=lambda kind: kind.__name__)


UNREACHABLE = (errors.RuntimeUnavailableError, errors.RuntimeTimeoutError)  # reported, not an error: the module ends
FAULTS = [pytest.param(kind("crictl ps: the runtime said no", "list"), id=kind.__name__) for kind in runtime_errors()] + [
    pytest.param(errors.StoreError("cannot write /run/kubecpu/containers.json: No space left on device"),
                 id="StoreError"),
    pytest.param(errors.KubecpuError("an error the push was never meant to raise"), id="KubecpuError"),
    pytest.param(ValueError("a bug: not a domain error at all"), id="ValueError"),
]


def test_the_table_has_every_runtime_error():
    """A ContainerRuntimeError added to errors.py joins the table by itself (FAULTS is built from the classes)."""
    assert {param.id for param in FAULTS} >= {kind.__name__ for kind in runtime_errors()}
    assert len(runtime_errors()) >= 6


@pytest.mark.parametrize("fault", FAULTS)
def test_failed_push_keeps_the_rollback(tmp_path, monkeypatch, fault):
    """(Issue 63, item 4.) The file is replaced, then the push fails: whatever the error, the module's result
    says where the previous file is (kept) and what was written, and that the push did not end; the role's rescue
    puts those exact bytes back and the kubelet starts on the previous configuration over the previous file (which
    it accepts; over the new one it would not). A runtime that cannot be reached is no failure: the module ends,
    and a later failure (the health gate here) rolls back the same way."""
    node = Node(tmp_path, monkeypatch)
    assert "not all reserved cpus" in str(node_refuses_the_new_file(node))
    node.runtime.fault, node.runtime.lists_left = fault, 1  # the judge's list of the running pods, then the push's
    systemd = Systemd(node.path, node.config)
    runner = Runner(node.variables(), systemd)
    result = the_write(node, runner)
    assert result["kept"] and open(result["kept"], "rb").read() == node.old
    assert result["written"] == node.new and node.bytes() == node.new.encode()
    assert result["changed"] and result["pushed"]["incomplete"] and result["pushed"]["actions"] == []
    if isinstance(fault, UNREACHABLE):
        assert not result.get("failed") and result["pushed"]["unreachable"]
        systemd.running = True  # the block went on: the kubelet started, then its health gate failed
        failure = {"failed": True, "msg": "the kubelet did not stay healthy"}
    else:
        failure = result
        assert result["failed"] and result["error_type"] == type(fault).__name__
        assert str(fault) in result["msg"] and "the previous file is kept as %s" % result["kept"] in result["msg"]
        assert result["pushed"]["errors"] == [{"error": str(fault), "kind": "push"}]
    node.runtime.fault = None  # the runtime answers again: the rescue's move back goes through
    message = rolled_back(node, runner, failure)
    assert node.bytes() == node.old  # byte for byte
    assert "rolled back: the previous checkpoint was put back from %s" % result["kept"] in message
    assert "the containers it moved were moved back" in message
    assert systemd.calls[-1] == {"state": "started", "checkpoint": node.old, "config": node.old_config}
    assert node.valid_under("0")["valid"]
    assert node.cpus() == ("1-2", "0,3")


def node_refuses_the_new_file(node):
    """What the kubelet on the previous configuration says over the rewritten file."""
    with open(node.path, "rb") as handle:
        old = handle.read()
    try:
        with open(node.path, "w", encoding="utf-8") as handle:
            handle.write(node.new)
        return node.valid_under("0")["error"]
    finally:
        with open(node.path, "wb") as handle:
            handle.write(old)


def test_a_push_that_failed_partway_is_moved_back(tmp_path, monkeypatch):
    """The push moved the shared container, then failed before the pinned one: the module's result says the push did
    not end (no actions), and the rescue moves every container back to the previous file's CPUs."""
    node = Node(tmp_path, monkeypatch)
    node.runtime.fault, node.runtime.fault_at, node.runtime.updates_left = errors.KubecpuError("gone"), "update", 1
    runner = Runner(node.variables(), Systemd(node.path, node.config))
    result = the_write(node, runner)
    assert result["failed"] and result["kept"] and result["pushed"]["incomplete"]
    assert node.cpus() != ("1-2", "0,3")  # one container moved before the failure
    node.runtime.fault = None
    message = rolled_back(node, runner, result)
    assert "the containers it moved were moved back" in message
    assert node.bytes() == node.old and node.cpus() == ("1-2", "0,3")


@pytest.mark.parametrize(("kubelet", "old_format"), [
    pytest.param(V137, KubeletVersion(35), id="V2-file-under-1.37"),
    pytest.param(V136_POD_LEVEL, None, id="V3-file-under-1.36-PodLevelResourceManagers"),
    pytest.param(V137, None, id="V4-file-under-1.37"),
])
def test_the_move_back_restores_the_previous_bytes(tmp_path, monkeypatch, kubelet, old_format):
    """(Issue 63, suspected.) The rewrite wrote and pushed; the kubelet started and failed its health gate. The
    rescue puts the previous file back and moves the containers back as it has them: the file stays the previous
    one byte for byte (a V2 file is not re-encoded as V4), and it is read under the kubelet's feature gates (a V3
    file is not refused by a 1.36 kubelet read without PodLevelResourceManagers)."""
    node = Node(tmp_path, monkeypatch, kubelet, old_format)
    systemd = Systemd(node.path, node.config)
    runner = Runner(node.variables(), systemd)
    result = the_write(node, runner)
    assert not result.get("failed") and result["pushed"]["actions"] and not result["pushed"]["incomplete"]
    assert node.cpus() == ("0,2", "1,3")
    systemd.running = True
    message = rolled_back(node, runner, {"failed": True, "msg": "the kubelet did not stay healthy"})
    moved_back = runner.variables["__kubelet_cpu_manager_moved_back"]
    assert moved_back["pushed"]["actions"] and not moved_back["changed"], moved_back.get("msg")  # pushed, not written
    assert "the containers it moved were moved back" in message
    assert node.bytes() == node.old and node.cpus() == ("1-2", "0,3")
    kept = [name for name in os.listdir(tmp_path) if name.startswith("cpu_manager_state.write-")]
    assert kept == [os.path.basename(result["kept"])]  # the move back wrote nothing, so kept nothing


def test_the_rescue_stops_the_kubelet_before_it_puts_anything_back(tmp_path, monkeypatch):
    """(Issue 63, suspected: a kubelet still running during the rollback admits pods whose entries the restore
    drops.) The block wrote the checkpoint and the configuration and started the kubelet, whose health gate then
    failed: the rescue stops it first, puts the checkpoint and the configuration back while it is stopped, and
    starts it only then, on the previous files."""
    node = Node(tmp_path, monkeypatch)
    systemd = Systemd(node.path, node.config)
    runner = Runner(node.variables(), systemd)
    assert not the_write(node, runner).get("failed")
    backup = str(tmp_path / "config.yaml.backup")
    os.replace(node.config, backup)
    with open(node.config, "wb") as handle:
        handle.write(b"cpuManagerPolicy: static\nreservedSystemCPUs: '1'\n")
    runner.variables["__kubelet_cpu_manager_written"] = {"changed": True, "backup_file": backup}
    systemd.running = True
    message = rolled_back(node, runner, {"failed": True, "msg": "the node did not become Ready"})
    assert [call["state"] for call in systemd.calls] == ["stopped", "started"]
    assert {write["path"] for write in runner.writes} >= {node.path, node.config}
    assert not [write for write in runner.writes if write["kubelet_running"]]
    assert systemd.calls[-1] == {"state": "started", "checkpoint": node.old, "config": node.old_config}
    assert "the previous configuration was put back from %s" % backup in message


def test_a_kubelet_that_cannot_be_stopped_gets_nothing_put_back_under_it(tmp_path, monkeypatch):
    """systemd cannot stop the kubelet: nothing is put back under a running kubelet, it is not restarted, and the
    node fails saying where the previous checkpoint is."""
    node = Node(tmp_path, monkeypatch)
    systemd = Systemd(node.path, node.config, fail="stopped")
    runner = Runner(node.variables(), systemd)
    result = the_write(node, runner)
    systemd.running = True
    del runner.writes[:]
    message = rolled_back(node, runner, {"failed": True, "msg": "the kubelet did not stay healthy"})
    assert runner.writes == [] and systemd.calls == [] and node.bytes() == node.new.encode()
    assert ("nothing was put back: the kubelet could not be stopped (Unable to stop service kubelet: timed out), "
            "the checkpoint is the new one, the previous one kept as %s" % result["kept"]) in message


def test_a_failure_before_the_write_changes_nothing_and_says_so(tmp_path, monkeypatch):
    """The kubelet admitted a pod after the plan: the write refuses, keeps nothing, and the rescue says the checkpoint
    was not changed (there is nothing to put back) and starts the kubelet again."""
    node = Node(tmp_path, monkeypatch)
    since = write(state("0", {"pod-a": {"app": "1-2"}, "pod-c": {"app": "3"}}), node.kubelet)
    with open(node.path, "wb") as handle:
        handle.write(since)
    runner = Runner(node.variables(), Systemd(node.path, node.config))
    result = the_write(node, runner)
    assert result["failed"] and result["error_type"] == "StaleCheckpointError" and "kept" not in result
    message = rolled_back(node, runner, result)
    assert "rolled back: the checkpoint was not changed" in message and node.bytes() == since


def test_check_mode_plans_the_push_and_changes_nothing(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    args = {"action": "write", "content": node.new, "state_path": node.path, "kubelet_stopped": True,
            "reserved_cpus": "1", "kubelet_version": "1.37", "push": True, "runtime": "crictl",
            "sysfs_root": node.sysfs, "cgroup_root": str(tmp_path / "cgroup")}
    planned = run_module(cpu_manager_checkpoint, args, check_mode=True)
    assert planned["rc"] == 0 and planned["changed"] and planned["kept"] is None
    assert {(a["container"], a["cpus"]) for a in planned["pushed"]["actions"]} >= {("app", "0,2")}
    assert node.bytes() == node.old and node.cpus() == ("1-2", "0,3")


def test_a_move_back_that_fails_is_said_and_the_file_is_back_all_the_same(tmp_path, monkeypatch):
    """The runtime still fails during the rescue: the previous file is back byte for byte, the kubelet starts on it,
    and the message says the containers could not be moved back and why (the kubelet's reconcile does it)."""
    node = Node(tmp_path, monkeypatch)
    node.runtime.fault = errors.RuntimeOutputError("crictl ps: unexpected end of JSON input", "list")
    systemd = Systemd(node.path, node.config)
    runner = Runner(node.variables(), systemd)
    result = the_write(node, runner)
    message = rolled_back(node, runner, result)
    assert "the containers it moved could not be moved back (crictl ps: unexpected end of JSON input)" in message
    assert "the kubelet reconciles them within its reconcile period" in message
    assert node.bytes() == node.old and systemd.calls[-1]["checkpoint"] == node.old
