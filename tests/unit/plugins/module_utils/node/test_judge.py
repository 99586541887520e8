"""The judge: what the restarted kubelet does with a checkpoint. It validates the file as its start does, then admits
every running pod again in creation order: the Topology Manager merges CPU hints from the CPUs each container holds
(under the pod scope, the pod's together) with the Memory Manager's hint (the NUMA nodes it pinned the memory to),
then the CPU manager allocates (the SMT check first, init containers without an entry afresh). Each refusal names the
pod, the container and the kubelet's text.

Machine: 2 sockets x 4 cores x 2 threads, one NUMA node per socket (NUMA 0 = CPUs 0-3,8-11; NUMA 1 = 4-7,12-15).
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import StateError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint import encode
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.pod import GUARANTEED, Container, Pod
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.admission import Admission
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.judge import Judge, Refusal, checkpoint_pods
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated

TOPO = generated(2, 4, 2)
TEXT = "Resources cannot be allocated with Topology locality"


def static(reserved="0,8", **options):
    return new_policy("static", TOPO, len(CPUSet.parse(reserved)), CPUSet.parse(reserved),
                      {k.replace("_", "-"): v for k, v in options.items()} or None)


def state(default, entries):
    built = CPUState("static", CPUSet.parse(default))
    for (pod, name), cpus in entries.items():
        built.set(pod, name, CPUSet.parse(cpus))
    return built


def container(name, cpus, init=False):
    return Container(name, Fraction(cpus), Fraction(cpus), Fraction(1), Fraction(1), init=init)


SPLIT = state("0,2-4,6-8,10-12,14-15", {("pod-x", "app"): "1,5,9,13"})  # one container over both NUMA nodes
APART = state("0,2-4,6-8,10-12,14-15", {("pod-x", "a"): "1,9", ("pod-x", "b"): "5,13"})  # a pod over both
TOGETHER = state("0,3-8,11-15", {("pod-x", "a"): "1,9", ("pod-x", "b"): "2,10"})

# name, Topology Manager policy, scope, state, memory pinned, (pod, container, text in the reason) or None: accepted
VERDICTS = [
    ("no topology manager admits any placement", "none", "container", SPLIT, {}, None),
    ("single-numa-node rejects a container over two NUMA nodes", "single-numa-node", "container", SPLIT, {},
     ("pod-x", "app", TEXT + ": topology manager policy single-numa-node, scope container, rejects CPUs 1,5,9,13 on "
      "NUMA node(s) [0, 1] when the restarted kubelet admits the pod again")),
    ("restricted rejects it too", "restricted", "container", SPLIT, {}, ("pod-x", "app", "policy restricted")),
    ("best-effort admits it", "best-effort", "container", SPLIT, {}, None),
    ("the container scope admits a pod's containers one NUMA node each", "single-numa-node", "container", APART, {},
     None),
    ("the pod scope rejects a pod over two NUMA nodes", "single-numa-node", "pod", APART, {},
     ("pod-x", "a, b", "scope pod, rejects CPUs 1,5,9,13")),
    ("the pod scope admits a pod on one NUMA node", "single-numa-node", "pod", TOGETHER, {}, None),
    ("memory pinned to the other NUMA node: the hints disagree", "single-numa-node", "container", TOGETHER,
     {("pod-x", "b"): frozenset({1})}, ("pod-x", "b", "its memory pinned to NUMA node(s) [1], when")),
    ("memory pinned where the CPUs are", "single-numa-node", "container", TOGETHER,
     {("pod-x", "a"): frozenset({0}), ("pod-x", "b"): frozenset({0})}, None),
    ("under the pod scope the pod's first pinned container speaks for it", "restricted", "pod", TOGETHER,
     {("pod-x", "b"): frozenset({1})}, ("pod-x", "a, b", "memory hints [1]")),
    ("without a topology manager memory and CPUs may disagree", "none", "container", TOGETHER,
     {("pod-x", "a"): frozenset({1})}, None),
]


NIC = "example.com/sriov-nic"
# name, Topology Manager policy, scope, state, the NUMA nodes of each container's devices, refused as VERDICTS
DEVICES = [
    ("a device on the other NUMA node: the hints disagree", "single-numa-node", "container", TOGETHER,
     {("pod-x", "a"): {NIC: frozenset({1})}}, ("pod-x", "a", "its devices on NUMA node(s) [1], when")),
    ("restricted rejects it too", "restricted", "container", TOGETHER, {("pod-x", "b"): {NIC: frozenset({1})}},
     ("pod-x", "b", "policy restricted")),
    ("a device where the CPUs are", "single-numa-node", "container", TOGETHER, {("pod-x", "a"): {NIC: frozenset({0})}},
     None),
    ("under the pod scope the pod's devices together", "single-numa-node", "pod", TOGETHER,
     {("pod-x", "b"): {NIC: frozenset({1})}}, ("pod-x", "a, b", "its devices on NUMA node(s) [1]")),
    ("best-effort admits what disagrees", "best-effort", "container", TOGETHER,
     {("pod-x", "a"): {NIC: frozenset({1})}}, None),
]


@pytest.mark.parametrize("name,tm_policy,scope,given,devices,refused", DEVICES, ids=[v[0] for v in DEVICES])
def test_device_numa_hints_count_in_the_verdict(name, tm_policy, scope, given, devices, refused):
    """(Issue 63, suspected: confirmed, and fixed.) The restarted kubelet's Device Manager regenerates a container's
    hints from the devices its checkpoint allocated; the judge merges them with the CPU hints."""
    found = Admission(TOPO, tm_policy, scope, {}).judge(static(), devices=devices).verdict(given)
    if refused is None:
        assert found is None
        return
    pod, name, text = refused
    assert (found.pod, found.container, found.reason) == (pod, name, TEXT) and text in str(found)


@pytest.mark.parametrize("name,tm_policy,scope,given,memory,refused", VERDICTS, ids=[v[0] for v in VERDICTS])
def test_the_restarted_kubelet_admits_the_running_pods_again(name, tm_policy, scope, given, memory, refused):
    judge = Admission(TOPO, tm_policy, scope, {}).judge(static(), memory=memory)
    found = judge.verdict(given)
    if refused is None:
        assert found is None and judge.file(encode(given)) is None
        return
    pod, name, text = refused
    assert (found.pod, found.container) == (pod, name) and text in str(found)
    assert judge.file(encode(given)) == found  # the file as the kubelet reads it: the same verdict


def test_a_file_the_kubelet_does_not_start_on_is_refused_in_its_words():
    judge = Admission(TOPO).judge(static())
    missing = state("1-7,9-15", {})
    assert judge.verdict(missing) == Refusal("", "", 'not all reserved cpus: "0,8" are present in defaultCpuSet: '
                                                     '"1-7,9-15"')
    refused = judge.file(b'{"policyName":"static","defaultCpuSet":"0-15","checksum":1}')
    assert refused.pod == "" and refused.reason == "could not restore state from checkpoint: checkpoint is corrupted"
    with pytest.raises(StateError, match=r"kubelet_state: the restarted kubelet would refuse this checkpoint .*drain"):
        judge.check(missing, "kubelet_state")


def test_an_init_container_without_its_entry_is_allocated_afresh_and_rejected_when_too_few_are_free():
    """The app container reused the init container's CPUs 1,9; the file lacks the init entry and nothing is free:
    the restarted kubelet allocates the init container's 2 CPUs afresh and rejects the pod."""
    full = state("0,8", {("pod-1", "app"): "1,9", ("pod-2", "big"): "2-7,10-15"})
    pods = [Pod("pod-1", "one", "ns", (container("init", 2, init=True),), (container("app", 2),), GUARANTEED),
            Pod("pod-2", "two", "ns", (), (container("big", 12),), GUARANTEED)]
    judge = Admission(TOPO).judge(static(), pods=pods)
    assert judge.verdict(full) == Refusal(
        "pod-1", "init", "Allocate failed due to not enough cpus available to satisfy request: requested=2, "
        "available=0, which is unexpected", "UnexpectedAdmissionError when the restarted kubelet admits the pod again")
    with_init = state("0,8", {("pod-1", "init"): "1,9", ("pod-1", "app"): "1,9", ("pod-2", "big"): "2-7,10-15"})
    assert judge.verdict(with_init) is None
    roomy = state("0,3,8,11", {("pod-1", "app"): "1,9", ("pod-2", "big"): "2,4-7,10,12-15"})
    assert judge.verdict(roomy) is None  # enough free CPUs: the fresh allocation succeeds, the pod is admitted


