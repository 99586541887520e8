"""The node manager's reconcile pass, allocate and release, on a fake runtime and a fake cgroupfs.

Machine: 2 sockets x 2 cores x 2 threads = 8 CPUs, a NUMA node per socket (CPU g+4t is thread t of core g):
cores {0,4} {1,5} on NUMA 0, {2,6} {3,7} on NUMA 1. One reserved CPU: the kubelet takes core {0,4}... a
single CPU of it, CPU 0.
"""

from __future__ import annotations

import os
from fractions import Fraction

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import KubecpuError, RuntimeUnavailableError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.pod import Container, Pod
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import Topology
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import ManagerOptions
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.manager import NodeManager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroups import CgroupFS
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.container_cache import ContainerCache
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.lock_probe import LockProbe, ProbedRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated_cpus


def node(tmp_path, num_reserved=1, options=None, isolated="", cache_file=False, **policy_options):
    topo = Topology(generated_cpus(2, 2, 2), isolated=CPUSet.parse(isolated))
    runtime = FakeRuntime(str(tmp_path / "cgroup"), "0-7", "0-1")
    policy = new_policy("static", topo, num_reserved, None, policy_options or None)
    store = StateStore(str(tmp_path / "state"), "static")
    cache = ContainerCache(str(tmp_path / "state.containers.json") if cache_file else None)
    manager = NodeManager(topo, policy, store, runtime, cgroups=CgroupFS(str(tmp_path / "cgroup")), cache=cache,
                          options=options or ManagerOptions())
    return manager, runtime


def actions(plan, kind=None):
    return [(a.action, a.container, a.cpus) for a in plan.actions if kind is None or a.action == kind]


def test_guaranteed_container_is_pinned_and_shared_containers_leave_its_cpus(tmp_path):
    manager, rt = node(tmp_path)
    g = rt.add("pod-g", "app", "Guaranteed", 2000)
    b = rt.add("pod-b", "app", "Burstable", 250)
    e = rt.add("pod-e", "app", "BestEffort")
    plan = manager.reconcile()
    assert actions(plan, "allocate") == [("allocate", "app", "1,5")]  # a whole core, lowest first (kubelet packed)
    assert rt.read(g) == "1,5"
    assert rt.read(b) == rt.read(e) == "0,2-4,6-7"
    assert manager.store.load().get("pod-g", "app") == CPUSet.parse("1,5")
    assert plan.changed and not plan.errors


def test_steady_state_is_one_list_call_no_inspect_no_update(tmp_path):
    manager, rt = node(tmp_path)
    for n in range(5):
        rt.add("pod-%d" % n, "app", "Guaranteed" if n % 2 else "Burstable", 1000)
    manager.reconcile()
    plan = manager.reconcile()
    assert plan.runtime_calls == {"list": 1}
    assert not plan.changed and plan.actions == []


def test_a_one_shot_run_remembers_containers_in_the_cache_file(tmp_path):
    manager, rt = node(tmp_path, cache_file=True)
    rt.add("pod-g", "app", "Guaranteed", 1000)
    manager.reconcile()
    again, _rt = node(tmp_path, cache_file=True)
    again.runtime = rt
    rt.calls.clear()
    assert again.reconcile().runtime_calls == {"list": 1}


def test_concurrent_one_shot_runs_share_their_inspections_under_the_lock(tmp_path):
    """Both runs start with an empty cache; the second, waiting for the lock while the first inspects, reads the
    file again once it holds the lock and inspects nothing."""
    first, rt = node(tmp_path, cache_file=True)
    second, _rt = node(tmp_path, cache_file=True)
    second.runtime = rt
    for n in range(3):
        rt.add("pod-%d" % n, "app", "Burstable", 500)
    first.reconcile()
    rt.calls.clear()
    assert second.reconcile().runtime_calls == {"list": 1}


def test_pod_gone_releases_its_cpus_and_shared_containers_get_them_back(tmp_path):
    manager, rt = node(tmp_path)
    rt.add("pod-g", "app", "Guaranteed", 2000)
    b = rt.add("pod-b", "app", "Burstable", 250)
    manager.reconcile()
    rt.remove_pod("pod-g")
    plan = manager.reconcile()
    assert ("release", "app", "1,5") in actions(plan)
    assert rt.read(b) == "0-7"
    assert manager.store.load().entries == {}


