"""Defragmentation: what a node can still admit (per alignment); the moves that reach the best packing (the largest
single-NUMA whole-core request, then the free whole cores) with the fewest containers moved, equal to an exhaustive
search on real CPU sets and proven; none on a node already optimal; whole cores kept whole under full-pcpus-only;
at most max_moves; made live through the runtime, state first; and over generated states, every plan valid: the
kubelet's start accepts it, every container keeps its CPU count, no CPU is held by two at any step."""

from __future__ import annotations

import itertools
import random

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError, ContainerRuntimeError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import PolicyError, StateError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.options import parse_options
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import Topology
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import ManagerOptions
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.manager import NodeManager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations import defrag
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.defrag import (Limits, defrag_config,
                                                                                            defrag_node, headroom,
                                                                                            plan_defrag, plan_greedy)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroups import CgroupFS
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.container_cache import ContainerCache
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.model import CREATED
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated, generated_cpus
from hypothesis import given, settings
from hypothesis import strategies as st

TWO_NUMA = generated(2, 2, 2)  # 8 CPUs: core g = {g, g + 4}; cores 0-1 on socket/NUMA 0, cores 2-3 on 1
NO_OPTIONS = parse_options(None)


def state(default, **entries):
    built = CPUState("static", CPUSet.parse(default))
    for key, cpus in entries.items():
        pod, _sep, name = key.partition("_")
        built.set(pod, name, CPUSet.parse(cpus))
    return built


@pytest.mark.parametrize("free, want", [
    ("0-7", {"free_cpus": 8, "free_whole_cores": 4, "largest_full_pcpus_only": 8, "largest_single_numa": 4,
             "largest_single_socket": 4, "largest_single_numa_whole_cores": 4}),
    ("2-3,5,7", {"free_cpus": 4, "free_whole_cores": 1, "largest_full_pcpus_only": 2, "largest_single_numa": 3,
                 "largest_single_socket": 3, "largest_single_numa_whole_cores": 2}),
    ("", {"free_cpus": 0, "free_whole_cores": 0, "largest_full_pcpus_only": 0, "largest_single_numa": 0,
          "largest_single_socket": 0, "largest_single_numa_whole_cores": 0}),
])
def test_headroom_per_alignment(free, want):
    assert headroom(TWO_NUMA, CPUSet.parse(free)) == want


def test_one_move_completes_a_half_used_core_and_frees_a_whole_numa_node():
    before = state("0,2-5,7", a_app="1", b_db="6")  # reserved core 0; a and b each hold half a core
    found = plan_defrag(TWO_NUMA, NO_OPTIONS, before, CPUSet.parse("0,4"))
    assert [(m.pod_uid, m.containers, str(m.cpus_before), str(m.cpus_after)) for m in found.moves] == [
        ("b", ("db",), "6", "5")]
    assert found.before["largest_single_numa_whole_cores"] == 2 and found.after["largest_single_numa_whole_cores"] == 4
    assert (found.before["free_whole_cores"], found.after["free_whole_cores"]) == (1, 2)
    assert found.state.to_dict() == {"policyName": "static", "defaultCpuSet": "0,2-4,6-7",
                                     "entries": {"a": {"app": "1"}, "b": {"db": "5"}}}
    new_policy("static", TWO_NUMA, 2, CPUSet.parse("0,4")).start(found.state.copy())
    assert before.to_dict()["entries"]["b"] == {"db": "6"}  # the input is not changed


def test_a_node_already_optimal_gets_no_move():
    found = plan_defrag(TWO_NUMA, NO_OPTIONS, state("0,2-4,6-7", a_app="1", b_db="5"), CPUSet.parse("0,4"))
    assert found.moves == [] and found.before == found.after


def test_full_pcpus_only_moves_whole_cores_only_and_a_pod_sharing_cpus_moves_together():
    topo = generated(1, 4, 2, numa_per_socket=2)  # cores 0-1 on NUMA 0, 2-3 on NUMA 1; core g = {g, g + 4}
    before = state("0-1,3-5,7", c_init="2,6", c_app="2,6")
    found = plan_defrag(topo, parse_options({"full-pcpus-only": "true"}), before, CPUSet.parse("0,4"))
    assert [(m.containers, str(m.cpus_after)) for m in found.moves] == [(("app", "init"), "1,5")]
    assert found.after["largest_single_numa_whole_cores"] == 4


def _node(tmp_path):
    runtime = FakeRuntime(str(tmp_path / "cgroup"), "0-7", "0-1")
    policy = new_policy("static", TWO_NUMA, 2, CPUSet.parse("0,4"))
    return NodeManager(TWO_NUMA, policy, StateStore(str(tmp_path / "state"), "static"), runtime,
                       cgroups=CgroupFS(str(tmp_path / "cgroup")), cache=ContainerCache()), runtime


