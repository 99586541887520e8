"""A kubelet node reconfigured without a drain: the checkpoint its new configuration accepts, assignments kept byte
for byte where they stay valid, moved (same size, chosen by the new policy) where they collide with the new
reserved set, adopted on none -> static, released on static -> none, and no rewrite at all when a container would
not keep its CPU count. Every file returned passes the kubelet's own start validation (a property over thousands
of generated states and configurations)."""

from __future__ import annotations

import functools
import json

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import StateError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint import decode, empty_file, encode
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.admission import Admission
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.manager import NodeManager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.plan import Plan
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.pod_views import build_views, running_pods
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.what_if import adopt
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.rewrite import rewrite_checkpoint
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroups import CgroupFS
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.container_cache import ContainerCache
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.checkpoints import checkpoint_file
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated
from hypothesis import given, settings
from hypothesis import strategies as st

TOPO = generated(2, 4, 2)  # 16 CPUs: core g is CPUs g and g + 8; socket 0 holds cores 0-3
TEXT = "Resources cannot be allocated with Topology locality"


def static(reserved, **options):
    return new_policy("static", TOPO, len(CPUSet.parse(reserved)), CPUSet.parse(reserved),
                      {k.replace("_", "-"): v for k, v in options.items()} or None)


def read(data, policy="static"):
    return decode(data, policy).state.to_dict()


def test_a_file_the_new_configuration_accepts_is_returned_byte_for_byte():
    data = checkpoint_file("0,2-8,10-15", {"pod-a": {"app": "1,9"}})
    result = rewrite_checkpoint(data, static("0,8", full_pcpus_only="true"))
    assert result.data == data and result.moves == [] and result.unfit == []


def test_an_assignment_on_newly_reserved_cpus_moves_and_the_others_stay():
    data = checkpoint_file("0,3,5-8,11,13-15", {"pod-a": {"app": "1,9"}, "pod-b": {"db": "2,10"}, "pod-c": {"x": "4,12"}})
    result = rewrite_checkpoint(data, static("0-1,8-9"))
    after = read(result.data)
    assert after["entries"]["pod-b"] == {"db": "2,10"} and after["entries"]["pod-c"] == {"x": "4,12"}
    assert [(m.pod_uid, m.container, m.cpus_before, m.cpus_after) for m in result.moves] == [
        ("pod-a", "app", "1,9", "3,11")]  # the next free whole core, as the static policy takes it
    assert "reserved CPU(s) 1,9" in result.moves[0].reason
    assert after["defaultCpuSet"] == "0-1,5-9,13-15"
    static("0-1,8-9").start(decode(result.data, "static").state)


def test_turning_strict_reservation_on_recomputes_the_pool_and_moves_nothing():
    data = checkpoint_file("0,2-8,10-15", {"pod-a": {"app": "1,9"}})
    policy = static("0,8", strict_cpu_reservation="true")
    with pytest.raises(StateError, match="strictly reserved"):
        policy.start(decode(data, "static").state)
    result = rewrite_checkpoint(data, policy)
    assert result.moves == [] and read(result.data)["defaultCpuSet"] == "2-7,10-15"


def test_containers_of_a_pod_that_shared_cpus_share_the_new_ones():
    data = checkpoint_file("0,3-8,11-15", {"pod-a": {"init": "1-2,9-10", "app": "1-2,9-10"}})
    result = rewrite_checkpoint(data, static("0-1,8-9"))
    assert {m.container: m.cpus_after for m in result.moves} == {"init": "2-3,10-11", "app": "2-3,10-11"}
    assert read(result.data)["entries"]["pod-a"] == {"init": "2-3,10-11", "app": "2-3,10-11"}


def test_containers_of_a_pod_whose_cpus_overlap_move_as_one_and_still_overlap_the_same_way():
    """(No drain.) The init container held 1-2,9 and its app container reused 1,9; the new reservation takes CPU 1.
    Moved one by one they would land apart (the init container's entry then holding CPUs no one reuses); they move
    as one group: the app container's new CPUs are still inside the init container's."""
    data = checkpoint_file("0,3-8,10-15", {"pod-a": {"setup": "1-2,9", "app": "1,9"}})
    result = rewrite_checkpoint(data, static("0-1,8"))
    after = decode(result.data, "static").state
    setup, app = after.get("pod-a", "setup"), after.get("pod-a", "app")
    assert (len(setup), len(app)) == (3, 2) and app.issubset(setup) and setup.isdisjoint(CPUSet.parse("0-1,8"))
    assert sorted((m.container, m.cpus_before) for m in result.moves) == [("app", "1,9"), ("setup", "1-2,9")]
    assert {m.container: m.reason for m in result.moves}["app"] == "holds reserved CPU(s) 1"


