"""Topology hints and the Topology Manager: every case of kubelet-cases/topology_hints.json and
topology_manager.json through ``kubecpu hints`` / ``kubecpu merge`` (HINTS.md), plus the properties the issue names."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.cli_run import run
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.kubelet_cases import fixture_as_document, ids, load

HINT_CASES = load("topology_hints.json")["cases"]


def hints_argv(case, topology_path):
    argv = ["hints", "--topology", topology_path, "--available", case["available"], "--count", str(case["count"]),
            "--reusable", case["reusable"]]
    for name, value in sorted(case["options"].items()):
        argv += ["--option", "%s=%s" % (name, value)]
    if case["scope"] == "pod":
        argv += ["--scope", "pod"]
        argv += ["--pod-assigned=%d:%s" % (a["request"], a["cpus"]) for a in case.get("pod_assigned") or []]
    elif case.get("assigned") is not None:
        argv += ["--assigned", case["assigned"]]
    return argv


@pytest.mark.parametrize("case", HINT_CASES, ids=ids(HINT_CASES))
def test_hints_cases(case, tmp_path):
    path = tmp_path / "topology.json"
    path.write_text(json.dumps(fixture_as_document(case["topology"])))
    code, out, err = run(hints_argv(case, str(path)))
    assert code == 0, err
    assert json.loads(out) == case["expected"]  # the kubelet's generation order, null and [] kept apart


@pytest.mark.parametrize("argv,stdin,message", [
    (["hints", "--available", "0-3", "--count", "1", "--scope", "pod", "--assigned", "0"], "",
     "--assigned is for container"),
    (["hints", "--available", "0-3", "--count", "1", "--pod-assigned", "1:0"], "", "--pod-assigned needs --scope pod"),
    (["hints", "--available", "0-3", "--count", "1", "--scope", "pod", "--pod-assigned", "x"], "",
     'invalid --pod-assigned "x"'),
    (["hints", "--available", "0-3", "--count", "-1"], "", 'invalid count "-1"'),
    (["hints", "--available", "0-3", "--count", "1", "--option", "bogus"], "",
     'unknown CPU Manager Policy option: "bogus"'),
    (["merge", "--policy", "best-effort", "--numa-nodes", "0-1", "--hints", "-"], "[", "not valid JSON"),
    (["merge", "--policy", "best-effort", "--numa-nodes", "", "--hints", "-"], "[]", "at least one NUMA node"),
    (["merge", "--policy", "restricted", "--numa-nodes", "0", "--hints", "-", "--option", "max-allowable-numa-nodes=4"],
     "[]", 'the minimum value of "max-allowable-numa-nodes" should not be less than 8'),
    (["merge", "--policy", "bogus", "--numa-nodes", "0", "--hints", "-"], "[]", 'unknown policy: "bogus"'),
])
def test_bad_arguments(argv, stdin, message, tmp_path):
    if argv[0] == "hints":
        path = tmp_path / "t.json"
        path.write_text(json.dumps(fixture_as_document("topoDualSocketHT")))
        argv = argv[:1] + ["--topology", str(path)] + argv[1:]
    code, out, err = run(argv, stdin)
    assert code == 2 and message in err and out == ""


@pytest.mark.parametrize("doc,message", [
    ({"cpu": []}, "expected a JSON list"),
    ([5], "provider 0 must be null or an object"),
    ([{"cpu": 5}], "expected a list of hints or null"),
    ([{"cpu": [{"numa_affinity": [0]}]}], "a hint is"),
    ([{"cpu": [{"numa_affinity": "0", "preferred": True}]}], "numa_affinity must be a list"),
    ([{"cpu": [{"numa_affinity": [0], "preferred": "yes"}]}], "preferred must be true or false"),
])
def test_bad_hint_files(doc, message, tmp_path):
    code, out, err = run(["merge", "--policy", "best-effort", "--numa-nodes", "0-1", "--hints", "-"], json.dumps(doc))
    assert code == 2 and message in err


# --- properties ----------------------------------------------------------------------------------------------


def test_hints_on_a_generated_machine_respect_reusable():
    """A reusable CPU pins every hint to the nodes it lies on."""
    topo_doc = {"format": "kubecpu.topology/v1", "source": "file", "cpus": [
        {"cpu": i.cpu, "core": i.core, "socket": i.socket, "numa": i.numa, "uncore": i.uncore}
        for i in generated(2, 2, 1).cpus_info]}
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "kubecpu-hints-%d.json" % os.getpid())
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(topo_doc, handle)
    try:
        code, out, _err = run(["hints", "--topology", path, "--available", "0-1,3", "--count", "2", "--reusable", "2"])
    finally:
        os.unlink(path)
    assert code == 0 and json.loads(out) == {"hints": [{"numa_affinity": [1], "preferred": True},
                                                       {"numa_affinity": [0, 1], "preferred": False}]}


# --- admission in allocation (bin/kubecpu allocate with a Topology Manager policy) ------------------------------
def _allocate(tmp_path, pod, container, *extra):
    topo = tmp_path / "topology.json"
    if not topo.exists():  # 2 NUMA nodes (one per socket) of 4 single-thread CPUs
        topo.write_text(json.dumps({"format": "kubecpu.topology/v1", "cpus": [
            {"cpu": c, "core": c, "socket": c // 4, "numa": c // 4, "uncore": c // 4} for c in range(8)]}))
    pod_file = tmp_path / ("%s.json" % pod["uid"])
    pod_file.write_text(json.dumps(pod))
    return run(["allocate", "--topology", str(topo), "--state", str(tmp_path / "state"), "--num-reserved", "1",
                "--pod", str(pod_file), "--container", container, *extra])


def _pod(uid, cpus):
    return {"uid": uid, "name": uid, "namespace": "ns", "containers": [
        {"name": "app", "cpu_request": str(cpus), "cpu_limit": str(cpus), "memory_request": "1Gi",
         "memory_limit": "1Gi"}]}


@pytest.mark.parametrize("policy,admitted", [("none", True), ("best-effort", True), ("restricted", True),
                                             ("single-numa-node", False)])
def test_admission_of_a_request_wider_than_a_numa_node(tmp_path, policy, admitted):
    """5 CPUs on a machine of two 4-CPU nodes: the narrowest hint is [0,1] (preferred, as no single node could
    hold it), which single-numa-node alone refuses, with the kubelet's text, recording nothing."""
    code, out, err = _allocate(tmp_path, _pod("wide", 5), "app", "--topology-manager-policy", policy)
    if admitted:
        assert code == 0 and json.loads(out)["exclusive"]
        return
    assert code == 1 and "Resources cannot be allocated with Topology locality" in err
    assert not (tmp_path / "state").exists() or '"wide"' not in (tmp_path / "state").read_text()