def test_live_defragmentation_state_first_then_cpusets(tmp_path):
    manager, runtime = _node(tmp_path)
    a = runtime.add("a", "app", "Guaranteed", 1000)
    b = runtime.add("b", "db", "Guaranteed", 1000)
    shared = runtime.add("c", "web", "Burstable", 500)
    manager.reconcile()
    fragmented = state("0,2-5,7", a_app="1", b_db="6")
    manager.store.save(fragmented)
    manager.push(fragmented)
    check = defrag_node(manager, apply=False)
    assert [(x.action, x.container, x.cpus) for x in check.actions if x.action == "move"] == [("move", "db", "5")]
    assert manager.read_state() == fragmented and runtime.read(b) == "6"
    done = defrag_node(manager)
    assert manager.read_state().entries == {"a": {"app": CPUSet.parse("1")}, "b": {"db": CPUSet.parse("5")}}
    assert (runtime.read(a), runtime.read(b), runtime.read(shared)) == ("1", "5", "0,2-4,6-7")
    assert done.result["after"]["free_whole_cores"] == 2
    assert [x.action for x in defrag_node(manager).actions] == []  # nothing left to do


def test_a_check_writes_nothing_not_even_the_container_cache(tmp_path):
    manager, runtime = _node(tmp_path)
    manager.cache = ContainerCache(str(tmp_path / "state.containers.json"))
    runtime.add("a", "app", "Guaranteed", 1000)
    manager.reconcile()
    fragmented = state("0,2-5,7", a_app="1", b_db="6")
    manager.store.save(fragmented)
    runtime.add("b", "db", "Guaranteed", 1000)  # a container the cache has not seen: a pass would write it
    files = {name: (tmp_path / name).read_bytes() for name in ("state", "state.containers.json")}
    assert "move" in [x.action for x in defrag_node(manager, apply=False).actions]
    assert {name: (tmp_path / name).read_bytes() for name in files} == files


def test_live_moves_are_pushed_in_an_order_that_never_pins_a_cpu_twice(tmp_path):
    """24 CPUs (core g = {g, g + 12}, NUMA 0 = cores 0-5), reserved 0,12, 4 CPUs free: the best packing exchanges two
    3-CPU containers between the NUMA nodes, one taking a CPU the other leaves: pushed the other way round, that CPU
    would be pinned to both."""
    topo = generated(2, 6, 2)
    held = {"u0": "4", "u1": "6", "u2": "14,22", "u3": "5", "u4": "16,19", "u5": "2", "u6": "3,21,23",
            "u7": "8,10,17", "u8": "13,20", "u9": "1,7"}
    runtime = FakeRuntime(str(tmp_path / "cgroup"), "0-23", "0-1")
    policy = new_policy("static", topo, 2, CPUSet.parse("0,12"))
    manager = NodeManager(topo, policy, StateStore(str(tmp_path / "state"), "static"), runtime,
                          cgroups=CgroupFS(str(tmp_path / "cgroup")), cache=ContainerCache())
    ids = {uid: runtime.add(uid, "app", "Guaranteed", 1000 * len(CPUSet.parse(cpus))) for uid, cpus in held.items()}
    before = state("0,9,11-12,15,18", **{uid + "_app": cpus for uid, cpus in held.items()})
    manager.store.save(before)
    manager.push(before)
    pinned = {ids[uid]: CPUSet.parse(cpus) for uid, cpus in held.items()}
    update = runtime.update

    def watched(cid, **kw):  # every push leaves each CPU to one container at most
        if cid in pinned:
            pinned[cid] = kw["cpuset_cpus"]
            taken = [cpu for cpus in pinned.values() for cpu in cpus]
            assert len(taken) == len(set(taken)), "a CPU pinned twice after pushing %s to %s" % (cid, kw)
        return update(cid, **kw)
    runtime.update = watched
    done = defrag_node(manager)
    moves = [a for a in done.actions if a.action == "move"]
    assert [a.pod_uid for a in moves] == ["u7", "u6"] and "17" in moves[0].reason  # u6 goes where u7 was
    assert done.result["proven_best"] and done.result["after"]["largest_single_numa_whole_cores"] == 4
    after = manager.read_state()
    for uid, cid in ids.items():
        assert runtime.read(cid) == str(after.get(uid, "app"))


def test_the_none_policy_has_nothing_to_defragment(tmp_path):
    runtime = FakeRuntime(str(tmp_path / "cgroup"), "0-7", "0-1")
    manager = NodeManager(TWO_NUMA, new_policy("none", TWO_NUMA), StateStore(str(tmp_path / "s"), "none"), runtime)
    with pytest.raises(PolicyError, match="the none policy has none"):
        defrag_node(manager)


