"""In-place resize of exclusive CPUs (KEP-5554): up a superset from its own NUMA node first, down a subset that
keeps the baseline, below the baseline refused, to a fractional request back to the shared pool, infeasible kept and
retried; the agent sees a resize in cgroupfs (the kubelet's new quota on the same container); baselines beside the
state file.

Machine: 2 sockets x 2 cores x 2 threads (CPU g+4t is thread t of core g): NUMA 0 = {0,4} {1,5}, NUMA 1 = {2,6}
{3,7}; CPU 0 reserved.
"""

from __future__ import annotations

import json

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import AllocationError, StateError, StoreError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import Topology
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.manager import NodeManager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.resize import BaselineFile, sync_baselines
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroups import CgroupFS
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.cri_units import milli_to_quota
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated_cpus

TOPO = Topology(generated_cpus(2, 2, 2))
POLICY = new_policy("static", TOPO, 1)


def holding(cpus, default=None):
    state = CPUState("static")
    POLICY.start(state)
    state.default = CPUSet.parse(default) if default else state.default.difference(CPUSet.parse(cpus))
    state.set("p", "c", CPUSet.parse(cpus))
    return state


@pytest.mark.parametrize("held, count, baseline, want", [
    ("1", 2, "1", "1,4"),  # up: from its own NUMA node, as the policy packs (4: the free half of a used core)
    ("1,5", 4, "1,5", "1-2,4-5"),  # up: NUMA 0 has only CPU 4 left, then NUMA 1
    ("1-2,5-6", 2, "1,5", "1,5"),  # down to the baseline
    ("1-2,5-6", 3, "1,5", "1-2,5"),  # down: baseline kept, the rest taken as the policy would
    ("1,5", 2, "1,5", "1,5"),
])
def test_resize_keeps_what_it_must(held, count, baseline, want):
    state = holding(held)
    before = state.default.union(state.get("p", "c"))
    cpus = POLICY.resize(state, "p", "c", count, CPUSet.parse(baseline))
    assert str(cpus) == want and state.get("p", "c") == cpus
    assert CPUSet.parse(held).issubset(cpus) or cpus.issubset(CPUSet.parse(held))
    assert state.default.union(cpus) == before and state.default.isdisjoint(cpus)  # nothing lost or doubled
    POLICY.start(state)  # the kubelet would accept the file


def test_below_the_baseline_is_refused_and_infeasible_changes_nothing():
    state = holding("1-2,5-6")
    before = state.copy()
    with pytest.raises(StateError, match="below its baseline 1-2,5-6"):
        POLICY.resize(state, "p", "c", 2, CPUSet.parse("1-2,5-6"))
    with pytest.raises(AllocationError, match="requested=8, available=3"):
        POLICY.resize(state, "p", "c", 12, CPUSet.parse("1,5"))
    assert state == before


def test_baselines_follow_the_assignments_and_a_corrupt_file_is_refused(tmp_path):
    state = holding("1-2,5-6")
    assert sync_baselines({"p": {"c": CPUSet.parse("1,5")}, "gone": {"x": CPUSet.parse("3")}}, state) == {
        "p": {"c": CPUSet.parse("1,5")}}
    assert sync_baselines({}, state) == {"p": {"c": CPUSet.parse("1-2,5-6")}}
    path = tmp_path / "state.baselines.json"
    store = BaselineFile(str(path))
    store.save({"p": {"c": CPUSet.parse("1,5")}})
    assert json.loads(path.read_text()) == {"format": "kubecpu.baselines/v1", "baselines": {"p": {"c": "1,5"}}}
    assert BaselineFile(str(path)).load() == {"p": {"c": CPUSet.parse("1,5")}}
    path.write_text("{")
    with pytest.raises(StoreError, match=r"unreadable .* kept as they are"):
        BaselineFile(str(path)).load()
    assert path.read_text() == "{"


def node(tmp_path, **options):
    runtime = FakeRuntime(str(tmp_path / "cgroup"), "0-7", "0-1")
    manager = NodeManager(TOPO, new_policy("static", TOPO, 1), StateStore(str(tmp_path / "state")), runtime,
                          cgroups=CgroupFS(str(tmp_path / "cgroup")))
    return manager, runtime


def resize(runtime, cid, milli):
    """What the kubelet does: new quota (and shares) on the same container."""
    runtime.write("cpu", runtime.infos[cid].cgroup_path, "cpu.cfs_quota_us", str(milli_to_quota(milli)))


def test_the_agent_follows_a_resize_up_down_to_fractional_and_back(tmp_path):
    manager, runtime = node(tmp_path)
    shared = runtime.add("pod-b", "app", "Burstable", 250)
    pinned = runtime.add("pod-g", "app", "Guaranteed", 1000)
    manager.reconcile()
    assert runtime.read(pinned) == "4" and runtime.read(shared) == "0-3,5-7"  # the pool holds the reserved CPU
    resize(runtime, pinned, 3000)
    plan = manager.reconcile()
    assert [(a.action, a.cpus) for a in plan.actions if a.action == "resize"] == [("resize", "1,4-5")]
    assert runtime.read(pinned) == "1,4-5" and runtime.read(shared) == "0,2-3,6-7"
    assert plan.runtime_calls == {"list": 1, "update": 2}  # seen in cgroupfs: no inspection
    resize(runtime, pinned, 1000)
    manager.reconcile()
    assert runtime.read(pinned) == "4" and manager.store.load().get("pod-g", "app") == CPUSet.parse("4")
    resize(runtime, pinned, 500)
    plan = manager.reconcile()
    assert ("release", "4") in [(a.action, a.cpus) for a in plan.actions]
    assert runtime.read(pinned) == "0-7" and manager.store.load().entries == {}
    resize(runtime, pinned, 2000)
    manager.reconcile()
    assert runtime.read(pinned) == "1,5" and manager.store.load().get("pod-g", "app") == CPUSet.parse("1,5")
    baselines = json.loads((tmp_path / "state.baselines.json").read_text())["baselines"]
    assert baselines == {"pod-g": {"app": "1,5"}}  # a new allocation: a new baseline


def test_an_infeasible_resize_keeps_the_cpus_and_is_retried(tmp_path):
    manager, runtime = node(tmp_path)
    pinned = runtime.add("pod-g", "app", "Guaranteed", 2000)
    manager.reconcile()
    resize(runtime, pinned, 9000)
    for _pass in range(2):
        plan = manager.reconcile()
        (error,) = plan.errors
        assert error["kind"] == "resize" and error["error"].startswith("resize infeasible: container default/pod-g/app")
        assert runtime.read(pinned) == "1,5"
    assert plan.to_dict()["counts"]["errors"] == 1
