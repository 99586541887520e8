"""The kubelet's take-by-topology and accumulator cases (kubelet-cases/), plus D1 and D2."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import AllocationError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpu_assignment import (SPREAD, Accumulator,
                                                                                                 standard_deviation,
                                                                                                 take_by_topology_distributed,
                                                                                                 take_by_topology_packed)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.kubelet_cases import cases, fixture, ids

TAKE = cases("take_by_topology.json")
ACCUMULATOR = cases("accumulator_cases.json")


def _take(case):
    topo = fixture(case["topology"])
    available = CPUSet.parse(case["available"]).as_frozenset()
    if case["algorithm"] == "packed":
        uncore = bool(case["options"].get("prefer_align_by_uncore_cache"))
        return take_by_topology_packed(topo, available, case["num_cpus"], case["cpu_sorting_strategy"], uncore)
    return take_by_topology_distributed(topo, available, case["num_cpus"], case["cpu_group_size"],
                                        case["cpu_sorting_strategy"])


def test_every_take_case_is_here():
    assert len(TAKE) == 62
    assert {c["algorithm"] for c in TAKE} == {"packed", "numa_distributed"}


@pytest.mark.parametrize("case", TAKE, ids=ids(TAKE))
def test_take_by_topology(case):
    if case["expect_error"]:
        with pytest.raises(AllocationError) as err:
            _take(case)
        assert str(err.value) == case["expected_error"]
    else:
        assert str(_take(case)) == case["expected"]


def _accumulator(case):
    topo = fixture(case["topology"])
    return Accumulator(topo, CPUSet.parse(case["available"]), case["num_cpus"], case.get("cpu_sorting_strategy", "packed"))


@pytest.mark.parametrize("case", ACCUMULATOR, ids=ids(ACCUMULATOR))
def test_accumulator(case):
    acc = _accumulator(case)
    method = case["method"]
    if method == "take":
        for chunk in case["take_sequence"]:
            acc.take(CPUSet.parse(chunk))
        assert (acc.is_satisfied(), acc.is_failed(), acc.need) == (
            case["expect_satisfied"], case["expect_failed"], case["expect_num_cpus_needed"])
    elif method == "freeNUMANodes+freeSockets":
        assert acc.free_numa_nodes() == case["expected_numa_nodes"]
        assert acc.free_sockets() == case["expected_sockets"]
    else:
        got = {"freeSockets": acc.free_sockets, "freeNUMANodes": acc.free_numa_nodes,
               "freeCores": acc.free_cores, "freeCPUs": acc.free_cpus}[method]()
        if case.get("compare_sorted"):
            got = sorted(got)
        assert got == case["expected_order"]


# ALGORITHM.md D2: whole-unit takes only hand out CPUs that are free in the call.
@pytest.mark.parametrize("topology,available,count,expected", [
    ("topoSingleSocketSingleNumaPerSocketPCoreHTMonolithicUncore", "8,9,17", 3, "8-9,17"),
    ("topoDualSocketMultiNumaPerSocketUncore", "5,100-101", 2, "5,100"),
])
def test_d2_whole_unit_takes_stay_inside_the_free_set(topology, available, count, expected):
    got = take_by_topology_packed(fixture(topology), CPUSet.parse(available).as_frozenset(), count)
    assert str(got) == expected


def test_d1_distributed_never_hangs_on_odd_leftovers():
    """Remainder 8 in groups of 2 with leftovers {2,3,3}: the kubelet loops forever; we must answer."""
    topo = fixture("topoDualSocketMultiNumaPerSocketHTLarge")
    # odd free counts per NUMA node: drop one thread of the first core of every node
    available = set(topo.all_cpus)
    for numa in sorted(topo.numa_cpus):
        available.discard(min(topo.numa_cpus[numa]))
    for count in range(2, 80, 2):
        got = take_by_topology_distributed(topo, frozenset(available), count, 2)
        assert len(got) == count and got.issubset(available)
        cores = {topo.loc[c][0] for c in got}
        assert all(topo.core_cpus[core] <= got.as_frozenset() for core in cores)


@pytest.mark.parametrize("values,expected", [
    ([16, 16, 16, 16], 0.0), ([0, 8], 4.0), ([1, 2], 0.5), ([3, 3, 2], 0.471), ([40, 38, 40, 38], 1.0),
])
def test_balance_score_matches_go_rounding(values, expected):
    assert standard_deviation(values) == expected


# --- the 2026 kubelets (KUBELET_VERSIONS.md part B) ----------------------------------------------------------------
def _golden():
    import json
    import os

    from ansible_collections.kubecpu.cpu_manager.tests.unit.support import allocation_golden

    path = os.path.join(os.path.dirname(allocation_golden.__file__), "allocation_golden_135.json")
    with open(path, encoding="utf-8") as handle:
        return allocation_golden, json.load(handle)


def test_the_1_35_choices_are_unchanged_over_two_thousand_frozen_requests():
    golden, frozen = _golden()
    assert frozen == [dict(case, chosen=case["chosen"]) for case in frozen] and len(frozen) == 2000
    changed = [case for case in frozen if golden.choose(case) != case["chosen"]]
    assert changed == []
    assert sum(1 for case in frozen if not case["chosen"].startswith("error")) > 1500


@pytest.mark.parametrize("name, available, count, want_138, want_135", [
    # B.1.6: the exact free-unit tests (and kubecpu's D2 already agreed on the first)
    ("topoSingleSocketSingleNumaPerSocketPCoreHTMonolithicUncore", "8-9,17", 3, "8-9,17", "8-9,17"),
    ("topoDualSocketMultiNumaPerSocketUncore", "5,100-101", 2, "5,101", "5,100"),
])
def test_1_38_exact_free_unit_tests(name, available, count, want_138, want_135):
    topo = fixture(name)
    free = CPUSet.parse(available).as_frozenset()
    assert str(take_by_topology_packed(topo, free, count, minor=38)) == want_138
    assert str(take_by_topology_packed(topo, free, count, minor=35)) == want_135


def _adjacent_siblings():
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import CPUInfo, Topology

    return Topology([CPUInfo(cpu=c, core=c // 2, socket=0, numa=0, uncore=0) for c in range(8)])  # core g = {2g, 2g+1}


def test_1_38_spreads_one_thread_of_every_core_first():
    topo = _adjacent_siblings()
    everything = topo.all_cpus.as_frozenset()
    assert str(take_by_topology_packed(topo, everything, 3, SPREAD, minor=35)) == "0-2"  # the socket's CPUs in order
    assert str(take_by_topology_packed(topo, everything, 3, SPREAD, minor=38)) == "0,2,4"  # round robin over cores
    half = everything - {0}  # core 0 has one free CPU: the fewest-free core comes first
    assert str(take_by_topology_packed(topo, half, 3, SPREAD, minor=38)) == "1-2,4"


def test_1_38_takes_the_hints_numa_count_as_the_fewest_nodes():
    from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated

    topo = generated(2, 8, 2, 4)  # 32 CPUs, 8 NUMA nodes of 4
    hinted = topo.cpus_in_numa_nodes(0, 1, 2, 3).as_frozenset()
    for minor, want in ((35, [4, 4, 0, 0]), (38, [2, 2, 2, 2])):
        got = take_by_topology_distributed(topo, hinted, 8, 1, minor=minor, min_numas=4)
        assert [len(got.intersection(topo.cpus_in_numa_nodes(n))) for n in range(4)] == want, minor


def test_1_37_keeps_a_distributed_request_in_one_socket_under_align_by_socket():
    from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated

    topo = generated(2, 4, 2, 2)  # NUMA 0 {0,1,8,9} and 1 {2,3,10,11} on socket 0, 2 and 3 on socket 1
    free = topo.all_cpus.as_frozenset() - {11, 13}  # NUMA 1 and 2 have 3 free CPUs, 0 and 3 have 4
    for minor, align, want in ((35, True, {0, 3}), (37, False, {0, 3}), (37, True, {0, 1})):
        got = take_by_topology_distributed(topo, free, 6, 1, minor=minor, align_by_socket=align)
        assert {topo.loc[c][2] for c in got} == want, (minor, align)
