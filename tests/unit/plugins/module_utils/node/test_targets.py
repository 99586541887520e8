"""The cgroup side of a pass: each running container's target (its exclusive set, else the shared pool; memory
nodes and CFS quota with the options) against what cgroupfs shows, and the updates applied in a safe order (pod
quotas first, shared containers shrunk before the pinned ones are pinned)."""

from __future__ import annotations

import pytest

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import Topology
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import ManagerOptions
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.hook_marks import HookMarks
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.plan import Action, Plan
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.targets import CgroupTargets
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroups import CgroupFS
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated_cpus

TOPO = Topology(generated_cpus(2, 2, 2))


def setting(tmp_path, options=None):
    runtime = FakeRuntime(str(tmp_path), "0-7", "0-1")
    pinned = runtime.add("uid-g", "app", "Guaranteed", 2000)
    shared = runtime.add("uid-b", "app", "Burstable", 250)
    state = CPUState("static", CPUSet.parse("0,2-4,6-7"))
    state.set("uid-g", "app", CPUSet.parse("1,5"))
    pairs = [(runtime.listed[c], runtime.infos[c]) for c in (pinned, shared)]
    return CgroupTargets(TOPO, CgroupFS(str(tmp_path)), options or ManagerOptions()), runtime, state, pairs, pinned, shared


def test_targets_are_what_cgroupfs_does_not_show_yet(tmp_path):
    targets, runtime, state, pairs, pinned, shared = setting(tmp_path)
    plan = Plan(state)
    targets.plan(plan, state, pairs)
    assert [(a.container_id, a.cpus, a.reason) for a in plan.actions] == [
        (pinned, "1,5", "exclusive CPUs"), (shared, "0,2-4,6-7", "shared pool is now 0,2-4,6-7 (was 0-7)")]
    targets.apply(plan, runtime)
    assert runtime.read(pinned) == "1,5" and runtime.read(shared) == "0,2-4,6-7" and plan.applied
    again = Plan(state)
    targets.plan(again, state, pairs)
    assert again.actions == []  # cgroupfs now says so


def test_the_shared_are_shrunk_before_the_pinned_are_pinned(tmp_path):
    targets, runtime, state, pairs, pinned, shared = setting(tmp_path)
    order = []
    update = runtime.update
    runtime.update = lambda cid, **kw: order.append(cid) or update(cid, **kw)
    plan = Plan(state)
    targets.plan(plan, state, pairs)
    targets.apply(plan, runtime)
    assert order == [shared, pinned]


def test_memory_nodes_and_quota_with_the_options_and_pod_quotas_first(tmp_path):
    targets, runtime, state, pairs, pinned, shared = setting(
        tmp_path, ManagerOptions(align_memory=True, cpu_quota="unlimited"))
    plan = Plan(state)
    targets.plan(plan, state, pairs)
    shared_update = next(a for a in plan.actions if a.container_id == shared)
    assert (shared_update.mems, shared_update.quota) == (None, None)  # all nodes already; its own quota kept
    pinned_update = next(a for a in plan.actions if a.container_id == pinned)
    assert (pinned_update.mems, pinned_update.quota) == ("0", -1)  # NUMA 0 only, no CFS quota
    pod_quota = next(a for a in plan.actions if a.action == "quota")
    assert (pod_quota.pod_uid, pod_quota.quota, pod_quota.cgroup) == ("uid-g", -1, "/kubepods/poduid-g")
    order = []
    set_quota = targets.cgroups.set_quota
    targets.cgroups.set_quota = lambda path, q, p: order.append("quota") or set_quota(path, q, p)
    update = runtime.update
    runtime.update = lambda cid, **kw: order.append(cid) or update(cid, **kw)
    targets.apply(plan, runtime)
    assert order[0] == "quota" and runtime.read(pinned, "cpu.cfs_quota_us") == "-1"


def test_a_container_gone_before_its_update_is_skipped_and_a_failed_one_is_an_error(tmp_path):
    targets, runtime, state, pairs, pinned, shared = setting(tmp_path)
    runtime.vanish_on_update.add(shared)
    plan = Plan(state)
    targets.plan(plan, state, pairs)
    targets.apply(plan, runtime)
    assert plan.skipped == [{"container_id": shared, "pod": "default/uid-b", "container": "app",
                             "reason": "removed before its update"}]
    assert [a.container_id for a in plan.actions] == [pinned]
    runtime.down = True
    failing = Plan(state)
    runtime.write("cpuset", runtime.infos[pinned].cgroup_path, "cpuset.cpus", "0-7")
    targets.plan(failing, state, pairs[:1])
    targets.apply(failing, runtime)
    assert failing.actions == [] and failing.errors[0]["kind"] == "update"


