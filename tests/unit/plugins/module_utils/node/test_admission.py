"""The Topology Manager in front of the CPU policy: no policy passes a device's NUMA node through as a preference;
a policy merges the CPU hints (and the device's) and admits or refuses with the kubelet's text; the what-if report.

Machine: 2 sockets x 2 cores x 2 threads, one NUMA node per socket (NUMA 0 = CPUs 0,1,4,5; NUMA 1 = 2,3,6,7).
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import TopologyAffinityError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.pod import GUARANTEED, Container, Pod
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import Topology
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.admission import Admission
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.plan import Action, Plan
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.what_if import readmission
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated_cpus

TOPO = Topology(generated_cpus(2, 2, 2))


def pod(cpus):
    return Pod(uid="u", name="p", namespace="ns", init_containers=(),
               containers=(Container("c", Fraction(cpus), Fraction(cpus)),), qos=GUARANTEED)


def state(policy, used=""):
    fresh = CPUState("static")
    policy.start(fresh)
    if used:
        fresh.default = fresh.default.difference(CPUSet.parse(used))
        fresh.set("other", "x", CPUSet.parse(used))
    return fresh


def test_without_a_policy_the_device_node_is_a_plain_preference():
    policy = new_policy("static", TOPO, 1)
    assert Admission(TOPO).admit(policy, state(policy), pod(2), "c", [1]) == [1]
    assert Admission(TOPO).admit(policy, state(policy), pod(2), "c", None) is None


@pytest.mark.parametrize("policy_name, used, want", [
    ("single-numa-node", "", [0]),  # the narrowest preferred hint
    ("restricted", "1,4", [1]),  # NUMA 0 has only CPU 5 left: 2 CPUs fit in NUMA 1 only
    ("best-effort", "1-3,5-7", [0, 1]),  # 2 free CPUs, one per node: a non-preferred hint, admitted
])
def test_a_policy_merges_the_cpu_hints(policy_name, used, want):
    policy = new_policy("static", TOPO, 1)
    assert Admission(TOPO, policy_name).admit(policy, state(policy, used), pod(2), "c", None) == want


def test_a_refusal_is_the_kubelets_error_with_the_hints():
    policy = new_policy("static", TOPO, 1)
    with pytest.raises(TopologyAffinityError) as refused:
        Admission(TOPO, "single-numa-node").admit(policy, state(policy, "1-3"), pod(3), "c", None)
    assert str(refused.value).startswith("Resources cannot be allocated with Topology locality (topology manager "
                                         "policy single-numa-node, scope container, CPU hints [0, 1]?")
    with pytest.raises(TopologyAffinityError):  # the device's node and the CPUs' disagree
        Admission(TOPO, "restricted").admit(policy, state(policy, "1,4"), pod(2), "c", [0])


def test_the_none_policy_has_no_preference_and_a_held_container_is_not_admitted_again():
    none = new_policy("none", TOPO)
    assert Admission(TOPO, "single-numa-node").admit(none, CPUState("none"), pod(2), "c", None) is None
    policy = new_policy("static", TOPO, 1)
    held = state(policy, "1,5")
    held.entries["u"] = {"c": CPUSet.parse("1,5")}
    assert Admission(TOPO, "single-numa-node").admit(policy, held, pod(2), "c", [1]) == [1]


def test_the_what_if_report():
    plan = Plan(CPUState("static"))
    plan.actions.append(Action("allocate", "id1", "ns/p", "u", "c", "2-3", "Guaranteed integral request"))
    plan.error(None, "cannot allocate: Resources cannot be allocated with Topology locality (x)", "allocation")
    report = Admission(TOPO, "restricted", "pod").report(plan, [{"reason": "gone"}])
    assert (report["admitted"], report["rejected"], report["topology_manager_scope"]) == (1, 1, "pod")
    admitted = next(r for r in report["containers"] if r["admitted"])
    assert admitted["numa_nodes"] == [1] and admitted["cpus"] == "2-3"
    assert next(r for r in report["containers"] if not r["admitted"])["topology"] is True
    assert report["skipped"] == [{"reason": "gone"}]


def test_the_what_if_keeps_pod_level_cpus_taken(tmp_path):
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.kubelet_versions import kubelet_version
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.manager import NodeManager
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroups import CgroupFS
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.container_cache import ContainerCache
    from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
    from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated

    topo = generated(1, 4, 1)  # 4 single-thread CPUs
    v137 = kubelet_version("1.37", {"PodLevelResourceManagers": True})
    store = StateStore(str(tmp_path / "state"), "static", kubelet=v137)
    store.save(CPUState("static", CPUSet.parse("0,3"), {"p": {"c": CPUSet.parse("1")}},
                        pod_entries={"p": CPUSet.parse("1-2")}, pod_level=True))
    runtime = FakeRuntime(str(tmp_path / "cgroup"), "0-3", "0")
    runtime.add("q", "app", "Guaranteed", 1000)
    manager = NodeManager(topo, new_policy("static", topo, 1, CPUSet.parse("0")), store, runtime,
                          cgroups=CgroupFS(str(tmp_path / "cgroup")), cache=ContainerCache())
    (row,) = [r for r in readmission(manager)["containers"] if r["admitted"]]
    assert row["cpus"] == "3"  # 1 and 2 are the pod-level set of p, 0 is reserved