def test_full_pcpus_only_checks_the_free_physical_cpus_before_it_finds_the_held_ones():
    """ALGORITHM.md 7.1: the SMT check runs before the "already allocated" check, so a node whose shared pool has no
    free whole core rejects a pinned pod again at the restart."""
    full = state("0,8", {("pod-1", "app"): "1-7,9-15"})
    refused = Admission(TOPO).judge(static(full_pcpus_only="true")).verdict(full)
    assert (refused.pod, refused.container) == ("pod-1", "app")
    assert refused.reason == ("SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 0, "
                              "requested CPUs = 14, CPUs per core = 2")


def test_a_rejected_pod_allocates_nothing_and_the_next_pods_are_admitted():
    given = state("0,3-8,11-15", {("pod-a", "app"): "1,9", ("pod-b", "app"): "2,10"})
    pods = [Pod("pod-a", "a", "ns", (), (container("app", 4),), GUARANTEED),  # holds 2 of its 4: hints []
            Pod("pod-b", "b", "ns", (), (container("app", 2),), GUARANTEED)]
    judge = Admission(TOPO, "restricted").judge(static(), pods=pods)
    assert [(r.pod, r.container) for r in judge.readmission(given)] == [("pod-a", "app")]


def test_the_checkpoint_alone_shows_its_pods_with_the_largest_of_overlapping_containers_long_running():
    given = state("0,4-8,12-15", {("p", "setup"): "1-3,9", ("p", "app"): "1,9", ("p", "side"): "10-11"})
    (pod,) = checkpoint_pods(given)
    assert [c.name for c in pod.init_containers] == ["app"] and [c.name for c in pod.containers] == ["setup", "side"]
    assert pod.guaranteed_pod_cpus() == len(given.entries["p"]["setup"].union(given.entries["p"]["side"]))
    assert Judge(static()).verdict(given) is None