def test_a_container_that_would_lose_cpus_stops_the_whole_rewrite():
    data = checkpoint_file("0,8", {"pod-a": {"app": "1-7,9-15"}})
    result = rewrite_checkpoint(data, static("0-1,8-9"))
    assert result.data is None and result.moves == []
    reason = "needs 14 CPUs: not enough cpus available to satisfy request: requested=14, available=12"
    assert result.unfit == [{"pod": "pod-a", "container": "app", "reason": reason}]
    assert "nothing is rewritten" in result.reason


def test_the_topology_manager_of_the_new_configuration_places_the_moved_container():
    data = checkpoint_file("0,4-8,12-15", {"pod-a": {"app": "1,9"}, "pod-b": {"db": "2-3,10-11"}})
    admission = Admission(TOPO, "single-numa-node", "container", {})
    result = rewrite_checkpoint(data, static("0-1,8-9"), admission=admission)
    (move,) = result.moves
    assert CPUSet.parse(move.cpus_after).issubset(CPUSet.parse("4-7,12-15"))  # socket 0 has no free core left


def test_a_container_the_new_topology_manager_would_reject_at_the_restart_moves_onto_one_numa_node():
    """(No drain 2.) none -> single-numa-node with pod-x across both NUMA nodes: the old file still restores, but the
    restarted kubelet would reject pod-x (hints from its CPUs alone). The rewrite moves it onto one NUMA node and
    keeps pod-y; the new file passes the same re-admission."""
    data = checkpoint_file("0,3-4,6-8,11-12,14-15", {"pod-x": {"app": "1,5,9,13"}, "pod-y": {"db": "2,10"}})
    admission = Admission(TOPO, "single-numa-node", "container", {})
    result = rewrite_checkpoint(data, static("0,8"), admission=admission)
    (move,) = result.moves
    assert (move.pod_uid, move.cpus_before) == ("pod-x", "1,5,9,13") and "Topology locality" in move.reason
    after = decode(result.data, "static").state
    assert len({TOPO.loc[c][2] for c in after.get("pod-x", "app")}) == 1 and str(after.get("pod-y", "db")) == "2,10"
    assert admission.readmission(static("0,8"), after) == []
    pod_scope = Admission(TOPO, "single-numa-node", "pod", {})
    split = checkpoint_file("0,2-4,6-8,10-12,14-15", {"pod-x": {"a": "1,9", "b": "5,13"}})
    joined = rewrite_checkpoint(split, static("0,8"), admission=pod_scope)  # the pod moves whole, onto one node
    entries = decode(joined.data, "static").state.entries["pod-x"]
    assert len({TOPO.loc[c][2] for cpus in entries.values() for c in cpus}) == 1
    assert {m.container for m in joined.moves} == {"b"} and "Topology locality" in joined.moves[0].reason
    assert pod_scope.judge(static("0,8")).file(joined.data) is None


def test_static_to_none_is_the_none_file_and_every_pinned_container_goes_back_to_all_cpus():
    data = checkpoint_file("0,3-8,11-15", {"pod-a": {"app": "1-2,9-10"}})
    result = rewrite_checkpoint(data, new_policy("none", TOPO))
    assert result.data == empty_file("none") == b'{"policyName":"none","defaultCpuSet":"","checksum":1353318690}'
    assert [(m.container, m.cpus_before, m.cpus_after) for m in result.moves] == [("app", "1-2,9-10", "0-15")]
    none_file = empty_file("none")
    assert rewrite_checkpoint(none_file, new_policy("none", TOPO)).data == none_file  # none to none: unchanged


def _node(tmp_path, reserved):
    topo = generated(2, 2, 2)  # 8 CPUs, cores g = {g, g + 4}
    runtime = FakeRuntime(str(tmp_path / "cgroup"), "0-7", "0-1")
    policy = new_policy("static", topo, len(CPUSet.parse(reserved)), CPUSet.parse(reserved))
    store = StateStore(str(tmp_path / "kubelet_state"), "static", read_only=True)
    manager = NodeManager(topo, policy, store, runtime, cgroups=CgroupFS(str(tmp_path / "cgroup")),
                          cache=ContainerCache())
    return manager, runtime


