"""The packing search: what a NUMA node keeps whole from what stays on it and what moves in (``min(Z, (C - U) // T)``,
``Z - A // T`` under full-pcpus-only), and a search whose result is the best of every placement (tried one by one on
the same model), with the fewest units moved and then the fewest CPUs moved across at that score; proven when it
ends within its budget, and within ``max_moves`` the best those moves reach."""

from __future__ import annotations

import itertools
import random

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.defrag_search import (
    STAY, Packing, Room, Unit, rooms_and_units, search)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated
from hypothesis import given, settings
from hypothesis import strategies as st

# Two NUMA nodes of 4 cores x 2 threads, core g = {g, g + 8}; core 0 (CPUs 0 and 8) reserved.
TOPO = generated(2, 4, 2)
NUMA_OF_CORE = {core: TOPO.loc[min(cpus)][2] for core, cpus in TOPO.core_cpus.items()}


def view(*groups, reserved=(0, 8), movable=True):
    return rooms_and_units(NUMA_OF_CORE, TOPO.core_cpus, set(reserved),
                           [(frozenset(cpus), movable) for cpus in groups])


def test_rooms_count_allocatable_cpus_and_cores_without_a_reserved_cpu():
    rooms, units, nodes = view({3, 13}, {12, 15}, {7})
    assert nodes == [0, 1]
    assert rooms == [Room(6, frozenset({1, 2, 3})), Room(8, frozenset({4, 5, 6, 7}))]
    assert units == [Unit(2, ((0, 1), (1, 1)), (3, 5), True), Unit(2, ((1, 2),), (4, 7), True),
                     Unit(1, ((1, 1),), (7,), True)]


def test_a_unit_larger_than_any_numa_node_cannot_move():
    _rooms, units, _nodes = view(set(range(1, 8)) | {9, 10})
    assert not units[0].movable


@pytest.mark.parametrize("where, whole", [
    # everything stays: NUMA 0 has cores 1-2 free (3 is held), NUMA 1 only core 6
    ([STAY, STAY, STAY], [2, 1]),
    # the three move to NUMA 0 (5 CPUs on its 6): NUMA 1 keeps its 4 cores whole, NUMA 0 none
    ([0, 0, 0], [0, 4]),
    # the two on NUMA 1 move to NUMA 0, the one across both stays: NUMA 0 holds 4 of its 6 CPUs (one core stays
    # whole), NUMA 1's core 5 is still held
    ([STAY, 0, 0], [1, 3]),
    # within NUMA 1 the 1-CPU unit moves, but its core 7 is still held by the unit on 12 and 15
    ([STAY, STAY, 1], [2, 1]),
])
def test_whole_cores_per_node(where, whole):
    rooms, units, _nodes = view({3, 13}, {12, 15}, {7})
    packing = Packing(rooms, units, 2, whole_only=False)
    for index, node in enumerate(where):
        packing.place(index, node)
    assert [packing.whole(node) for node in range(2)] == whole
    assert packing.key()[:2] == (max(whole), sum(whole))


def test_under_full_pcpus_only_moved_units_take_whole_cores():
    rooms, units, _nodes = view({2, 10}, {5, 13})  # two whole-core units, one on each node
    packing = Packing(rooms, units, 2, whole_only=True)
    packing.place(0, 1)  # NUMA 0's unit onto NUMA 1: its core 2 clears there, one of NUMA 1's free cores is taken
    assert [packing.whole(0), packing.whole(1)] == [3, 2] and packing.fits(1)


def test_the_issue_example_is_solved_by_moving_all_three_into_numa_0():
    rooms, units, _nodes = view({3, 13}, {12, 15}, {7})
    found = search(rooms, units, 2, False)
    assert found.proven and found.where == [0, 0, 0] and found.key == (4, 4, -3, -4)  # 4 CPUs change node: one of the first unit's stays


def test_max_moves_gives_the_best_those_moves_reach():
    rooms, units, _nodes = view({3, 13}, {12, 15}, {7})
    found = search(rooms, units, 2, False, max_moves=1)
    assert found.proven and found.key[2] >= -1 and found.key[:2] == brute_force(rooms, units, 1)[:2]


def test_a_search_out_of_time_returns_the_best_it_found_unproven():
    topo = generated(2, 16, 2, numa_per_socket=2)  # 64 CPUs, 4 NUMA nodes
    rng = random.Random(7)
    free = list(range(1, 32)) + list(range(33, 64))
    rng.shuffle(free)
    groups = [(frozenset(free[n * 2:n * 2 + 2]), True) for n in range(25)]
    rooms, units, _nodes = rooms_and_units({core: topo.loc[min(cpus)][2] for core, cpus in topo.core_cpus.items()},
                                           topo.core_cpus, {0, 32}, groups)
    found = search(rooms, units, 2, False, budget=0.0)
    assert not found.proven
    packing = Packing(rooms, units, 2, False)
    start = packing.key()
    for index, node in enumerate(found.where):
        packing.place(index, node)
    assert packing.key() == found.key >= start and all(packing.fits(n) for n in range(len(rooms)))


def brute_force(rooms, units, max_moves=None, whole_only=False):
    best = None
    choices = [[STAY] + list(range(len(rooms))) if unit.movable else [STAY] for unit in units]
    for where in itertools.product(*choices):
        packing = Packing(rooms, units, 2, whole_only)
        for index, node in enumerate(where):
            packing.place(index, node)
        if all(packing.fits(n) for n in range(len(rooms))) and (max_moves is None or packing.moves <= max_moves):
            best = max(best or packing.key(), packing.key())
    return best


@st.composite
def nodes(draw):
    sockets = draw(st.integers(2, 3))
    cores = draw(st.integers(2, 4))
    topo = generated(sockets, cores, 2)
    reserved = {0, sockets * cores}
    free = [cpu for cpu in range(sockets * cores * 2) if cpu not in reserved]
    rng = random.Random(draw(st.integers(0, 10 ** 6)))
    rng.shuffle(free)
    groups = []
    for _unit in range(draw(st.integers(0, 6))):
        size = draw(st.integers(1, 3))
        if len(free) <= size:
            break
        groups.append((frozenset(free[:size]), True))
        free = free[size:]
    numa_of_core = {core: topo.loc[min(cpus)][2] for core, cpus in topo.core_cpus.items()}
    return rooms_and_units(numa_of_core, topo.core_cpus, reserved, groups)


@settings(max_examples=60, deadline=None)
@given(nodes(), st.one_of(st.none(), st.integers(0, 3)))
def test_the_search_finds_the_best_of_every_placement(node, max_moves):
    rooms, units, _nodes = node
    found = search(rooms, units, 2, False, max_moves=max_moves, budget=30.0)
    assert found.proven
    assert found.key == brute_force(rooms, units, max_moves)
    packing = Packing(rooms, units, 2, False)
    for index, node_index in enumerate(found.where):
        packing.place(index, node_index)
    assert packing.key() == found.key and all(packing.fits(n) for n in range(len(rooms)))
