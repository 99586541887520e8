"""The node modules in-process (patch_module_args), on the crictl backend with the recorded crictl output:
changed, check mode, diff, idempotency, results and clear failures.

Node: 4 single-thread CPUs, one reserved (CPU 0); prod/web main is Guaranteed with 2 CPUs, the others share.
"""

from __future__ import annotations

import json
import os

from unittest import mock

import pytest
from ansible.module_utils import _internal as ansible_internal

from ansible.module_utils.testing import patch_module_args
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint import encode
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.modules import (
    cpu_manager_admission, cpu_manager_allocate, cpu_manager_checkpoint, cpu_manager_defrag, cpu_manager_info,
    cpu_manager_reconcile, cpu_topology_facts)

from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_crictl import (
    calls, cgroup_cpus, make_node, set_cgroup_cpus)

WEB_UID = "a06b0ffe-e387-47dc-90e2-339fa3fc242a"


@pytest.fixture
def node(tmp_path):
    return make_node(str(tmp_path / "node"))


def run(module, args, capsys, check_mode=False, diff=False):
    args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)
    # as on a managed node: a test that imported controller code in this worker (the action plugin's) makes
    # ansible-core send module warnings to the controller's display instead of the result
    with patch_module_args(args), pytest.raises(SystemExit) as exit_info, \
            mock.patch.object(ansible_internal, "is_controller", False):
        module.main()
    result = json.loads(capsys.readouterr().out)
    result["rc"] = exit_info.value.code
    return result


def common(node, tmp_path):
    return {"runtime": "crictl", "crictl_path": node["crictl"], "cgroup_root": node["cgroup"],
            "topology_path": node["topology"], "state_path": str(tmp_path / "state"), "num_reserved": 1,
            "kubelet_state_path": str(tmp_path / "kubelet_state")}


def updates(node):
    return [argv for argv in calls(node["log"]) if "update" in argv]


def test_reconcile_check_mode_then_real_then_idempotent(node, tmp_path, capsys):
    args = common(node, tmp_path)
    plan = run(cpu_manager_reconcile, args, capsys, check_mode=True, diff=True)
    assert plan["changed"] and plan["rc"] == 0
    assert [(a["pod"], a["container"], a["cpus"]) for a in plan["actions"] if a["action"] == "allocate"] == [
        ("prod/web", "main", "1-2")]
    assert plan["diff"]["after"]["entries"] == {WEB_UID: {"main": "1-2"}}
    assert updates(node) == [] and not (tmp_path / "state").exists()

    first = run(cpu_manager_reconcile, args, capsys)
    assert first["changed"] and first["counts"]["allocate"] == 1
    assert cgroup_cpus(node, node["prod/web/main"]) == "1-2"
    for key in ("prod/web/sidecar", "prod/api/app", "batch/report/app", "prod/worker/app#1", "prod/db-migrate/app"):
        assert cgroup_cpus(node, node[key]) == "0,3", key
    assert cgroup_cpus(node, node["prod/worker/app"]) == "0-3"  # exited: left alone
    assert all(argv[:2] == ["update", "--cpuset-cpus=0,3"] or argv[:2] == ["update", "--cpuset-cpus=1-2"]
               for argv in updates(node))

    before = len(calls(node["log"]))
    second = run(cpu_manager_reconcile, args, capsys)
    assert not second["changed"] and second["actions"] == []
    assert calls(node["log"])[before:] == [["ps", "-a", "-o", "json"]]  # cached facts, cpusets from cgroupfs
    assert second["runtime_calls"] == {"list": 1}