def test_none_to_static_adopts_the_running_guaranteed_containers_in_creation_order(tmp_path):
    manager, runtime = _node(tmp_path, "0,4")
    runtime.add("pod-1", "app", "Guaranteed", 2000)
    runtime.add("pod-2", "web", "Burstable", 500)
    runtime.add("pod-3", "db", "Guaranteed", 1000)
    runtime.add("pod-4", "half", "Guaranteed", 1500)  # not integral: stays shared
    result = rewrite_checkpoint(empty_file("none"), manager.policy, adopt=functools.partial(adopt, manager))
    assert [(m.pod_uid, m.container, m.cpus_before, m.cpus_after) for m in result.moves] == [
        ("pod-1", "app", "0-7", "1,5"), ("pod-3", "db", "0-7", "2")]
    assert read(result.data) == {"policyName": "static", "defaultCpuSet": "0,3-4,6-7",
                                 "entries": {"pod-1": {"app": "1,5"}, "pod-3": {"db": "2"}}}
    assert result.policy_before == "none" and runtime.calls.get("update", 0) == 0  # only planned


def test_none_to_static_names_what_cannot_be_adopted_and_rewrites_nothing(tmp_path):
    manager, runtime = _node(tmp_path, "0,4")
    runtime.add("pod-1", "big", "Guaranteed", 4000)
    runtime.add("pod-2", "more", "Guaranteed", 4000)
    result = rewrite_checkpoint(empty_file("none"), manager.policy, adopt=functools.partial(adopt, manager))
    assert result.data is None and [u["container"] for u in result.unfit] == ["more"]
    assert "cannot allocate 4 exclusive CPUs" in result.unfit[0]["reason"]


def test_no_rewrite_when_strict_reservation_would_leave_no_shared_cpu():
    data = checkpoint_file("0,8", {"pod-a": {"app": "1-7,9-15"}})
    result = rewrite_checkpoint(data, static("0,8", strict_cpu_reservation="true"))
    assert result.data is None and "default cpuset cannot be empty" in result.reason


def test_none_to_static_needs_the_runtime_and_an_unreadable_file_is_never_guessed(tmp_path):
    assert "no runtime was given" in rewrite_checkpoint(empty_file("none"), static("0,8")).reason
    manager, runtime = _node(tmp_path, "0,4")
    runtime.down = True
    down = rewrite_checkpoint(empty_file("none"), manager.policy, adopt=functools.partial(adopt, manager))
    assert down.data is None and "the runtime cannot list them: container runtime unavailable" in down.reason
    broken = rewrite_checkpoint(b'{"policyName":"static","defaultCpuSet":"0-15","checksum":1}', static("0,8"))
    assert broken.data is None and "checkpoint is corrupted" in broken.reason and "--rebuild" in broken.reason
    fresh = rewrite_checkpoint(None, static("0,8"))
    assert fresh.data is None and fresh.to_dict(None)["possible"] and "fresh" in fresh.reason


@st.composite
def node_states(draw):
    """A valid static checkpoint of TOPO under some reservation, and a new reservation and strictness."""
    old_reserved = CPUSet(draw(st.sets(st.integers(0, 15), min_size=1, max_size=4)))
    old_strict = draw(st.booleans())
    free = sorted(CPUSet.parse("0-15").difference(old_reserved).as_frozenset())
    state = CPUState("static")
    pods = draw(st.integers(0, 5))
    for n in range(pods):
        size = draw(st.integers(1, 3))
        if len(free) < size + 1:
            break
        taken = draw(st.permutations(free))[:size]
        free = [c for c in free if c not in taken]
        state.set("pod-%d" % n, "c", CPUSet(taken))
        if draw(st.booleans()):  # an init container that handed its CPUs over
            state.set("pod-%d" % n, "init", CPUSet(taken))
    everything = CPUSet.parse("0-15").difference(old_reserved if old_strict else CPUSet())
    state.default = everything.difference(state.assigned())
    new_reserved = CPUSet(draw(st.sets(st.integers(0, 15), min_size=1, max_size=6)))
    return state, new_reserved, draw(st.booleans()), draw(st.sampled_from(["none", "single-numa-node"]))


