"""A lost checkpoint rebuilt from what runs: pinned containers found by their cgroup cpusets (exactly their integral
request, exclusive, no reserved CPU), everything else left to the shared pool and said; the rebuilt file equals
the lost one."""

from __future__ import annotations

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.kubelet_versions import kubelet_version
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.manager import NodeManager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.rebuild import rebuild_node
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroups import CgroupFS
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.container_cache import ContainerCache
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated


def node(tmp_path, policy="static"):
    topo = generated(2, 2, 2)  # 8 CPUs, core g = {g, g + 4}
    runtime = FakeRuntime(str(tmp_path / "cgroup"), "0-7", "0-1")
    built = new_policy(policy, topo, 2 if policy == "static" else 0, CPUSet.parse("0,4") if policy == "static" else None)
    store = StateStore(str(tmp_path / "state"), built.name)
    return NodeManager(topo, built, store, runtime, cgroups=CgroupFS(str(tmp_path / "cgroup")),
                       cache=ContainerCache()), runtime


def test_the_rebuilt_checkpoint_is_the_lost_one(tmp_path):
    manager, runtime = node(tmp_path)
    runtime.add("pod-a", "app", "Guaranteed", 2000)
    runtime.add("pod-b", "db", "Guaranteed", 1000)
    runtime.add("pod-c", "web", "Burstable", 500)
    manager.reconcile()
    lost = manager.read_state()
    assert lost.entries == {"pod-a": {"app": CPUSet.parse("1,5")}, "pod-b": {"db": CPUSet.parse("2")}}
    plan = rebuild_node(manager)
    assert plan.after == lost and plan.errors == []
    assert sorted((a.pod_uid, a.container, a.cpus) for a in plan.actions) == [("pod-a", "app", "1,5"),
                                                                              ("pod-b", "db", "2")]


def test_overlapping_or_reserved_cpusets_are_reported_and_left_to_the_shared_pool(tmp_path):
    manager, runtime = node(tmp_path)
    one = runtime.add("pod-a", "app", "Guaranteed", 1000)
    two = runtime.add("pod-b", "app", "Guaranteed", 1000)
    three = runtime.add("pod-c", "app", "Guaranteed", 1000)
    four = runtime.add("pod-d", "app", "Guaranteed", 2000)  # its cgroup holds 3 CPUs, not its 2
    for cid, cpus in ((one, "3"), (two, "3"), (three, "4"), (four, "5-7")):
        runtime.write("cpuset", runtime.infos[cid].cgroup_path, "cpuset.cpus", cpus)
    plan = rebuild_node(manager)
    assert plan.after.entries == {} and str(plan.after.default) == "0-7"
    assert sorted(e["error"] for e in plan.errors) == [
        "container default/pod-a/app has cpuset 3 but shares CPUs with another container: left to the shared pool",
        "container default/pod-b/app has cpuset 3 but shares CPUs with another container: left to the shared pool",
        "container default/pod-c/app has cpuset 4 but holds reserved CPU(s) 4: left to the shared pool"]


def init_then_app(tmp_path, init_milli, app_milli):
    """pod-a's init container ran (and was pinned) and finished, then its app container was pinned."""
    manager, runtime = node(tmp_path)
    setup = runtime.add("pod-a", "setup", "Guaranteed", init_milli)
    manager.reconcile()
    runtime.exit(setup)
    runtime.add("pod-a", "app", "Guaranteed", app_milli)
    manager.reconcile()
    return manager


def test_a_finished_init_container_gets_its_entry_back_from_the_cpus_its_app_container_reused(tmp_path):
    """(No drain: rebuild.) The kubelet gave the init container 1,5 and the app container reused them: both entries
    are in its checkpoint, and without the init container's the restarted kubelet would allocate two more CPUs for
    it. The rebuilt file is the lost one."""
    manager = init_then_app(tmp_path, 2000, 2000)
    lost = manager.read_state()
    assert lost.entries == {"pod-a": {"setup": CPUSet.parse("1,5"), "app": CPUSet.parse("1,5")}}
    plan = rebuild_node(manager)
    assert plan.after == lost and plan.errors == []
    assert ("pod-a", "setup", "1,5") in [(a.pod_uid, a.container, a.cpus) for a in plan.actions]


def test_an_init_container_that_held_more_than_its_app_containers_is_said_with_what_the_kubelet_will_do(tmp_path):
    manager = init_then_app(tmp_path, 3000, 1000)
    plan = rebuild_node(manager)
    assert plan.after.entries == {"pod-a": {"app": manager.read_state().get("pod-a", "app")}}
    assert [e["error"] for e in plan.errors] == [
        "init container default/pod-a/setup had 3 exclusive CPU(s) and its app containers hold 1: the rest were its "
        "own, which no cgroup shows, so it gets no entry; the kubelet allocates 3 CPU(s) for it afresh when it starts "
        "(and rejects the pod when fewer are free)"]


def test_on_a_kubelet_with_pod_level_resource_managers_the_pod_level_cpus_are_said_not_rebuilt(tmp_path):
    manager, runtime = node(tmp_path)
    manager.store.kubelet = kubelet_version("1.37", {"PodLevelResourceManagers": True})
    runtime.add("pod-a", "app", "Guaranteed", 1000)
    plan = rebuild_node(manager)
    assert [e["error"] for e in plan.errors] == [
        "pod-level exclusive CPUs (podEntries) are not rebuilt: the runtime does not show a pod's pod-level request; "
        "the kubelet allocates them afresh when it admits such a pod again"]


def test_a_none_node_rebuilds_to_the_none_file(tmp_path):
    manager, runtime = node(tmp_path, "none")
    runtime.add("pod-a", "app", "Guaranteed", 1000)
    plan = rebuild_node(manager)
    assert plan.after.policy_name == "none" and plan.after.entries == {} and plan.actions == []


def test_push_brings_every_running_container_to_what_a_state_gives_it(tmp_path):
    manager, runtime = node(tmp_path)
    pinned = runtime.add("pod-a", "app", "Guaranteed", 1000)
    shared = runtime.add("pod-b", "web", "Burstable", 500)
    manager.reconcile()
    state = manager.read_state()
    state.entries = {"pod-a": {"app": CPUSet.parse("3")}}
    state.default = CPUSet.parse("0-2,4-7")
    planned = manager.push(state, apply=False)
    assert runtime.read(pinned) == "1" and len(planned.actions) == 2
    manager.push(state)
    assert (runtime.read(pinned), runtime.read(shared)) == ("3", "0-2,4-7")
    assert manager.push(state).actions == []  # nothing left to do