def test_best_effort_allocates_inside_the_merged_affinity(tmp_path):
    """Node 0 has 3 free CPUs (CPU 0 reserved), node 1 has 4: a 4-CPU request fits only node 1, where the merged
    hint puts it; a device on node 0 (--numa-affinity) under restricted makes it wait for a common node."""
    code, out, _err = _allocate(tmp_path, _pod("four", 4), "app", "--topology-manager-policy", "best-effort")
    assert code == 0 and json.loads(out)["cpus"] == "4-7"
    code, out, err = _allocate(tmp_path, _pod("two", 2), "app", "--topology-manager-policy", "restricted",
                               "--numa-affinity", "0")
    assert code == 0 and json.loads(out)["cpus"] == "1-2"


def test_restricted_refuses_when_the_device_node_cannot_hold_the_cpus(tmp_path):
    _allocate(tmp_path, _pod("four", 4), "app")  # takes node 1 (4-7)
    code, _out, err = _allocate(tmp_path, _pod("three", 3), "app", "--topology-manager-policy", "restricted",
                                "--numa-affinity", "1")
    assert code == 1 and "Resources cannot be allocated with Topology locality" in err


def test_what_hints_prints_is_what_merge_reads(tmp_path):
    """The pipe a user builds: ``hints`` for a container, its output straight into ``merge``."""
    topo = tmp_path / "topology.json"
    topo.write_text(json.dumps(generated(2, 2, 2).to_dict()))  # 2 NUMA nodes: CPUs 0-1,4-5 and 2-3,6-7
    code, out, _err = run(["hints", "--topology", str(topo), "--available", "1-3,5-7", "--count", "2"])
    assert code == 0
    printed = tmp_path / "hints.json"
    printed.write_text(out)
    code, out, err = run(["merge", "--policy", "single-numa-node", "--numa-nodes", "0,1", "--hints", str(printed)])
    assert code == 0, err
    assert json.loads(out) == {"numa_affinity": [0], "preferred": True, "admit": True}