def test_restarted_container_keeps_its_cpus(tmp_path):
    manager, rt = node(tmp_path)
    first = rt.add("pod-g", "app", "Guaranteed", 1000)
    manager.reconcile()
    pinned = rt.read(first)
    rt.exit(first, 1)
    second = rt.add("pod-g", "app", "Guaranteed", 1000, attempt=1)
    plan = manager.reconcile()
    assert actions(plan, "allocate") == [] and actions(plan, "release") == []
    assert rt.read(second) == pinned
    assert [(a.action, a.cpus, a.reason) for a in plan.actions] == [
        ("update", pinned, "restarted container keeps its CPUs")]


def test_init_container_cpus_are_reused_by_the_app_container(tmp_path):
    manager, rt = node(tmp_path)
    init = rt.add("pod-g", "init", "Guaranteed", 1000)
    manager.reconcile()
    init_cpus = manager.store.load().get("pod-g", "init")
    rt.exit(init, 0)
    app = rt.add("pod-g", "app", "Guaranteed", 1000)
    manager.reconcile()
    state = manager.store.load()
    assert state.get("pod-g", "app") == init_cpus  # the kubelet's cpusToReuse
    assert state.get("pod-g", "init") == init_cpus  # init entries stay until the pod goes
    assert rt.read(app) == str(init_cpus)


def test_drift_in_cgroupfs_is_corrected(tmp_path):
    manager, rt = node(tmp_path)
    g = rt.add("pod-g", "app", "Guaranteed", 1000)
    manager.reconcile()
    want = rt.read(g)
    rt.write("cpuset", rt.infos[g].cgroup_path, "cpuset.cpus", "0-7")  # someone ran crictl update by hand
    plan = manager.reconcile()
    assert [a.reason for a in plan.actions] == ["exclusive CPUs drifted in cgroupfs (0-7)"]
    assert rt.read(g) == want


def test_not_enough_cpus_is_an_error_and_nothing_is_recorded(tmp_path):
    manager, rt = node(tmp_path)
    big = rt.add("pod-big", "app", "Guaranteed", 8000)
    plan = manager.reconcile()
    assert [e["kind"] for e in plan.errors] == ["allocation"]
    assert "not enough cpus available" in plan.errors[0]["error"]
    assert manager.store.load().entries == {}
    assert rt.read(big) == "0-7"  # it stays in the shared pool


def test_a_full_node_under_strict_reservation_goes_on_releasing_and_refusing(tmp_path):
    """Strict reservation (CPU 0), every other CPU handed out: the file has an empty shared pool, which a kubelet
    refuses to start on; kubecpu, a running manager, still refuses the next container in the kubelet's words and
    gives CPUs back when a pod goes."""
    manager, rt = node(tmp_path, **{"strict-cpu-reservation": "true"})
    three, four = rt.add("pod-3", "app", "Guaranteed", 3000), rt.add("pod-4", "app", "Guaranteed", 4000)
    assert not manager.reconcile().errors
    assert not manager.store.load().default
    one = rt.add("pod-1", "app", "Guaranteed", 1000)
    plan = manager.reconcile()
    assert [e["error"] for e in plan.errors] == [
        "cannot allocate 1 exclusive CPUs for container default/pod-1/app: not enough cpus available to satisfy "
        "request: requested=1, available=0; it stays in the shared pool"]
    assert set(manager.store.load().entries) == {"pod-3", "pod-4"}
    # the refused container keeps what the runtime gave it: the shared pool is empty, nothing to confine it to (the
    # kubelet's reconcile skips a container whose set is empty too)
    assert (rt.read(three), rt.read(four), rt.read(one)) == ("1,4-5", "2-3,6-7", "0-7")
    rt.remove(three)
    assert not manager.reconcile().errors
    assert set(manager.store.load().entries) == {"pod-1", "pod-4"} and rt.read(four) == "2-3,6-7"


def test_container_vanishing_before_its_update_is_skipped_not_an_error(tmp_path):
    manager, rt = node(tmp_path)
    g = rt.add("pod-g", "app", "Guaranteed", 1000)
    b = rt.add("pod-b", "app", "Burstable", 100)
    rt.vanish_on_update.add(b)
    plan = manager.reconcile()
    assert plan.errors == []
    assert [s["container_id"] for s in plan.skipped] == [b]
    assert rt.read(g) == "4"
    assert manager.reconcile().runtime_calls == {"list": 1}  # the next pass recovers: nothing left to do