@settings(max_examples=2000, deadline=None)
@given(node_states())
def test_every_rewrite_is_accepted_by_the_new_kubelet_and_keeps_every_count(case):
    state, reserved, strict, tm_policy = case
    data = encode(state)
    policy = static(str(reserved), **({"strict_cpu_reservation": "true"} if strict else {}))
    result = rewrite_checkpoint(data, policy, admission=Admission(TOPO, tm_policy, "container", {}))
    if result.data is None:  # a container would lose CPUs, or no CPU would be left to share
        assert (result.unfit and all(u["pod"] in state.entries for u in result.unfit)) or (
            "default cpuset cannot be empty" in result.reason and strict)
        return
    after = decode(result.data, "static").state
    policy.start(after.copy())  # the kubelet's start validation passes
    moved = {(m.pod_uid, m.container) for m in result.moves}
    for pod, name, cpus in state.assignments():
        now = after.get(pod, name)
        assert now is not None and len(now) == len(cpus)
        assert (now == cpus) != ((pod, name) in moved)  # kept as it was, or moved and said so
        assert now.isdisjoint(policy.reserved)
    owners = {}
    for pod, _name, cpus in after.assignments():
        for cpu in cpus:
            assert owners.setdefault(cpu, pod) == pod  # no CPU is given to two pods
    if not result.moves:  # only the pool changed (a strictness toggle), or nothing at all
        assert json.loads(result.data).get("entries") == json.loads(data).get("entries")


# --- issue 63: the three cases the review reproduced, each asserting the safe outcome --------------------------------

def _numa(cpus):
    return {TOPO.loc[c][2] for c in CPUSet.parse(cpus) if c in TOPO.loc}


def test_pod_scope_single_numa_node_a_pod_is_never_split_across_numa_nodes_by_the_rewrite():
    """Case 1. single-numa-node, scope pod: pod-a holds 1,9 and 2,10 on NUMA 0, pod-f fills the rest of NUMA 0 and the
    reservation grows into pod-a's 1,9. Moving only that container (to NUMA 1, the only room) splits pod-a, and the
    restarted kubelet rejects it: "Resources cannot be allocated with Topology locality". The rewrite moves the
    whole pod onto NUMA 1; pod-f stays."""
    data = checkpoint_file("0,4-8,12-15", {"pod-a": {"a": "1,9", "b": "2,10"}, "pod-f": {"f": "3,11"}})
    policy = static("0-1,8-9")
    admission = Admission(TOPO, "single-numa-node", "pod", {})
    result = rewrite_checkpoint(data, policy, admission=admission)
    after = read(result.data)["entries"]
    assert _numa(after["pod-a"]["a"]) == _numa(after["pod-a"]["b"]) == {1} and after["pod-f"] == {"f": "3,11"}
    assert {m.container for m in result.moves} == {"a", "b"}
    assert "moves with its pod" in {m.container: m.reason for m in result.moves}["b"]
    assert admission.judge(policy).file(result.data) is None
    split = checkpoint_file("0-1,5-9,13-15", {"pod-a": {"a": "4,12", "b": "2,10"}, "pod-f": {"f": "3,11"}})
    refused = admission.judge(policy).file(split)  # what moving one container alone would have written
    assert (refused.pod, refused.container, refused.reason) == ("pod-a", "a, b", TEXT)