def test_allocate_release_and_allocate_again(node, tmp_path, capsys):
    args = dict(common(node, tmp_path), pod_uid=WEB_UID, container_name="main")
    first = run(cpu_manager_allocate, args, capsys, diff=True)
    assert first["changed"] and first["cpus"] == "1-2" and first["exclusive"]
    assert first["container_id"] == node["prod/web/main"] and first["container_name"] == "main"
    assert first["diff"]["before"]["entries"] == {}
    assert cgroup_cpus(node, node["prod/api/app"]) == "0,3"  # shared containers left the exclusive CPUs
    assert not run(cpu_manager_allocate, args, capsys)["changed"]

    plan = run(cpu_manager_allocate, dict(args, state="absent"), capsys, check_mode=True)
    assert plan["changed"] and plan["released"] == "1-2"
    assert cgroup_cpus(node, node["prod/web/main"]) == "1-2"  # check mode changed nothing
    released = run(cpu_manager_allocate, dict(args, state="absent"), capsys)
    assert released["released"] == "1-2" and cgroup_cpus(node, node["prod/api/app"]) == "0-3"
    assert not run(cpu_manager_allocate, dict(args, state="absent"), capsys)["changed"]

    again = run(cpu_manager_allocate, dict(common(node, tmp_path), container_id=node["prod/web/main"][:12]), capsys)
    assert again["changed"] and again["cpus"] == "1-2"


def test_allocate_cpus_overrides_the_request_and_apply_false_only_records(node, tmp_path, capsys):
    args = dict(common(node, tmp_path), container_id=node["prod/api/app"], cpus=1, apply=False)
    result = run(cpu_manager_allocate, args, capsys)
    assert result["changed"] and result["exclusive"] and result["cpus"] == "1"  # Burstable, but told 1 CPU
    assert updates(node) == []  # recorded only: the next reconcile pass applies it
    entries = json.loads((tmp_path / "state").read_text())["entries"]
    assert entries == {result["pod_uid"]: {"app": "1"}}
    assert cgroup_cpus(node, node["prod/api/app"]) == "0-3"


@pytest.mark.parametrize("extra, text", [
    ({"container_id": "0123456789abcdef"}, "not found in the runtime"),
    ({"pod_uid": WEB_UID, "container_name": "main", "cpus": -1}, "cpus must not be negative"),
    ({"pod_uid": WEB_UID, "container_name": "main", "reserved_cpus": "0-x"}, "reserved_cpus: invalid CPU list"),
    ({"pod_uid": WEB_UID, "container_name": "main", "num_reserved": 0},
     "the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero (set reserved_cpus "
     "or num_reserved)"),
    ({"pod_uid": WEB_UID, "container_name": "main", "policy_options": {"no-such-option": "true"}},
     'unknown CPU Manager Policy option: "no-such-option"'),
    ({"pod_uid": WEB_UID, "container_name": "main", "near_device": "; rm -rf /"}, "not a PCI address"),
    ({"pod_uid": WEB_UID, "container_name": "main", "crictl_path": "/nonexistent/crictl"}, "crictl not found"),
])
def test_allocate_failures_are_clear_messages(node, tmp_path, capsys, extra, text):
    args = dict(common(node, tmp_path), **extra)
    result = run(cpu_manager_allocate, args, capsys)
    assert result["failed"] and text in result["msg"]
    assert "Traceback" not in result["msg"]
    assert not (tmp_path / "state").exists()


def test_a_kubelet_that_pins_cpus_itself_is_refused_unless_forced(node, tmp_path, capsys):
    (tmp_path / "kubelet_state").write_text('{"policyName":"static","defaultCpuSet":"0-3","checksum":0}')
    refused = run(cpu_manager_reconcile, common(node, tmp_path), capsys)
    assert refused["failed"] and "pins CPUs on this node itself" in refused["msg"]
    assert updates(node) == []
    forced = run(cpu_manager_reconcile, dict(common(node, tmp_path), force=True), capsys)
    assert forced["changed"]


def test_info_names_owners_reports_drift_and_throttling(node, tmp_path, capsys):
    args = common(node, tmp_path)
    run(cpu_manager_reconcile, args, capsys)
    path = node["cgroup"] + "/cpuset/kubepods/pod%s/%s/cpuset.cpus" % (WEB_UID, node["prod/web/main"])
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("0-3\n")  # someone moved it by hand
    state_before = (tmp_path / "state").read_bytes()
    info = run(cpu_manager_info, args, capsys)
    assert not info["changed"] and info["runtime"] == "crictl"
    assert [(a["pod"], a["container"], a["cpus"], a["drift"]) for a in info["assignments"]] == [
        ("prod/web", "main", "1-2", True)]
    assert info["drift"] == [{"container_id": node["prod/web/main"], "pod": "prod/web", "container": "main",
                              "want": "1-2", "have": "0-3"}]
    assert info["free_whole_cores_per_numa"] == {"0": 1}  # CPU 3 (CPU 0 is reserved)
    main = next(c for c in info["containers"] if c["container"] == "main")
    assert main["cpu_stat"] == {"nr_periods": 10, "nr_throttled": 2, "throttled_usec": 5}
    assert (tmp_path / "state").read_bytes() == state_before  # info never writes