def test_a_container_the_hook_wrote_is_updated_through_the_runtime_once(tmp_path):
    """The OCI hook wrote a container's cgroup itself: cgroupfs is right, the runtime's record is not. The next pass
    updates it anyway, once, and drops its mark; a mark of a container that is gone is dropped too."""
    targets, runtime, state, pairs, pinned, shared = setting(tmp_path)
    targets = CgroupTargets(TOPO, targets.cgroups, ManagerOptions(), HookMarks(str(tmp_path / "state")))
    runtime.write("cpuset", runtime.infos[pinned].cgroup_path, "cpuset.cpus", "1,5")  # what the hook wrote
    runtime.write("cpuset", runtime.infos[shared].cgroup_path, "cpuset.cpus", "0,2-4,6-7")
    gone = "c" * 64
    targets.marks.mark([pinned, gone])
    targets.forget_except({pinned, shared})
    plan = Plan(state)
    targets.plan(plan, state, pairs)
    assert [(a.container_id, a.cpus, a.reason) for a in plan.actions] == [
        (pinned, "1,5", "the runtime's record of what the OCI hook set")]
    targets.apply(plan, runtime)
    assert runtime.calls["update"] == 1 and targets.marks.pending() == frozenset()
    again = Plan(state)
    targets.plan(again, state, pairs)
    assert again.actions == []


def test_a_defragmentation_pushes_its_moves_in_their_order_through_free_cpus_first(tmp_path):
    runtime = FakeRuntime(str(tmp_path), "0-7", "0-1")
    first = runtime.add("uid-a", "app", "Guaranteed", 1000)
    second = runtime.add("uid-b", "app", "Guaranteed", 1000)
    shared = runtime.add("uid-s", "app", "Burstable", 250)
    runtime.write("cpuset", runtime.infos[first].cgroup_path, "cpuset.cpus", "1")
    runtime.write("cpuset", runtime.infos[second].cgroup_path, "cpuset.cpus", "2")
    state = CPUState("static", CPUSet.parse("0,3-7"))  # a and b swap 1 and 2; a passes through 5 first
    state.set("uid-a", "app", CPUSet.parse("2"))
    state.set("uid-b", "app", CPUSet.parse("1"))
    targets = CgroupTargets(TOPO, CgroupFS(str(tmp_path)), ManagerOptions())
    plan = Plan(state)
    plan.actions += [Action("move", "", "", "uid-a", "app", "5", "defragmentation (was 1)"),
                     Action("move", "", "", "uid-b", "app", "1", "defragmentation (was 2)"),
                     Action("move", "", "", "uid-a", "app", "2", "defragmentation (was 5)")]
    targets.plan(plan, state, [(runtime.listed[c], runtime.infos[c]) for c in (first, second, shared)])
    pushed = []
    update = runtime.update
    runtime.update = lambda cid, **kw: pushed.append((cid, str(kw["cpuset_cpus"]))) or update(cid, **kw)
    targets.apply(plan, runtime)
    # the shared container leaves the CPU a's detour takes before it does, and gets it back once a has left it
    assert pushed == [(shared, "0,3-4,6-7"), (first, "5"), (second, "1"), (first, "2"), (shared, "0,3-7")]
    assert (runtime.read(first), runtime.read(second)) == ("2", "1")