BIG = generated(2, 8, 2, numa_per_socket=2)  # 32 CPUs, 4 NUMA nodes


@st.composite
def fragmented(draw):
    reserved = CPUSet.parse("0,16")
    free = sorted(set(range(32)) - {0, 16})
    built = CPUState("static")
    for n in range(draw(st.integers(0, 12))):
        size = draw(st.sampled_from([1, 1, 2, 3, 4]))
        if len(free) < size + 1:
            break
        taken = draw(st.permutations(free))[:size]
        free = [c for c in free if c not in taken]
        built.set("pod-%d" % n, "c", CPUSet(taken))
    built.default = CPUSet(free).union(reserved)
    return built, reserved


def replay(before, found):
    """The state after each move in turn: each starts from the container's CPUs and no CPU is held by two."""
    current = {(pod, name): cpus for pod, name, cpus in before.assignments()}
    for move in found.moves:
        for name in move.containers:
            assert current[(move.pod_uid, name)] == move.cpus_before
            current[(move.pod_uid, name)] = move.cpus_after
        owners = {}
        for (pod, _name), cpus in current.items():
            for cpu in cpus:
                assert owners.setdefault(cpu, pod) == pod, "CPU %d held by %s and %s" % (cpu, owners[cpu], pod)
    return current


@settings(max_examples=200, deadline=None)
@given(fragmented())
def test_every_plan_is_valid_keeps_sizes_and_only_improves(case):
    before, reserved = case
    found = plan_defrag(BIG, NO_OPTIONS, before, reserved, budget=0.05)
    new_policy("static", BIG, 2, reserved).start(found.state.copy())
    score = (found.before["largest_single_numa_whole_cores"], found.before["free_whole_cores"])
    after = (found.after["largest_single_numa_whole_cores"], found.after["free_whole_cores"])
    assert after > score if found.moves else after == score
    final = replay(before, found)
    assert final == {(pod, name): cpus for pod, name, cpus in found.state.assignments()}
    for pod, name, cpus in before.assignments():
        assert len(found.state.get(pod, name)) == len(cpus)
    assert not found.state.default & CPUSet().union(*final.values())


# The issue's node: 16 CPUs, CPU c and c + 8 siblings, NUMA 0 = cores 0-3, NUMA 1 = cores 4-7, reserved 0,8.
ISSUE_TOPO = generated(2, 4, 2)


def test_the_issue_node_reaches_four_whole_cores_on_one_numa_node_where_the_greedy_search_stops_at_three():
    before = state("0-2,4-6,8-11,14", a_app="3,13", b_app="12,15", c_app="7")
    found = plan_defrag(ISSUE_TOPO, NO_OPTIONS, before, CPUSet.parse("0,8"))
    assert sorted(m.pod_uid for m in found.moves) == ["a", "b", "c"] and found.proven_best
    assert found.after["largest_single_numa_whole_cores"] == 8 and found.after["free_whole_cores"] == 4
    assert set().union(*(m.cpus_after for m in found.moves)) <= set(CPUSet.parse("1-3,9-11"))
    assert found.to_dict()["proven_best"] and found.to_dict()["planner"] == "exact"
    assert found.to_dict()["containers_moved"] == 3
    greedy = plan_greedy(ISSUE_TOPO, NO_OPTIONS, before, CPUSet.parse("0,8"))
    assert greedy.after["largest_single_numa_whole_cores"] == 6 and greedy.planner == "greedy"
    replay(before, found)


def test_max_moves_gives_the_best_packing_those_moves_reach():
    before = state("0-2,4-6,8-11,14", a_app="3,13", b_app="12,15", c_app="7")
    found = plan_defrag(ISSUE_TOPO, NO_OPTIONS, before, CPUSet.parse("0,8"), max_moves=1)
    assert len(found.moves) == 1 and found.proven_best
    assert found.after["largest_single_numa_whole_cores"] == 6  # one move reaches 3 whole cores on NUMA 0


def _whole_after(topo, node_cpus, avail, incoming):
    """The free whole cores of a NUMA node with free CPUs ``avail`` once ``incoming`` CPUs are placed on it, tried
    on every choice of CPUs (None: they do not fit)."""
    if incoming > len(avail):
        return None
    cores = {}
    for cpu in node_cpus:
        cores.setdefault(topo.loc[cpu][0], set()).add(cpu)
    return max(sum(1 for members in cores.values() if members <= avail - set(taken))
               for taken in itertools.combinations(sorted(avail), incoming))