def test_a_container_is_never_moved_away_from_its_pinned_memory():
    """Case 2. The Memory Manager (policy Static) pinned pod-m's memory to a NUMA node and the reservation grows into
    pod-m's CPUs. Under single-numa-node the restarted kubelet merges the memory hint with the CPU hint from the CPUs
    pod-m holds: on the other NUMA node they disagree and the pod is rejected. The rewrite places pod-m beside its
    memory (NUMA 1 although NUMA 0 has room and is the one the CPU hints alone prefer); when its memory's node has no
    room, it rewrites nothing and says why: the change needs a drain."""
    policy, admission = static("0,4,8,12"), Admission(TOPO, "single-numa-node", "container", {})
    roomy = checkpoint_file("0,2-3,5-8,10-11,13-15", {"pod-m": {"app": "4,12"}, "pod-x": {"x": "1,9"}})
    memory = {("pod-m", "app"): frozenset({1})}
    placed = rewrite_checkpoint(roomy, policy, admission=admission, memory=memory)
    (move,) = placed.moves
    assert move.pod_uid == "pod-m" and _numa(move.cpus_after) == {1}
    assert admission.judge(policy, memory=memory).file(placed.data) is None
    away = checkpoint_file("0-1,3-4,8-9,11-12", {"pod-m": {"app": "2,10"}, "pod-x": {"x": "5-7,13-15"}})
    assert admission.judge(policy, memory=memory).file(away).reason == TEXT  # CPUs on NUMA 0, memory on 1

    full = checkpoint_file("0,4-8,12-15", {"pod-m": {"app": "1,9"}, "pod-f": {"f": "2-3,10-11"}})
    pinned = {("pod-m", "app"): frozenset({0})}
    refused = rewrite_checkpoint(full, static("0-1,8-9"), admission=admission, memory=pinned)
    assert refused.data is None and [u["container"] for u in refused.unfit] == ["app"]
    assert TEXT in refused.unfit[0]["reason"] and "nothing is rewritten" in refused.reason
    moved = checkpoint_file("0-1,5-9,13-15", {"pod-m": {"app": "4,12"}, "pod-f": {"f": "2-3,10-11"}})
    judged = admission.judge(static("0-1,8-9"), memory=pinned).file(moved)  # what moving it to NUMA 1 would write
    assert "its memory pinned to NUMA node(s) [0]" in str(judged)


def test_adoption_keeps_a_finished_init_container_whose_cpus_its_app_container_reused(tmp_path):
    """Case 3. none -> static: pod-1's init container (2 CPUs) finished, its app container (2 CPUs) runs, pod-2 takes
    the rest. The adopted file holds the init container's entry, the app container's CPUs inside it: the restarted
    kubelet finds both and admits the pod. Without the init entry it would allocate the init container's CPUs
    afresh from no free CPUs and reject pod-1."""
    manager, runtime = _node(tmp_path, "0,4")
    init = runtime.add("pod-1", "init", "Guaranteed", 2000)
    runtime.exit(init)
    runtime.add("pod-1", "app", "Guaranteed", 2000)
    runtime.add("pod-2", "big", "Guaranteed", 4000)
    pods = running_pods(build_views(manager.observe(Plan(CPUState("static")))))
    assert [c.name for c in pods[0].init_containers] == ["init"]
    result = rewrite_checkpoint(empty_file("none"), manager.policy, adopt=functools.partial(adopt, manager), pods=pods)
    entries = read(result.data)["entries"]
    assert entries["pod-1"] == {"init": "1,5", "app": "1,5"} and entries["pod-2"] == {"big": "2-3,6-7"}
    judge = Admission(manager.topology).judge(manager.policy, pods=pods)
    assert judge.file(result.data) is None
    dropped = checkpoint_file("0,4", {"pod-1": {"app": "1,5"}, "pod-2": {"big": "2-3,6-7"}})
    refused = judge.file(dropped)  # the file adoption wrote before: no init entry
    assert (refused.pod, refused.container) == ("pod-1", "init")
    assert refused.reason.startswith("Allocate failed due to not enough cpus available to satisfy request")


def test_device_numa_hints_keep_a_moved_container_beside_its_device():
    """(Issue 63, suspected: confirmed, and fixed.) pod-d's SR-IOV function sits on NUMA 1 (the Device Manager's
    checkpoint) and the reservation grows into pod-d's CPUs. The CPU hints alone prefer NUMA 0, where the restarted
    kubelet's device hint disagrees and it rejects pod-d under single-numa-node; the rewrite places pod-d on NUMA 1."""
    policy, admission = static("0,4,8,12"), Admission(TOPO, "single-numa-node", "container", {})
    data = checkpoint_file("0,2-3,5-8,10-11,13-15", {"pod-d": {"app": "4,12"}, "pod-x": {"x": "1,9"}})
    devices = {("pod-d", "app"): {"example.com/sriov-nic": frozenset({1})}}
    (move,) = rewrite_checkpoint(data, policy, admission=admission, devices=devices).moves
    assert _numa(move.cpus_after) == {1}
    blind = rewrite_checkpoint(data, policy, admission=admission)  # the hints alone: NUMA 0
    assert _numa(blind.moves[0].cpus_after) == {0}
    assert "its devices on NUMA node(s) [1]" in str(admission.judge(policy, devices=devices).file(blind.data))
