"""The kubelet's take-by-topology and accumulator cases (kubelet-cases/), plus D1 and D2."""

from __future__ import annotations

import pytest

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.cpu_assignment import (
    Accumulator, standard_deviation, take_by_topology_distributed, take_by_topology_packed)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import AllocationError

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