def test_info_without_a_runtime_still_reports_the_state(node, tmp_path, capsys):
    run(cpu_manager_reconcile, common(node, tmp_path), capsys)
    info = run(cpu_manager_info, dict(common(node, tmp_path), crictl_path="/nonexistent"), capsys)
    assert info["rc"] == 0 and info["runtime"] is None
    assert info["state"]["entries"] == {WEB_UID: {"main": "1-2"}}
    assert "runtime not queried: crictl not found" in json.dumps(info["warnings"])  # 2.19: structured warnings


def test_topology_facts(node, capsys):
    result = run(cpu_topology_facts, {"topology_path": node["topology"]}, capsys)
    facts = result["ansible_facts"]["kubecpu_topology"]
    assert not result["changed"]
    assert facts["summary"]["cpus"] == 4 and facts["numa_cpus"] == {"0": "0-3"}
    bad = run(cpu_topology_facts, {"sysfs_root": "/nonexistent-root", "topology_path": "/nonexistent.json"}, capsys)
    assert bad["failed"] and "nonexistent.json" in bad["msg"]


@pytest.mark.parametrize("extra,outcome", [
    ({"topology_manager_policy": "single-numa-node"}, "1-2"),  # one NUMA node: the 2 CPUs fit it
    ({"topology_manager_policy": "restricted", "topology_manager_policy_options": {"max-allowable-numa-nodes": "4"}},
     'the minimum value of "max-allowable-numa-nodes" should not be less than 8'),
    ({"topology_manager_policy": "best-effort", "topology_manager_policy_options": {"bogus": True}},
     'unknown Topology Manager Policy option: "bogus"'),
])
def test_reconcile_with_a_topology_manager_policy(node, tmp_path, capsys, extra, outcome):
    result = run(cpu_manager_reconcile, dict(common(node, tmp_path), **extra), capsys)
    if result["rc"]:
        assert outcome in result["msg"] and not (tmp_path / "state").exists()
    else:
        assert cgroup_cpus(node, node["prod/web/main"]) == outcome


@pytest.mark.parametrize("policy,admitted", [("none", True), ("single-numa-node", True)])
def test_admission_answers_without_changing_anything(node, tmp_path, capsys, policy, admitted):
    args = dict(common(node, tmp_path), topology_manager_policy=policy)
    result = run(cpu_manager_admission, args, capsys, check_mode=True)
    assert result["rc"] == 0 and not result["changed"]
    assert [(r["pod"], r["container"], r["admitted"], r["cpus"], r["numa_nodes"]) for r in result["containers"]] == [
        ("prod/web", "main", admitted, "1-2", [0])]
    assert result["admitted"] == 1 and result["rejected"] == 0
    assert not (tmp_path / "state").exists() and updates(node) == []


@pytest.mark.parametrize("policy,topology_refusal", [("restricted", True), ("none", False)])
def test_admission_reports_a_rejection(node, tmp_path, capsys, policy, topology_refusal):
    """Three reserved CPUs leave one: the web pod's 2 CPUs have no hint at all, which restricted refuses at
    admission (the kubelet's TopologyAffinityError); without a policy the allocation itself fails."""
    args = dict(common(node, tmp_path), topology_manager_policy=policy, reserved_cpus="0-2", num_reserved=3)
    result = run(cpu_manager_admission, args, capsys)
    assert result["rc"] == 0 and result["admitted"] == 0 and result["rejected"] == 1
    row = result["containers"][0]
    expected = ("prod/web", "main", False, topology_refusal)
    assert (row["pod"], row["container"], row["admitted"], row["topology"]) == expected
    assert ("Resources cannot be allocated with Topology locality" in row["reason"]) == topology_refusal


