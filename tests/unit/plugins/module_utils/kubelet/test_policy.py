"""The kubelet's static-policy cases (kubelet-cases/static_policy.json) on the pure policy."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import (KubecpuError, OptionError,
                                                                                 SMTAlignmentError)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.pod import Pod
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import (NonePolicy, StaticPolicy,
                                                                                         allocate_cpus, new_policy)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.kubelet_cases import cases, fixture, ids

ALL = cases("static_policy.json")
CONVERTIBLE = [c for c in ALL if not c.get("unconvertible")]


def by_kind(kind):
    return [c for c in CONVERTIBLE if c["kind"] == kind]


def _policy(case):
    reserved = CPUSet.parse(case["reserved_cpus"]) if case.get("reserved_cpus") else None
    return StaticPolicy(fixture(case["topology"]), case["num_reserved_cpus"], reserved, case["options"])


def _state(case):
    initial = case["initial_state"]
    entries = {pod: {name: CPUSet.parse(cpus) for name, cpus in containers.items()}
               for pod, containers in initial["assignments"].items()}
    return CPUState("static", CPUSet.parse(initial["default_cpuset"]), entries)


def _entries(state):
    return {pod: {name: str(cpus) for name, cpus in containers.items()} for pod, containers in state.entries.items()}


def test_case_inventory():
    kinds = {}
    for case in ALL:
        kinds[case["kind"]] = kinds.get(case["kind"], 0) + 1
    assert kinds == {"start": 13, "allocate": 39, "allocate_all_app_containers": 27, "sequence": 2,
                     "remove": 4, "allocate_cpus": 5, "parse_options": 7, "error_text": 3}
    assert len(ALL) - len(CONVERTIBLE) == 2  # the two cases whose fixture is missing


@pytest.mark.parametrize("case", by_kind("start"), ids=ids(by_kind("start")))
def test_start(case):
    expected = case["expected"]
    if expected.get("new_policy_error"):
        with pytest.raises(KubecpuError) as err:
            _policy(case)
        assert str(err.value) == expected["new_policy_error"]
        return
    policy, state = _policy(case), _state(case)
    if expected["error"]:
        with pytest.raises(KubecpuError) as err:
            policy.start(state)
        assert str(err.value) == expected["error"]
    else:
        policy.start(state)
        assert str(state.default) == expected["default_cpuset"]


@pytest.mark.parametrize("case", by_kind("allocate"), ids=ids(by_kind("allocate")))
def test_allocate(case):
    policy, state = _policy(case), _state(case)
    pod = Pod.from_dict(case["pod"])
    hint = case["topology_hint"]["numa"] if case.get("topology_hint") else None
    expected = case["expected"]
    before = state.copy()
    if expected["error"]:
        with pytest.raises(KubecpuError) as err:
            policy.allocate(state, pod, case["container"], hint)
        assert str(err.value) == expected["error"]
        if expected.get("error_kind") == "SMTAlignmentError":
            smt = expected["smt_alignment_error"]
            assert isinstance(err.value, SMTAlignmentError)
            got = (err.value.requested_cpus, err.value.cpus_per_core, err.value.available_physical_cpus,
                   err.value.caused_by_physical_cpus)
            assert got == (smt["RequestedCPUs"], smt["CpusPerCore"], smt["AvailablePhysicalCPUs"],
                           smt["CausedByPhysicalCPUs"])
        assert state == before
        return
    result = policy.allocate(state, pod, case["container"], hint)
    if expected["allocated"]:
        assert result.exclusive and str(result.cpus) == expected["cpuset"]
        assert str(state.get(pod.uid, case["container"])) == expected["cpuset"]
        assert result.cpus.isdisjoint(state.default)
    else:
        assert not result.exclusive and state.get(pod.uid, case["container"]) is None
    assert str(state.default) == case["not_asserted_after"]["default_cpuset_after"]


@pytest.mark.parametrize("case", by_kind("allocate_all_app_containers"), ids=ids(by_kind("allocate_all_app_containers")))
def test_allocate_all_app_containers(case):
    policy, state = _policy(case), _state(case)
    pod = Pod.from_dict(case["pod"])
    for name in case["allocation_order"]:
        policy.allocate(state, pod, name)
    expected = case["expected"]
    if expected["compare"] == "cpuset_of_first_app_container":
        assert str(state.get(pod.uid, case["allocation_order"][0])) == expected["cpuset"]
    else:
        used = CPUSet().union(*state.entries[pod.uid].values())
        assert policy.topology.uncore_ids(used) == expected["uncore_cache_ids"]
    after = case["not_asserted_after"]
    assert _entries(state) == after["assignments_after"]
    assert str(state.default) == after["default_cpuset_after"]


@pytest.mark.parametrize("case", by_kind("sequence"), ids=ids(by_kind("sequence")))
def test_init_container_reuse(case):
    policy, state = _policy(case), _state(case)
    pod = Pod.from_dict(case["pod"])
    for step in case["steps"]:
        if step["op"] == "allocate":
            policy.allocate(state, pod, step["container"])
    assert str(state.default) == case["expected"]["default_cpuset_after_allocate"]
    assert _entries(state) == case["not_asserted_after"]["assignments_after_allocate"]
    for step in case["steps"]:
        if step["op"] == "remove":
            policy.remove_container(state, pod.uid, step["container"])
            assert str(state.default) == case["expected"]["default_cpuset_after_remove"]
            assert state.get(pod.uid, step["container"]) is None


@pytest.mark.parametrize("case", by_kind("remove"), ids=ids(by_kind("remove")))
def test_remove(case):
    policy, state = _policy(case), _state(case)
    policy.remove_container(state, case["remove"]["pod_uid"], case["remove"]["container"])
    assert str(state.default) == case["expected"]["default_cpuset"]
    assert state.get(case["remove"]["pod_uid"], case["remove"]["container"]) is None
    assert _entries(state) == case["not_asserted_after"]["assignments_after"]


@pytest.mark.parametrize("case", by_kind("allocate_cpus"), ids=ids(by_kind("allocate_cpus")))
def test_topology_aware_allocate_cpus(case):
    policy, state = _policy(case), _state(case)
    policy.start(state)
    got = allocate_cpus(policy.topology, policy.options, policy.available(state).as_frozenset(),
                        case["num_requested"], case["numa_affinity"])
    assert str(got) == case["expected"]["cpuset"]


@pytest.mark.parametrize("case", by_kind("error_text"), ids=ids(by_kind("error_text")))
def test_smt_alignment_error_text(case):
    fields = case["smt_alignment_error"]
    err = SMTAlignmentError(fields["RequestedCPUs"], fields["CpusPerCore"], fields["AvailablePhysicalCPUs"],
                            fields["CausedByPhysicalCPUs"])
    assert str(err) == case["expected"]["text"]


def _pod(requests, inits=(), sidecar=False, uid="p"):
    def container(name, cpu):
        return {"name": name, "cpu_request": cpu, "cpu_limit": cpu, "memory_request": "1G", "memory_limit": "1G"}
    doc = {"uid": uid, "containers": [container("app-%d" % n, cpu) for n, cpu in enumerate(requests)],
           "init_containers": [dict(container("init-%d" % n, cpu), **({"restart_policy": "Always"} if sidecar else {}))
                               for n, cpu in enumerate(inits)]}
    return Pod.from_dict(doc)


def test_allocating_an_assigned_container_returns_its_set_unchanged():
    policy = StaticPolicy(fixture("topoDualSocketHT"), 1)
    state = CPUState("static")
    policy.start(state)
    pod = _pod(["2"])
    first = policy.allocate(state, pod, "app-0")
    snapshot = state.copy()
    assert policy.allocate(state, pod, "app-0") == first and state == snapshot


def test_strict_reservation_keeps_reserved_cpus_out_of_the_shared_pool():
    policy = StaticPolicy(fixture("topoDualSocketHT"), 2, None, {"strict-cpu-reservation": "true"})
    state = CPUState("static")
    policy.start(state)
    assert str(policy.reserved) == "0,6" and str(state.default) == "1-5,7-11"
    got = policy.allocate(state, _pod(["4"]), "app-0")
    assert got.cpus.isdisjoint(policy.reserved)
    policy.remove_container(state, "p", "app-0")
    assert str(state.default) == "1-5,7-11"


FULL = {"p": {"app-0": CPUSet.parse("1-5,7-11")}}  # every CPU but the strictly reserved 0 and 6, handed out


@pytest.mark.parametrize("strict, running, entries, error", [
    # a kubelet's start (validateState): an empty default set with assignments is refused, strict or not
    (True, False, FULL, "default cpuset cannot be empty"),
    (False, False, FULL, "default cpuset cannot be empty"),
    # a running manager under strict reservation holds it (the kubelet hands out its last shared CPU)
    (True, True, FULL, None),
    # ... but only that: without strict reservation the reserved CPUs are always shared
    (False, True, FULL, "default cpuset cannot be empty"),
    # ... and what is handed out must still account for every CPU
    (True, True, {"p": {"app-0": CPUSet.parse("1-5,7-10")}},
     'current set of available CPUs "1-5,7-11" doesn\'t match with CPUs in state "1-5,7-10"'),
    (True, True, {"p": {"app-0": CPUSet.parse("0-5,7-11")}},
     'current set of available CPUs "1-5,7-11" doesn\'t match with CPUs in state "0-5,7-11"'),
])
def test_an_empty_shared_pool_is_a_running_managers_state_under_strict_reservation_only(
        strict, running, entries, error):
    policy = StaticPolicy(fixture("topoDualSocketHT"), 2, None, {"strict-cpu-reservation": "true"} if strict else None)
    state = CPUState("static", CPUSet(), entries)
    if error is None:
        policy.start(state, running=running)
        assert not state.default and state.entries == entries
        return
    with pytest.raises(KubecpuError) as err:
        policy.start(state, running=running)
    assert str(err.value) == error


def test_a_full_node_under_strict_reservation_releases_and_refuses_as_the_running_kubelet():
    """Every shared CPU handed out: the next request is refused in the kubelet's words, a release gives CPUs back."""
    policy = StaticPolicy(fixture("topoDualSocketHT"), 2, None, {"strict-cpu-reservation": "true"})
    state = CPUState("static", CPUSet(), {pod: dict(containers) for pod, containers in FULL.items()})
    policy.start(state, running=True)
    with pytest.raises(KubecpuError) as err:
        policy.allocate(state, _pod(["1"], uid="q"), "app-0")
    assert str(err.value) == "not enough cpus available to satisfy request: requested=1, available=0"
    assert policy.remove_container(state, "p", "app-0") == CPUSet.parse("1-5,7-11")
    assert str(state.default) == "1-5,7-11" and not state.entries


def test_non_guaranteed_and_fractional_containers_use_the_shared_pool():
    policy = StaticPolicy(fixture("topoSingleSocketHT"), 1)
    state = CPUState("static")
    policy.start(state)
    for cpu in ("1.5", "500m"):
        got = policy.allocate(state, _pod([cpu], uid=cpu), "app-0")
        assert got == (state.default, False)
    assert not state.entries


def test_none_policy_allocates_nothing_and_refuses_options():
    topo = fixture("topoSingleSocketHT")
    with pytest.raises(OptionError, match=r"None policy: received unsupported options=map\[full-pcpus-only:true\]"):
        NonePolicy(topo, {"full-pcpus-only": "true"})
    policy = new_policy("none", topo)
    state = CPUState("none")
    assert policy.allocate(state, _pod(["2"]), "app-0") == (state.default, False)


def test_unknown_policy_name():
    with pytest.raises(KubecpuError, match='unknown policy: "dynamic"'):
        new_policy("dynamic", fixture("topoSingleSocketHT"))