def test_besteffort_idle_on_the_pod_cgroup_only_where_the_kernel_has_cpu_idle(tmp_path):
    """The pod's cgroup gets cpu.idle = 1; the QoS cgroup and the container stay 0 (the kernel refuses a cgroup's
    cpu.weight while it is idle: the kubelet rewrites the QoS cgroup's, the runtime a container's), and a 1 an earlier
    version left there goes back to 0. Turned off, the pod's goes back to 0 too. cgroup v1: nothing."""
    runtime = FakeRuntime(str(tmp_path / "v1"), "0-7", "0-1")
    idle, other = runtime.add("uid-e", "app", "BestEffort"), runtime.add("uid-b", "app", "Burstable", 250)
    pairs = [(runtime.listed[c], runtime.infos[c]) for c in (idle, other)]
    info = runtime.infos[idle]
    qos = info.pod_cgroup_path.rsplit("/", 1)[0]
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpuset cpu\n")
    levels = (qos, info.pod_cgroup_path, info.cgroup_path, runtime.infos[other].cgroup_path)
    for path, value in zip(levels, ("1", "0", "1", "0")):  # QoS and container: what an earlier version wrote
        (v2 / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
        (v2 / path.lstrip("/") / "cpu.idle").write_text(value + "\n")

    def read():
        return [(v2 / path.lstrip("/") / "cpu.idle").read_text().strip() for path in levels]

    state = CPUState("static", CPUSet.parse("0-7"))
    targets = CgroupTargets(TOPO, CgroupFS(str(v2)), ManagerOptions(besteffort_idle=True))
    plan = Plan(state)
    targets.plan(plan, state, pairs)
    assert [(a.cgroup, a.container, a.quota) for a in plan.actions if a.action == "idle"] == [
        (qos, "", 0), (info.pod_cgroup_path, "", 1), (info.cgroup_path, "app", 0)]
    targets.apply(plan, runtime)
    assert read() == ["0", "1", "0", "0"]  # the Burstable container is left alone
    again = Plan(state)
    targets.plan(again, state, pairs)
    assert [a for a in again.actions if a.action == "idle"] == [] and "idle" not in again.to_dict()["counts"]
    off = CgroupTargets(TOPO, CgroupFS(str(v2)), ManagerOptions())
    given_back = Plan(state)
    off.plan(given_back, state, pairs)
    off.apply(given_back, runtime)
    assert read() == ["0", "0", "0", "0"]
    v1 = Plan(state)
    CgroupTargets(TOPO, CgroupFS(str(tmp_path / "v1")), ManagerOptions(besteffort_idle=True)).plan(v1, state, pairs)
    assert [a for a in v1.actions if a.action == "idle"] == []


def v2_tree(tmp_path, runtime, files):
    """A cgroup v2 tree with the containers' cgroups holding ``files`` ({cid: {name: text}})."""
    root = tmp_path / "v2"
    root.mkdir(exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu\n")
    for cid, named in files.items():
        directory = root / runtime.infos[cid].cgroup_path.lstrip("/")
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in named.items():
            (directory / name).write_text(text + "\n")
    return root


@pytest.mark.parametrize("annotation, cpu_max, want", [
    ("20ms", "50000 100000", 20000),  # as asked
    ("80ms", "50000 100000", 50000),  # at most the quota
    ("1500us", "50000 100000", None),  # not a duration kubecpu reads: an error, nothing written
    ("20ms", "max 100000", None),  # no quota: nothing to burst over
])
def test_cpu_burst_from_the_pods_annotation_bounded_by_its_quota(tmp_path, annotation, cpu_max, want):
    runtime = FakeRuntime(str(tmp_path / "v1"), "0-7", "0-1")
    cid = runtime.add("uid-b", "app", "Burstable", 500)
    runtime.infos[cid] = runtime.infos[cid]._replace(annotations={"cpu-burst.kubecpu.io": annotation})
    other = runtime.add("uid-c", "app", "Burstable", 500)  # not annotated: left alone
    root = v2_tree(tmp_path, runtime, {cid: {"cpu.max": cpu_max, "cpu.max.burst": "0"},
                                       other: {"cpu.max": cpu_max, "cpu.max.burst": "0"}})
    pairs = [(runtime.listed[c], runtime.infos[c]) for c in (cid, other)]
    state = CPUState("static", CPUSet.parse("0-7"))
    targets = CgroupTargets(TOPO, CgroupFS(str(root)), ManagerOptions(cpu_burst=True))
    plan = Plan(state)
    targets.plan(plan, state, pairs)
    targets.apply(plan, runtime)
    burst = (root / runtime.infos[cid].cgroup_path.lstrip("/") / "cpu.max.burst").read_text().strip()
    assert burst == str(want or 0)
    assert (root / runtime.infos[other].cgroup_path.lstrip("/") / "cpu.max.burst").read_text().strip() == "0"
    assert [e["kind"] for e in plan.errors] == ([] if annotation != "1500us" else ["annotation"])
    again = Plan(state)
    targets.plan(again, state, pairs)
    assert [a for a in again.actions if a.action == "burst"] == []


def test_a_coming_lower_limit_lowers_the_burst_first(tmp_path):
    """The kernel refuses a cpu.max below the burst (seen on the guest's 6.1): when the quota the runtime is about
    to apply is lower (the NRI plugin's UpdateContainer carries it), the burst comes down to it before."""
    runtime = FakeRuntime(str(tmp_path / "v1"), "0-7", "0-1")
    cid = runtime.add("uid-b", "app", "Burstable", 500)
    runtime.infos[cid] = runtime.infos[cid]._replace(annotations={"cpu-burst.kubecpu.io": "40ms"}, cpu_quota=20000)
    root = v2_tree(tmp_path, runtime, {cid: {"cpu.max": "50000 100000", "cpu.max.burst": "40000"}})
    state = CPUState("static", CPUSet.parse("0-7"))
    targets = CgroupTargets(TOPO, CgroupFS(str(root)), ManagerOptions(cpu_burst=True))
    plan = Plan(state)
    targets.plan(plan, state, [(runtime.listed[cid], runtime.infos[cid])])
    targets.apply(plan, runtime)
    assert (root / runtime.infos[cid].cgroup_path.lstrip("/") / "cpu.max.burst").read_text().strip() == "20000"
