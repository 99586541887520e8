"""The system partition (node/partition.py): who is a system pod, the sides of the shared pool, and the warnings with
their figures."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import ManagerOptions
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.partition import (
    Partition, partition_of, shared_pool, shared_target)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.plan import Plan
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.model import (
    EXITED, RUNNING, ContainerInfo, ListedContainer)

from ansible_collections.kubecpu.cpu_manager.tests.unit.support.cri_units import milli_to_shares

RESERVED = CPUSet.parse("0,4")
PARTITION = Partition(RESERVED, ("kube-system",), ("system-node-critical",))


def info(namespace="default", priority=None, milli=100, name="c", pod="p"):
    notes = {} if priority is None else {"priority-class.kubecpu.io": priority}
    return ContainerInfo("id-" + pod + name, pod, pod, namespace, name, 0, "Burstable", "/kubepods/burstable/x",
                         milli_to_shares(milli), -1, 100000, 0, annotations=notes)


@pytest.mark.parametrize("facts, system", [
    (info("kube-system"), True),  # by namespace: the kubelet's label, which the pod does not write
    (info(priority="system-node-critical"), True),  # by its priority class, as its annotation says
    (info(priority=" system-node-critical "), True),
    (info(priority="system-cluster-critical"), False),
    (info(priority=""), False),
    (info("kube-public"), False),
    (info(), False),
])
def test_who_is_a_system_pod(facts, system):
    assert PARTITION.is_system(facts.pod_namespace, facts.annotations) is system


def test_by_namespace_alone_when_no_priority_class_is_chosen():
    alone = Partition(RESERVED, ("kube-system",), ())
    assert not alone.is_system("default", {"priority-class.kubecpu.io": "system-node-critical"})


def state(default):
    found = CPUState("static")
    found.default = CPUSet.parse(default)
    return found


def test_the_sides_of_the_shared_pool():
    pool = state("0,2-4,6-7")
    assert shared_target(PARTITION, info("kube-system"), pool) == RESERVED
    assert shared_target(PARTITION, info(), pool) == CPUSet.parse("2-3,6-7") == shared_pool(PARTITION, pool)
    assert shared_target(None, info("kube-system"), pool) == pool.default == shared_pool(None, pool)  # off
    assert PARTITION.pool(state("0,4")) == RESERVED  # no other shared CPU: the whole pool, never none


def test_off_or_without_reserved_cpus_there_is_no_partition():
    assert partition_of(ManagerOptions(), RESERVED) is None
    assert partition_of(ManagerOptions(system_partition=True), CPUSet()) is None
    found = partition_of(ManagerOptions(system_partition=True, system_namespaces=["kube-system"]), RESERVED)
    assert found == PARTITION


def pair(facts, running=True):
    return ListedContainer(facts.id, "sb", facts.pod_uid, facts.pod_uid, facts.pod_namespace, facts.name, 0,
                           RUNNING if running else EXITED, 1), facts


def test_the_figures_and_a_reserved_set_too_small_for_the_system_pods():
    pairs = [pair(info("kube-system", milli=1500, pod="cni")), pair(info(priority="system-node-critical", milli=1000,
                                                                         pod="exporter")),
             pair(info(milli=4000, pod="web")), pair(info("kube-system", milli=3000, pod="gone"), running=False)]
    plan = Plan(state("0,2-4,6-7"))
    PARTITION.report(plan, pairs, plan.before)
    assert plan.counts == {"system_partition_cpus": 2, "system_partition_containers": 2,
                           "system_partition_request_millicores": 2500}
    assert plan.errors == [{"kind": "partition", "error": (
        "the system partition's 2 containers (pods default/exporter, kube-system/cni) request 2500m of CPU and the "
        "reserved CPUs 0,4 are 2000m: they share them (kept there; reserve more CPUs to give them room)")}]


def test_enough_room_says_nothing_and_no_shared_cpu_beside_them_says_so():
    plan = Plan(state("0,2-4,6-7"))
    PARTITION.report(plan, [pair(info("kube-system", milli=2000))], plan.before)
    assert plan.errors == []
    full = Plan(state("0,4"))
    PARTITION.report(full, [], full.before)
    assert [e["error"] for e in full.errors] == [
        "the shared pool without the reserved CPUs is empty (every other CPU is exclusive): the other shared "
        "containers keep the whole shared pool 0,4"]