def test_check_mode_plans_but_changes_nothing(tmp_path):
    manager, rt = node(tmp_path)
    g = rt.add("pod-g", "app", "Guaranteed", 1000)
    plan = manager.reconcile(apply=False)
    assert actions(plan, "allocate") == [("allocate", "app", "4")]  # the free thread of the reserved core first
    assert not os.path.exists(manager.store.path)
    assert rt.read(g) == "0-7" and "update" not in rt.calls


def test_runtime_down_fails_the_pass_and_keeps_the_state(tmp_path):
    manager, rt = node(tmp_path)
    rt.add("pod-g", "app", "Guaranteed", 1000)
    manager.reconcile()
    before = open(manager.store.path, "rb").read()
    rt.down = True
    with pytest.raises(RuntimeUnavailableError):
        manager.reconcile()
    assert open(manager.store.path, "rb").read() == before


def test_allocate_and_release_one_container_are_idempotent(tmp_path):
    manager, rt = node(tmp_path)
    g = rt.add("pod-g", "app", "Burstable", 500)  # not Guaranteed: cpus overrides
    b = rt.add("pod-b", "app", "Burstable", 250)
    plan = manager.allocate_container(container_id=g[:12], cpus=2)
    assert plan.result["exclusive"] and plan.result["cpus"] == "1,5"
    assert rt.read(g) == "1,5" and rt.read(b) == "0,2-4,6-7"
    assert not manager.allocate_container(container_id=g, cpus=2).changed
    plan = manager.release_container(pod_uid="pod-g", container="app")
    assert plan.result["released"] == "1,5"
    assert rt.read(g) == "0-7" and rt.read(b) == "0-7"
    assert not manager.release_container(pod_uid="pod-g", container="app").changed


def test_isolated_cpus_prefer_and_only(tmp_path):
    manager, rt = node(tmp_path, options=ManagerOptions(isolated_cpus="prefer"), isolated="3,7")
    rt.add("pod-g", "app", "Guaranteed", 2000)
    manager.reconcile()
    assert manager.store.load().get("pod-g", "app") == CPUSet.parse("3,7")
    manager, rt = node(tmp_path / "only", options=ManagerOptions(isolated_cpus="only"), isolated="3")
    rt.add("pod-g", "app", "Guaranteed", 2000)
    plan = manager.reconcile()
    assert plan.errors and "not enough cpus" in plan.errors[0]["error"]


def test_align_memory_and_unlimited_quota(tmp_path):
    manager, rt = node(tmp_path, options=ManagerOptions(align_memory=True, cpu_quota="unlimited"))
    g = rt.add("pod-g", "app", "Guaranteed", 1000)
    manager.reconcile()
    assert rt.read(g) == "4"
    assert rt.read(g, "cpuset.mems") == "0"
    assert rt.read(g, "cpu.cfs_quota_us") == "-1"
    pod_quota = os.path.join(str(tmp_path / "cgroup"), "cpu", rt.infos[g].pod_cgroup_path.lstrip("/"),
                             "cpu.cfs_quota_us")
    assert open(pod_quota).read().strip() == "-1"
    manager.release_container(container_id=g)
    assert rt.read(g, "cpu.cfs_quota_us") == "100000"  # restored on release
    assert open(pod_quota).read().strip() == "100000"
    assert rt.read(g, "cpuset.mems") == "0-1"


def test_qos_comes_from_the_pod_sandbox_when_the_container_status_has_no_cgroup(tmp_path):
    manager, rt = node(tmp_path)
    g = rt.add("pod-g", "app", "Guaranteed", 1000)
    rt.parents[g] = rt.infos[g].pod_cgroup_path
    rt.infos[g] = rt.infos[g]._replace(qos="")  # what a runtime without an OCI spec in its info reports
    plan = manager.reconcile()
    assert actions(plan, "allocate") == [("allocate", "app", "4")]
    assert plan.runtime_calls == {"list": 1, "inspect": 1, "inspect_pod": 1, "update": 1}
    assert manager.reconcile().runtime_calls == {"list": 1}  # learned once