def best_packing(topo, reserved, units):
    """The best (most whole cores on one NUMA node, whole cores) of every set of units that stay and every split
    of the others between the two NUMA nodes (each moved unit on one node), by trying them all."""
    nodes = [set(topo.numa_cpus[n]) - set(reserved) for n in sorted(topo.numa_cpus)]
    best = None
    for stays in itertools.product((True, False), repeat=len(units)):
        held = set().union(*(u for u, stay in zip(units, stays) if stay))
        lifted = [len(u) for u, stay in zip(units, stays) if not stay]
        for sides in itertools.product((0, 1), repeat=len(lifted)):
            amounts = [sum(size for size, side in zip(lifted, sides) if side == n) for n in (0, 1)]
            wholes = [_whole_after(topo, topo.numa_cpus[n], nodes[n] - held, amounts[n]) for n in (0, 1)]
            if None not in wholes:
                best = max(best or (0, 0), (max(wholes), sum(wholes)))
    return best


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 3), st.integers(0, 10 ** 6), st.floats(0.4, 0.9))
def test_the_plan_reaches_the_best_packing_of_an_exhaustive_search(cores, seed, fill):
    topo = generated(2, cores, 2)
    reserved = CPUSet([0, 2 * cores])
    rng = random.Random(seed)
    free = sorted(set(topo.all_cpus) - set(reserved))
    rng.shuffle(free)
    before, units = CPUState("static"), []
    while len(free) > len(topo.all_cpus) * (1 - fill) and len(units) < 6:
        size = min(rng.choice([1, 2, 3]), len(free))
        units.append(frozenset(free[:size]))
        free = free[size:]
        before.set("pod-%d" % len(units), "c", CPUSet(units[-1]))
    before.default = CPUSet(free).union(reserved)
    found = plan_defrag(topo, NO_OPTIONS, before, reserved)
    threads = topo.cpus_per_core
    assert found.proven_best
    assert (found.after["largest_single_numa_whole_cores"] // threads, found.after["free_whole_cores"]) == \
        best_packing(topo, reserved, units)
    replay(before, found)


def test_a_time_budget_must_be_positive_and_bounded():
    for budget in (0, -1, 601, True, "1"):
        with pytest.raises(ConfigError, match="time_budget must be more than 0"):
            defrag_config(None, check=True, budget=budget)


def test_max_moves_must_be_a_whole_number_not_negative():
    for moves in (-1, -78299255392, True, 1.5, "2"):  # -78299255392: hypothesis found the exact search looping on it
        with pytest.raises(ConfigError, match="max_moves must be a whole number, 0 or more"):
            defrag_config(None, check=True, max_moves=moves)


def test_plan_defrag_called_with_a_negative_cap_moves_nothing():
    before = state("0-2,4-6,8-11,14", a_app="3,13", b_app="12,15", c_app="7")
    assert plan_defrag(ISSUE_TOPO, NO_OPTIONS, before, CPUSet.parse("0,8"), max_moves=-5).moves == []


def test_pod_level_cpus_stay_where_they_are_and_count_as_taken():
    before = state("0,2-5,7", a_app="1", b_db="6")
    before.pod_entries = {"b": CPUSet.parse("6")}  # b's CPUs are a pod-level set (kubelet 1.36+): not moved
    found = plan_defrag(TWO_NUMA, NO_OPTIONS, before, CPUSet.parse("0,4"))
    assert [m.pod_uid for m in found.moves] in ([], ["a"]) and found.state.pod_entries == before.pod_entries
    assert found.state.get("b", "db") == CPUSet.parse("6")


def test_the_search_runs_outside_the_lock_and_its_moves_are_taken_only_on_the_state_it_saw(tmp_path, monkeypatch):
    """(Defragmentation 5.) The OCI hook and the NRI plugin never wait for a search: it runs on a copy of the state
    with the lock free. A container that comes meanwhile (here: the hook allocates during the first search) makes
    the moves of that search void; the next search sees it."""
    manager, runtime = _node(tmp_path)
    runtime.add("a", "app", "Guaranteed", 1000)
    runtime.add("b", "db", "Guaranteed", 1000)
    manager.reconcile()
    fragmented = state("0,2-5,7", a_app="1", b_db="6")
    manager.store.save(fragmented)
    manager.push(fragmented)
    real, searched = defrag.plan_defrag, []

    def search(topo, options, seen, reserved, max_moves=None, *, budget, limits):
        with StateStore(manager.store.path, lock_timeout=0.1).locked():  # free: nobody holds it during a search
            if not searched:
                late = seen.copy()
                late.set("h", "app", CPUSet.parse("3"))
                late.default = late.default.difference(CPUSet.parse("3"))
                manager.store.save(late)  # the hook allocated meanwhile
        searched.append(seen)
        return real(topo, options, seen, reserved, max_moves, budget=budget, limits=limits)

    monkeypatch.setattr(defrag, "plan_defrag", search)
    done = defrag_node(manager)
    assert len(searched) == 2 and "h" not in searched[0].entries and "h" in searched[1].entries
    assert manager.read_state().get("h", "app") == CPUSet.parse("3")  # the hook's entry stands
    assert done.result["moves"]


def test_a_state_that_keeps_changing_under_the_search_moves_nothing_and_says_so(tmp_path, monkeypatch):
    manager, runtime = _node(tmp_path)
    runtime.add("a", "app", "Guaranteed", 1000)
    manager.reconcile()
    real = manager.read_state

    def changing():
        seen = real()
        moved = seen.copy()
        moved.default = moved.default.difference(CPUSet.parse("7"))
        moved.set("x%d" % len(moved.entries), "app", CPUSet.parse("7"))
        return moved  # what the search sees is never what the lock finds

    monkeypatch.setattr(manager, "read_state", changing)
    before = open(manager.store.path, "rb").read()
    with pytest.raises(StateError, match="changed during each of 3 searches"):
        defrag_node(manager)
    assert open(manager.store.path, "rb").read() == before


def test_a_created_container_not_started_yet_moves_with_its_entry(tmp_path):
    """(Defragmentation 4.) Its entry moves, so its cpuset does: else it would start on CPUs another now holds."""
    manager, runtime = _node(tmp_path)
    runtime.add("a", "app", "Guaranteed", 1000)
    b = runtime.add("b", "db", "Guaranteed", 1000, state=CREATED)
    fragmented = state("0,2-5,7", a_app="1", b_db="6")
    manager.store.save(fragmented)
    manager.push(fragmented)
    runtime.write("cpuset", runtime.infos[b].cgroup_path, "cpuset.cpus", "6")
    defrag_node(manager)
    assert manager.read_state().get("b", "db") == CPUSet.parse("5") and runtime.read(b) == "5"


HELD = {"u0": "4", "u1": "6", "u2": "14,22", "u3": "5", "u4": "16,19", "u5": "2", "u6": "3,21,23",
        "u7": "8,10,17", "u8": "13,20", "u9": "1,7"}


def held_node(tmp_path):
    """The node of the test above (24 CPUs, reserved 0,12, ``HELD`` pinned) with a shared container ``web``, its state
    saved and pushed: the manager, the runtime, the containers' IDs by pod, web's ID, the state."""
    topo = generated(2, 6, 2)
    runtime = FakeRuntime(str(tmp_path / "cgroup"), "0-23", "0-1")
    policy = new_policy("static", topo, 2, CPUSet.parse("0,12"))
    manager = NodeManager(topo, policy, StateStore(str(tmp_path / "state"), "static"), runtime,
                          cgroups=CgroupFS(str(tmp_path / "cgroup")), cache=ContainerCache())
    ids = {uid: runtime.add(uid, "app", "Guaranteed", 1000 * len(CPUSet.parse(cpus))) for uid, cpus in HELD.items()}
    web = runtime.add("web", "app", "Burstable", 500)
    before = state("0,9,11-12,15,18", **{uid + "_app": cpus for uid, cpus in HELD.items()})
    manager.store.save(before)
    manager.push(before)
    return manager, runtime, ids, web, before


def watch(runtime, ids, web, refused=None, held=None):
    """Every push checked as it is made: no CPU pinned to two containers, the shared container on none of them;
    ``refused``: a container whose move the runtime refuses (a deadline); ``held``: what each pod's container holds
    at the start (``HELD``'s node by default)."""
    pinned = {ids[uid]: CPUSet.parse(cpus) for uid, cpus in (held or HELD).items()}
    shared = [CPUSet.parse(runtime.read(web))]
    update = runtime.update
    held_at_start = dict(pinned)

    def watched(cid, **kw):
        cpus = kw["cpuset_cpus"]
        if cid == refused and cpus != held_at_start[cid]:
            raise ContainerRuntimeError("UpdateContainerResources %s: context deadline exceeded" % cid)
        if cid in pinned:
            pinned[cid] = cpus
        else:
            shared[0] = cpus
        taken = [cpu for held in pinned.values() for cpu in held]
        assert len(taken) == len(set(taken)), "a CPU pinned twice after pushing %s to %s" % (cid, cpus)
        assert not shared[0].intersection(CPUSet(taken)), "the shared container on %s, pinned CPUs %s" % (
            shared[0], sorted(taken))
        return update(cid, **kw)

    runtime.update = watched


@pytest.mark.parametrize("failing", [None, "u7", "u6"])
def test_moves_one_after_the_other_and_the_shared_pool_around_them(tmp_path, failing):
    """(Defragmentation 1 and 2.) The node of the test above, with a shared container. Watched at every push: no CPU
    is ever pinned to two containers, and the shared container is never on a CPU a container holds or is about to
    take. The shared pool shrinks first and grows last. A move the runtime refuses (a deadline, a runc error) stops
    the moves after it: u6 depends on u7 leaving CPU 17. The state then says where each container is, the cgroups
    agree with it, and the failure is the plan's error (kind move)."""
    manager, runtime, ids, web, before = held_node(tmp_path)
    watch(runtime, ids, web, refused=ids[failing] if failing else None)
    done = defrag_node(manager)
    after = manager.read_state()
    assert [e["kind"] for e in done.errors if e["kind"] == "move"] == ([] if failing is None else ["move"])
    for uid, cid in ids.items():
        assert runtime.read(cid) == str(after.get(uid, "app")), uid  # the cgroups say what the state says
    assert runtime.read(web) == str(after.default.difference(CPUSet.parse("0,12")) | CPUSet.parse("0,12"))
    moved = {uid for uid in HELD if after.get(uid, "app") != CPUSet.parse(HELD[uid])}
    assert moved == {None: {"u6", "u7"}, "u7": set(), "u6": {"u7"}}[failing]
    assert after.assigned().isdisjoint(after.default)


def test_killed_after_the_state_is_saved_the_repair_pass_moves_in_a_safe_order(tmp_path):
    """(Defragmentation 2, the repair.) Killed right after the state was saved, before any push: the next pass
    finds every moved container on its old CPUs. It pushes them so that who vacates a CPU goes before who takes it
    (u7 leaves 17, then u6 takes it), and the shared container stays off every CPU a container holds throughout."""
    manager, runtime, ids, web, before = held_node(tmp_path)
    found = defrag.plan_defrag(manager.topology, manager.policy.options, before, manager.policy.reserved)
    manager.store.save(found.state)  # the kill: the state saved, no push made
    watch(runtime, ids, web)
    manager.reconcile()
    after = manager.read_state()
    assert after == found.state
    for uid, cid in ids.items():
        assert runtime.read(cid) == str(after.get(uid, "app"))
    assert runtime.read(web) == str(after.default)


def test_a_swap_killed_before_its_first_push_is_repaired_through_a_cpu_taken_from_the_pool(tmp_path):
    """(Defragmentation 2, a cycle.) The saved state swaps a's and b's CPUs; killed before the first push, each still
    holds the other's CPU. The repair moves one of them through a CPU the shared container gives up first, and never
    pins a CPU to two."""
    manager, runtime = _node(tmp_path)
    ids = {"a": runtime.add("a", "app", "Guaranteed", 1000), "b": runtime.add("b", "app", "Guaranteed", 1000)}
    web = runtime.add("c", "web", "Burstable", 500)
    before = state("0,2-4,6-7", a_app="1", b_app="5")
    manager.store.save(before)
    manager.push(before)
    manager.store.save(state("0,2-4,6-7", a_app="5", b_app="1"))  # the kill: state saved, no push made
    pushed = []
    watch(runtime, ids, web, held={"a": "1", "b": "5"})
    update = runtime.update
    runtime.update = lambda cid, **kw: pushed.append((cid, str(kw["cpuset_cpus"]))) or update(cid, **kw)
    manager.reconcile()
    assert (runtime.read(ids["a"]), runtime.read(ids["b"]), runtime.read(web)) == ("5", "1", "0,2-4,6-7")
    assert len([cpus for cid, cpus in pushed if cid in ids.values()]) == 3  # one of them twice: through the pool


# (Defragmentation 3.) What an allocation honours, a move honours: the isolated CPUs under isolated_cpus only, and a
# pod of several containers under the pod scope with single-numa-node or restricted.
NUMA_1_ISOLATED = CPUSet.parse("2-3,6-7")  # TWO_NUMA's NUMA node 1 (cores 2 and 3)


def test_under_isolated_cpus_only_a_move_stays_on_isolated_cpus_and_a_unit_outside_them_stays():
    before = state("0,2,4-7", a_app="1", b_db="3")  # a outside the isolated CPUs (the mode changed since)
    free_anywhere = plan_defrag(TWO_NUMA, NO_OPTIONS, before, CPUSet.parse("0,4"))
    assert [(m.pod_uid, str(m.cpus_after)) for m in free_anywhere.moves] == [("b", "5")]  # off the isolated CPUs
    limited = plan_defrag(TWO_NUMA, NO_OPTIONS, before, CPUSet.parse("0,4"),
                          limits=Limits(within=NUMA_1_ISOLATED.as_frozenset()))
    assert limited.moves == [] and limited.state == before  # no move on the isolated CPUs improves them
    greedy = plan_greedy(TWO_NUMA, NO_OPTIONS, before, CPUSet.parse("0,4"),
                         limits=Limits(within=NUMA_1_ISOLATED.as_frozenset()))
    assert greedy.moves == []
    within = Limits(within=NUMA_1_ISOLATED.as_frozenset())
    halves = state("0-2,4-5,7", a_app="3", b_db="6")  # both on the isolated CPUs, half a core each: one move
    found = plan_defrag(TWO_NUMA, NO_OPTIONS, halves, CPUSet.parse("0,4"), limits=within)
    assert [str(m.cpus_after) for m in found.moves] in (["7"], ["2"])
    assert (found.before["free_whole_cores"], found.after["free_whole_cores"]) == (0, 1)  # counted on them alone
    whole = state("0-1,3-5,7", a_app="2", b_db="6")  # one whole isolated core already
    assert not plan_defrag(TWO_NUMA, NO_OPTIONS, whole, CPUSet.parse("0,4"), limits=within).moves


def test_under_the_pod_scope_a_pod_of_several_containers_stays_where_it_is():
    before = state("0-1,4-7", p_app="2", p_side="3")  # one pod, two containers of one CPU each on NUMA node 1
    anywhere = plan_defrag(TWO_NUMA, NO_OPTIONS, before, CPUSet.parse("0,4"))
    assert {m.pod_uid for m in anywhere.moves} == {"p"}
    kept = plan_defrag(TWO_NUMA, NO_OPTIONS, before, CPUSet.parse("0,4"), limits=Limits(pods_whole=True))
    assert kept.moves == [] and kept.state == before
    alone = state("0-2,4-7", p_app="3")  # a pod of one unit moves as under the container scope
    assert plan_defrag(TWO_NUMA, NO_OPTIONS, alone, CPUSet.parse("0,4"), limits=Limits(pods_whole=True)).moves


def test_a_container_whose_memory_is_pinned_moves_only_within_that_memorys_numa_nodes():
    """The kubelet's Memory Manager put p's memory on NUMA node 1: moving its containers to NUMA node 0 (the best
    packing otherwise) would leave their memory remote; they stay on node 1, where one of them fills a core."""
    before = state("0-1,4-7", p_app="2", p_side="3")
    memory = {("p", "app"): frozenset({1}), ("p", "side"): frozenset({1})}
    for limits in (Limits(memory=memory), Limits(keep_numa=True)):
        found = plan_defrag(TWO_NUMA, NO_OPTIONS, before, CPUSet.parse("0,4"), limits=limits)
        assert found.moves and all(m.cpus_after.as_frozenset() <= NUMA_1_ISOLATED.as_frozenset() for m in found.moves)
        assert found.after["free_whole_cores"] == 2  # core 1 on node 0 and, now, one core on node 1
        greedy = plan_greedy(TWO_NUMA, NO_OPTIONS, before, CPUSet.parse("0,4"), limits=limits)
        assert all(m.cpus_after.as_frozenset() <= NUMA_1_ISOLATED.as_frozenset() for m in greedy.moves)
    elsewhere = Limits(memory={("p", "app"): frozenset({0}), ("p", "side"): frozenset({0})})
    found = plan_defrag(TWO_NUMA, NO_OPTIONS, before, CPUSet.parse("0,4"), limits=elsewhere)
    assert [str(m.cpus_after) for m in found.moves] == ["1", "5"]  # towards its memory on node 0


def test_a_container_holding_devices_moves_only_within_their_numa_nodes():
    """(Issue 63: device hints.) The kubelet's Device Manager gave p an SR-IOV function on NUMA node 1: the restarted
    kubelet's device hint would disagree with CPUs on node 0, so p moves only within node 1, like pinned memory."""
    before = state("0-1,4-7", p_app="2", p_side="3")
    nic = {("p", "app"): {"example.com/sriov-nic": frozenset({1})}, ("p", "side"): {"example.com/gpu": frozenset({1})}}
    found = plan_defrag(TWO_NUMA, NO_OPTIONS, before, CPUSet.parse("0,4"), limits=Limits(devices=nic))
    assert found.moves and all(m.cpus_after.as_frozenset() <= NUMA_1_ISOLATED.as_frozenset() for m in found.moves)
    assert Limits(devices=nic).homes(TWO_NUMA, ("p", ("app",), frozenset({2}))) == frozenset({1})
    both = Limits(memory={("p", "app"): frozenset({0})}, devices=nic)  # memory and devices disagree: no home
    assert both.homes(TWO_NUMA, ("p", ("app",), frozenset({2}))) == frozenset()
    stuck = plan_defrag(TWO_NUMA, NO_OPTIONS, before, CPUSet.parse("0,4"), limits=both)
    assert all(m.containers != ("app",) for m in stuck.moves)


@pytest.mark.parametrize("options, want", [
    (ManagerOptions(), Limits()),
    (ManagerOptions(isolated_cpus="prefer"), Limits()),
    (ManagerOptions(isolated_cpus="only"), Limits(within=NUMA_1_ISOLATED.as_frozenset())),
    (ManagerOptions(topology_manager_scope="pod", topology_manager_policy="single-numa-node"), Limits(pods_whole=True)),
    (ManagerOptions(topology_manager_scope="pod", topology_manager_policy="restricted"), Limits(pods_whole=True)),
    (ManagerOptions(topology_manager_scope="pod", topology_manager_policy="best-effort"), Limits()),
    (ManagerOptions(topology_manager_policy="single-numa-node"), Limits()),
])
def test_the_limits_come_from_the_node_manager_options(tmp_path, options, want):
    topo = Topology(generated_cpus(2, 2, 2), isolated=NUMA_1_ISOLATED)
    manager = NodeManager(topo, new_policy("static", topo, 2, CPUSet.parse("0,4")),
                          StateStore(str(tmp_path / "state"), "static"), options=options)
    assert Limits.of(manager) == want


def test_a_live_defragmentation_under_isolated_cpus_only_keeps_to_them(tmp_path):
    topo = Topology(generated_cpus(2, 2, 2), isolated=NUMA_1_ISOLATED)
    runtime = FakeRuntime(str(tmp_path / "cgroup"), "0-7", "0-1")
    manager = NodeManager(topo, new_policy("static", topo, 2, CPUSet.parse("0,4")),
                          StateStore(str(tmp_path / "state"), "static"), runtime,
                          cgroups=CgroupFS(str(tmp_path / "cgroup")), cache=ContainerCache(),
                          options=ManagerOptions(isolated_cpus="only"))
    b = runtime.add("b", "db", "Guaranteed", 1000)
    manager.reconcile()
    fragmented = state("0-2,4-7", b_db="3")
    manager.store.save(fragmented)
    manager.push(fragmented)
    assert defrag_node(manager).actions == [] and runtime.read(b) == "3"  # never onto CPU 5 (not isolated)


@st.composite
def fragmented_pods(draw):
    """``fragmented``'s states, some pods with a second container on CPUs of their own."""
    before, reserved = draw(fragmented())
    for pod, _name, cpus in list(before.assignments()):
        if len(cpus) > 1 and draw(st.booleans()):
            listed = sorted(cpus)
            before.set(pod, "c", CPUSet(listed[:1]))
            before.set(pod, "d", CPUSet(listed[1:]))
    return before, reserved


ISOLATED_BIG = CPUSet.parse("8-15,24-31").as_frozenset()  # BIG's NUMA nodes 2 and 3


@settings(max_examples=100, deadline=None)
@given(fragmented_pods(), st.booleans())
def test_every_limited_plan_moves_only_within_its_limits(case, greedy):
    before, reserved = case
    limits = Limits(within=ISOLATED_BIG, pods_whole=True)
    found = (plan_greedy(BIG, NO_OPTIONS, before, reserved, limits=limits) if greedy
             else plan_defrag(BIG, NO_OPTIONS, before, reserved, budget=0.05, limits=limits))
    new_policy("static", BIG, 2, reserved).start(found.state.copy())
    replay(before, found)
    for move in found.moves:
        assert move.cpus_before.as_frozenset() <= ISOLATED_BIG and move.cpus_after.as_frozenset() <= ISOLATED_BIG
        assert len(before.entries[move.pod_uid]) == len(move.containers)  # the pod's only unit


@settings(max_examples=100, deadline=None)
@given(fragmented(), st.booleans())
def test_under_keep_numa_every_container_ends_on_its_numa_nodes(case, greedy):
    before, reserved = case
    numa_of = {cpu: loc[2] for cpu, loc in BIG.loc.items()}
    found = (plan_greedy(BIG, NO_OPTIONS, before, reserved, limits=Limits(keep_numa=True)) if greedy
             else plan_defrag(BIG, NO_OPTIONS, before, reserved, budget=0.05, limits=Limits(keep_numa=True)))
    new_policy("static", BIG, 2, reserved).start(found.state.copy())
    replay(before, found)
    for pod, name, cpus in found.state.assignments():  # where each ends (a swap's detour may pass elsewhere)
        assert {numa_of[c] for c in cpus} <= {numa_of[c] for c in before.entries[pod][name]}
