"""A checkpoint replaced by an operator: nothing written that the kubelet would refuse, the old file always kept
beside it, check mode writing nothing, the kubelet's own file changed only with the kubelet stopped, a rebuild and a
push through the runtime (the crictl stand-in)."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import (ChangedThenFailed, CheckpointError,
                                                                                 ConfigError, StaleCheckpointError,
                                                                                 StateError, StoreError)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint_formats import write
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.kubelet_versions import POD_LEVEL, KubeletVersion
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.manager import NodeManager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import NodeConfig
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import fingerprint
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.checkpoint_file import CheckpointFile
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.checkpoints import checkpoint_file
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_crictl import (calls, cgroup_cpus, make_node,
                                                                                    set_cgroup_cpus)

WEB_UID = "a06b0ffe-e387-47dc-90e2-339fa3fc242a"


@pytest.fixture
def node(tmp_path):
    return make_node(str(tmp_path / "node"))  # 4 single-thread CPUs; prod/web/main is Guaranteed with 2


def target(node, path, **settings):
    config = NodeConfig.from_mapping(dict({"state_path": str(path), "policy": "static", "num_reserved": 1,
                                           "topology_path": node["topology"], "runtime": "crictl",
                                           "crictl_path": node["crictl"], "cgroup_root": node["cgroup"]}, **settings))
    return CheckpointFile(config)


def test_validate_says_what_the_kubelet_would_say(node, tmp_path):
    path = tmp_path / "state"
    assert target(node, path).validate() == {"changed": False, "exists": False, "valid": True, "error": None,
                                             "state": None}
    path.write_bytes(checkpoint_file("0,3", {"pod": {"app": "1-2"}}))
    assert target(node, path).validate()["valid"]
    wrong = target(node, path, reserved_cpus="1", num_reserved=None).validate()
    assert not wrong["valid"] and 'not all reserved cpus: "1" are present in defaultCpuSet: "0,3"' in wrong["error"]
    path.write_bytes(b'{"policyName":"static","defaultCpuSet":"0-3","checksum":7}')
    assert "checkpoint is corrupted" in target(node, path).validate()["error"]


def test_a_write_planned_from_another_file_than_the_one_on_disk_changes_nothing(node, tmp_path):
    """(A stale plan.) The plan read the checkpoint; the kubelet then pinned pod-new; the planned bytes would drop
    its entry and give its CPUs away. With the fingerprint of what it was planned from the write refuses, in check
    mode too, and keeps nothing aside; the file as planned from is written."""
    path = tmp_path / "state"
    planned_on = checkpoint_file("0,3", {WEB_UID: {"main": "1-2"}})  # the running pods' (the judge admits them)
    path.write_bytes(planned_on)
    planned_from = fingerprint(planned_on)
    new = checkpoint_file("0-1", {WEB_UID: {"main": "2-3"}}).decode()
    since = checkpoint_file("0", {WEB_UID: {"main": "1-2"}, "pod-new": {"app": "3"}})  # the kubelet, after the plan
    path.write_bytes(since)
    for apply in (False, True):
        with pytest.raises(StaleCheckpointError, match=r"changed since the plan was made \(planned from sha256:"):
            target(node, path).run("write", content=new, apply=apply, planned_from=planned_from)
    assert path.read_bytes() == since and sorted(os.listdir(tmp_path)) == ["node", "state"]  # nothing kept aside
    with pytest.raises(StaleCheckpointError, match="now absent"):
        target(node, tmp_path / "missing").run("write", content=new, planned_from=planned_from)
    path.write_bytes(planned_on)
    done = target(node, path).run("write", content=new, planned_from=planned_from)
    assert done["changed"] and path.read_text() == new
    fresh = target(node, tmp_path / "fresh").run("write", content=new, planned_from=fingerprint(None))
    assert fresh["changed"] and (tmp_path / "fresh").read_text() == new


def test_write_keeps_the_old_file_and_refuses_what_the_kubelet_would_refuse(node, tmp_path):
    path = tmp_path / "state"
    old = checkpoint_file("0,3", {WEB_UID: {"main": "1-2"}})  # the running pods' (the judge admits them)
    path.write_bytes(old)
    new = checkpoint_file("0-1", {WEB_UID: {"main": "2-3"}}).decode()
    planned = target(node, path).run("write", content=new, apply=False)
    assert planned["changed"] and planned["written"] == new and planned["kept"] is None and path.read_bytes() == old
    done = target(node, path).run("write", content=new)
    assert path.read_text() == new and open(done["kept"], "rb").read() == old
    assert os.path.basename(done["kept"]).startswith("state.write-")
    again = target(node, path).run("write", content=new)
    assert not again["changed"] and again["kept"] is None
    with pytest.raises(StateError, match="overlaps with default cpuset"):
        target(node, path).run("write", content=checkpoint_file("0-2", {WEB_UID: {"main": "2-3"}}).decode())
    with pytest.raises(CheckpointError, match='configured policy "static" differs from state checkpoint policy'):
        target(node, path).run("write", content=checkpoint_file("", {}, "none").decode())
    with pytest.raises(ConfigError, match="needs the checkpoint's content"):
        target(node, path).run("write")
    assert path.read_text() == new


def test_the_kubelets_own_file_is_changed_only_with_the_kubelet_stopped(node, tmp_path):
    link = tmp_path / "kubelet-state"
    os.symlink("/var/lib/kubelet/cpu_manager_state", str(link))
    with pytest.raises(StoreError, match="read-only"):
        target(node, link).run("reset")
    stopped = CheckpointFile(target(node, link).config, kubelet_stopped=True)
    assert not stopped.store.read_only


def test_rebuild_finds_the_pinned_container_and_push_applies_the_file(node, tmp_path):
    path = tmp_path / "state"
    web = node["prod/web/main"]
    pinned(node, web, "1-2", "0,3")
    path.write_bytes(b"garbage")
    rebuilt = target(node, path).run("rebuild")
    assert rebuilt["state"]["entries"] == {WEB_UID: {"main": "1-2"}} and rebuilt["state"]["defaultCpuSet"] == "0,3"
    assert open(rebuilt["kept"], "rb").read() == b"garbage" and json.loads(path.read_text())["entries"]
    moved = checkpoint_file("0-1", {WEB_UID: {"main": "2-3"}}).decode()
    pushed = target(node, path).run("write", content=moved, push=True)["pushed"]
    assert {(a["container"], a["cpus"]) for a in pushed["actions"]} >= {("main", "2-3")}
    assert cgroup_cpus(node, web) == "2-3" and cgroup_cpus(node, node["prod/api/app"]) == "0-1"
    assert any("update" in argv for argv in calls(node["log"]))


def test_reset_moves_the_file_aside_and_the_none_file_pushes_every_cpu(node, tmp_path):
    path = tmp_path / "state"
    path.write_bytes(checkpoint_file("0,3", {WEB_UID: {"main": "1-2"}}))
    reset = target(node, path).run("reset")
    assert reset["changed"] and not path.exists() and os.path.exists(reset["kept"]) and reset["written"] is None
    assert not target(node, path).run("reset")["changed"]
    pinned(node, node["prod/web/main"], "1-2", "0,3")
    none = target(node, path, policy="none", num_reserved=None)
    none.run("write", content=checkpoint_file("", {}, "none").decode(), push=True)
    assert cgroup_cpus(node, node["prod/web/main"]) == "0-3"


def pinned(node, cid, cpus, shared):
    """The cgroups of a node whose kubelet pinned ``cid`` on ``cpus`` and keeps the others on ``shared``."""
    for key, other in node.items():
        if key.count("/") == 2 and not other.startswith("/"):
            set_cgroup_cpus(node, other, cpus if other == cid else shared)


@pytest.mark.parametrize(("kubelet", "gates", "writer"), [
    pytest.param("1.37", {}, KubeletVersion(35), id="V2-under-1.37"),
    pytest.param("1.36", {POD_LEVEL: True}, KubeletVersion(36, ((POD_LEVEL, True),)), id="V3-under-1.36-gate-on"),
    pytest.param("1.37", {}, KubeletVersion(37), id="V4-under-1.37"),
    pytest.param("1.35", {}, KubeletVersion(35), id="V2-under-1.35"),
])
def test_writing_the_bytes_already_there_keeps_them_as_they_are(node, tmp_path, kubelet, gates, writer):
    """(Issue 63, suspected: the rescue's move back re-encoded the previous file in the kubelet's format.) A write of
    the very bytes on disk changes nothing, whatever their format: a V2 file under a 1.37 kubelet (which writes V4)
    stays V2, nothing is kept aside, and a push still goes (the rescue's move back is this write with push)."""
    path = tmp_path / "state"
    old = write(state_of("0,3", {WEB_UID: {"main": "1-2"}}), writer)
    path.write_bytes(old)
    pinned(node, node["prod/web/main"], "2-3", "0-1")  # where the rewrite had moved it
    done = target(node, path, kubelet_version=kubelet, feature_gates=gates).run(
        "write", content=old.decode(), push=True)
    assert not done["changed"] and done["kept"] is None and done["written"] == old.decode()
    assert path.read_bytes() == old and sorted(os.listdir(tmp_path)) == ["node", "state"]
    assert cgroup_cpus(node, node["prod/web/main"]) == "1-2" and not done["pushed"]["incomplete"]


def test_a_failure_after_the_change_carries_where_the_previous_file_is(node, tmp_path, monkeypatch):
    """Once the file is replaced, an error of any type (here a bug's ValueError in the runtime) is raised as
    ChangedThenFailed: its text the cause's and where the previous file is, its ``done`` the result so far. An
    error before any change is raised as it is (a stale plan: nothing was kept)."""
    path = tmp_path / "state"
    old = checkpoint_file("0,3", {WEB_UID: {"main": "1-2"}})
    path.write_bytes(old)
    new = checkpoint_file("0-1", {WEB_UID: {"main": "2-3"}}).decode()

    def broken(manager, state, apply=True):
        raise ValueError("a bug in the runtime backend")

    monkeypatch.setattr(NodeManager, "push", broken)  # the list (the judge's pods) works, the push does not
    with pytest.raises(ChangedThenFailed) as failed:
        target(node, path).run("write", content=new, push=True)
    done = failed.value.done
    assert failed.value.kind == "ValueError" and isinstance(failed.value.cause, ValueError)
    assert str(failed.value) == "unexpected ValueError: a bug in the runtime backend (after the change of %s: the " \
        "previous file is kept as %s)" % (path, done["kept"])
    assert open(done["kept"], "rb").read() == old and path.read_text() == new and done["written"] == new
    assert done["changed"] and done["pushed"]["incomplete"]
    with pytest.raises(StaleCheckpointError):
        target(node, path).run("write", content=old.decode(), push=True, planned_from=fingerprint(old))


def state_of(default, entries):
    built = CPUState("static", CPUSet.parse(default))
    for pod, containers in entries.items():
        for name, cpus in containers.items():
            built.set(pod, name, CPUSet.parse(cpus))
    return built


def test_a_file_the_restarted_kubelet_would_reject_a_pod_of_is_never_written(node, tmp_path):
    """(Issue 63: one judge at every write.) The file passes the start validation, but with full-pcpus-only and no
    free CPU left the restarted kubelet's SMT check rejects pod-a when it admits it again: the write refuses, in
    check mode too, with the kubelet's text and the word drain; the file on disk stays as it was, nothing is kept
    aside. The same file is written where a free CPU is left."""
    path = tmp_path / "state"
    before = checkpoint_file("0,3", {WEB_UID: {"main": "1-2"}})  # the running pods' (the judge admits them)
    path.write_bytes(before)
    full = checkpoint_file("0", {WEB_UID: {"main": "1-2"}, "pod-a": {"app": "3"}}).decode()
    for apply in (False, True):
        with pytest.raises(StateError, match=r"would refuse this checkpoint \(pod %s container main: SMT Alignment "
                                             r"Error: not enough free physical CPUs.*drain" % WEB_UID):
            target(node, path, policy_options={"full-pcpus-only": "true"}).run("write", content=full, apply=apply)
    assert path.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["node", "state"]
    assert target(node, path).run("write", content=full)["changed"]  # without the option the kubelet admits it


def test_the_write_gate_judges_the_running_pods_not_the_files_own(tmp_path):
    """(Issue 63's review.) cpu_manager_checkpoint action=write (the role's rewrite and rescue) judged the pods the file
    itself shows (each container requesting what it holds). prod/web/main runs and requests 2 CPUs; a file giving it 1
    passed, but the restarted kubelet's hints for an assigned set whose size is not the request are empty and
    restricted rejects the pod. The gate judges the pods the runtime lists (what_if.Running.pods)."""
    node = make_node(str(tmp_path / "node"))
    path = tmp_path / "state"
    before = checkpoint_file("0,3", {WEB_UID: {"main": "1-2"}})
    path.write_bytes(before)
    short = checkpoint_file("0,2-3", {WEB_UID: {"main": "1"}}).decode()
    with pytest.raises(StateError, match=r"would refuse this checkpoint .*Resources cannot be allocated"):
        target(node, path, topology_manager_policy="restricted").run("write", content=short)
    assert path.read_bytes() == before