@pytest.mark.parametrize("runtime", ["crictl", "cri"])
@pytest.mark.parametrize("bad, text", [
    ({"cpus": -1}, "cpus must not be negative, got -1"),
    ({"near_device": "$(reboot)"}, "not a PCI address"),
    ({"runtime_timeout": 0.0}, "runtime_timeout must be more than 0"),
    ({"reserved_cpus": "0-x"}, "reserved_cpus: invalid CPU list"),
])
def test_allocate_checks_every_parameter_before_anything_is_opened(node, tmp_path, capsys, runtime, bad, text):
    """Nothing is run, connected, generated or written for a request with a bad parameter (the CRI backend used
    to open its channel, and generate code beside the state, before ``cpus`` was checked)."""
    args = dict(common(node, tmp_path), runtime=runtime, runtime_endpoint="unix://" + str(tmp_path / "no.sock"),
                pod_uid=WEB_UID, container_name="main", **bad)
    result = run(cpu_manager_allocate, args, capsys)
    assert result["rc"] == 1 and text in result["msg"]
    assert result["error_type"] in ("ConfigError", "TopologyError")  # both configuration errors
    assert calls(node["log"]) == [] and sorted(os.listdir(tmp_path)) == ["node"]


def test_checkpoint_rebuild_in_check_mode_then_for_real(node, tmp_path, capsys):
    for key, cid in node.items():
        if key.count("/") == 2 and not cid.startswith("/"):
            set_cgroup_cpus(node, cid, "1-2" if key == "prod/web/main" else "0,3")
    (tmp_path / "state").write_text("lost")
    args = dict(common(node, tmp_path), action="rebuild")
    planned = run(cpu_manager_checkpoint, args, capsys, check_mode=True)
    assert planned["rc"] == 0 and planned["changed"] and planned["kept"] is None
    assert json.loads(planned["written"])["entries"] == {WEB_UID: {"main": "1-2"}}
    assert (tmp_path / "state").read_text() == "lost"
    done = run(cpu_manager_checkpoint, args, capsys)
    assert done["changed"] and (tmp_path / "state").read_text() == planned["written"]
    assert open(done["kept"], encoding="utf-8").read() == "lost"
    valid = run(cpu_manager_checkpoint, dict(common(node, tmp_path), action="validate"), capsys)
    assert valid["valid"] and valid["state"]["entries"] == {WEB_UID: {"main": "1-2"}}
    refused = run(cpu_manager_checkpoint, dict(common(node, tmp_path), action="write", content="{}"), capsys)
    assert refused["rc"] == 1 and "could not restore state from checkpoint" in refused["msg"]
    assert (tmp_path / "state").read_text() == planned["written"]


def test_defrag_check_mode_then_live_then_nothing_left(tmp_path, capsys):
    node = make_node(str(tmp_path / "node"), cpus="0-7")
    topology = tmp_path / "two-numa.json"
    topology.write_text(json.dumps({"format": "kubecpu.topology/v1", "source": "file", "cpus": [
        {"cpu": c, "core": c, "socket": 0, "numa": c // 4, "uncore": 0} for c in range(8)]}))
    (tmp_path / "state").write_bytes(encode(CPUState("static", CPUSet.parse("0-2,5-7"),
                                                     {WEB_UID: {"main": CPUSet.parse("3-4")}})))
    args = dict(common(node, tmp_path), topology_path=str(topology))
    planned = run(cpu_manager_defrag, args, capsys, check_mode=True, diff=True)
    assert planned["rc"] == 0 and planned["changed"] and planned["rewritten_state"] is None  # would change
    assert [(m["containers"], m["cpus_after"]) for m in planned["moves"]] == [(["main"], "1,3")]  # keeps 3
    assert (planned["proven_best"], planned["planner"], planned["containers_moved"]) == (True, "exact", 1)
    assert planned["diff"]["after"]["entries"] == {WEB_UID: {"main": "1,3"}}
    assert cgroup_cpus(node, node["prod/web/main"]) != "1,3"
    done = run(cpu_manager_defrag, args, capsys)
    assert done["changed"] and cgroup_cpus(node, node["prod/web/main"]) == "1,3"
    assert done["after"]["largest_single_numa_whole_cores"] == 4
    again = run(cpu_manager_defrag, args, capsys)
    assert not again["changed"] and again["moves"] == []