def test_topology_manager_refusal_is_reported_and_the_pass_goes_on(tmp_path):
    """single-numa-node: a 5-CPU container cannot sit on one 4-CPU NUMA node; it keeps the shared pool, nothing
    is recorded for it, and the next container is still pinned (inside one NUMA node)."""
    manager, rt = node(tmp_path, options=ManagerOptions(topology_manager_policy="single-numa-node"))
    wide = rt.add("pod-wide", "app", "Guaranteed", 5000)
    small = rt.add("pod-small", "app", "Guaranteed", 2000)
    plan = manager.reconcile()
    assert [e["kind"] for e in plan.errors] == ["allocation"]
    assert "Resources cannot be allocated with Topology locality" in plan.errors[0]["error"]
    assert actions(plan, "allocate") == [("allocate", "app", "1,5")]
    assert manager.store.load().get("pod-wide", "app") is None
    assert rt.read(wide) == "0,2-4,6-7" and rt.read(small) == "1,5"


def test_topology_manager_settings_are_checked(tmp_path):
    with pytest.raises(KubecpuError, match='unknown Topology Manager Policy option: "bogus"'):
        node(tmp_path, options=ManagerOptions(topology_manager_policy="restricted",
                                              topology_manager_options={"bogus": "1"}))
    with pytest.raises(KubecpuError, match="topology_manager_scope must be one of container, pod"):
        node(tmp_path, options=ManagerOptions(topology_manager_scope="node"))


# --- issue 62, finding 2: no lock across a runtime call ------------------------------------------------------------
def probed_node(tmp_path):
    manager, _rt = node(tmp_path)
    probe = LockProbe(manager.store.path)
    manager.runtime = runtime = ProbedRuntime(probe, str(tmp_path / "cgroup"), "0-7", "0-1")
    return manager, runtime, probe


def test_no_runtime_call_is_made_while_the_state_lock_is_held(tmp_path):
    """The review's case: a pass that updates every shared container (a Guaranteed pod created, then deleted) lists,
    inspects and updates with the lock free, so a creation waiting for the lock waits on computation only."""
    manager, rt, probe = probed_node(tmp_path)
    for n in range(6):
        rt.add("pod-s%d" % n, "app", "Burstable", 250)
    rt.add("pod-g", "app", "Guaranteed", 2000)
    manager.reconcile()
    rt.remove_pod("pod-g")
    manager.reconcile()
    assert probe.calls >= 1 + 7 + 6 and probe.held_at == []


class SavedMeanwhile(ProbedRuntime):
    """At its first update, another writer (the OCI hook, say) allocates under the lock and saves the state."""

    def __init__(self, other, *args):
        super().__init__(*args)
        self.other = other
        self.fired = False

    def update(self, container_id, **fields):
        if not self.fired:
            self.fired = True
            self.other()
        return super().update(container_id, **fields)


def test_a_state_saved_while_the_pass_pushes_is_planned_again(tmp_path):
    """A pass gives the CPUs of a deleted pod back to the shared containers, outside the lock. Meanwhile another writer
    allocates two of them (saved under the lock). The pass sees the state file change before its next update, drops
    the updates left and plans again from the saved state: no shared container ends on the new exclusive CPUs."""
    manager, rt = node(tmp_path)
    shared = [rt.add("pod-s%d" % n, "app", "Burstable", 250) for n in range(4)]
    rt.add("pod-g", "app", "Guaranteed", 2000)
    manager.reconcile()
    other, _unused = node(tmp_path)
    model = Pod(uid="pod-h", name="h", namespace="default", init_containers=(),
                containers=(Container("app", Fraction(2), Fraction(2)),), qos="Guaranteed")
    runtime = SavedMeanwhile(lambda: other.allocate_pod(model, "app"), LockProbe(manager.store.path),
                             str(tmp_path / "cgroup"), "0-7", "0-1")
    runtime.listed, runtime.infos = rt.listed, rt.infos
    manager.runtime = runtime
    runtime.remove_pod("pod-g")
    plan = manager.reconcile()
    taken = manager.store.load().get("pod-h", "app")
    assert taken is not None and plan.counts.get("replans", 0) >= 1 and runtime.probe.held_at == []
    for cid in shared:
        assert not CPUSet.parse(runtime.read(cid)).intersection(taken), (runtime.read(cid), taken)
