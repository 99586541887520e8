"""The greedy search, plan_defrag's fallback: whole cores per NUMA node; one strictly improving move at a time,
a unit moved at most once, none past max_moves; and the limit the exact search exists for (the issue's node,
where no single move leads to the best packing)."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations import defrag_greedy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.defrag_greedy import (greedy_moves,
                                                                                                   whole_per_numa)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated

TOPO = generated(2, 4, 2)  # core g = {g, g + 8}; NUMA 0 = cores 0-3, NUMA 1 = cores 4-7
ISSUE = [frozenset({3, 13}), frozenset({12, 15}), frozenset({7})]
ISSUE_FREE = frozenset(set(range(16)) - {0, 8, 3, 13, 12, 15, 7})


@pytest.mark.parametrize("pool, want", [
    (range(16), {0: 4, 1: 4}),
    (ISSUE_FREE, {0: 2, 1: 1}),
    ((), {0: 0, 1: 0}),
])
def test_whole_cores_per_numa_node(pool, want):
    assert whole_per_numa(TOPO, frozenset(pool)) == want


def test_on_the_issue_node_the_greedy_search_stops_at_three_whole_cores():
    moves = greedy_moves(TOPO, ISSUE_FREE, ISSUE, False)
    assert moves == [(0, frozenset({5, 13}))]  # the unit across both nodes goes to NUMA 1
    after = set(ISSUE_FREE) | ISSUE[0]
    after -= moves[0][1]
    assert max(whole_per_numa(TOPO, frozenset(after)).values()) == 3  # the best packing has 4 (test_defrag_search)


def test_max_moves_zero_moves_nothing():
    assert greedy_moves(TOPO, ISSUE_FREE, ISSUE, False, max_moves=0) == []


def test_under_full_pcpus_only_a_unit_without_whole_cores_stays():
    """The docs' promise (issue 34, defragmentation 6): such a unit stays where it is; a whole-core unit still moves.
    ISSUE[2] (CPU 7, half a core) moves without the option (below) and never with it."""
    free = frozenset(set(range(16)) - {0, 8, 7})
    assert [index for index, _place in greedy_moves(TOPO, free, [frozenset({7})], False)] == [0]
    assert greedy_moves(TOPO, free, [frozenset({7})], True) == []
    assert all(index == 0 for index, _place in greedy_moves(TOPO, ISSUE_FREE, ISSUE, True))


def test_at_its_deadline_it_stops_with_the_moves_found_so_far(monkeypatch):
    """The time budget bounds the fallback too (defragmentation 5): at the deadline the moves so far, each an
    improvement, a prefix of the unbounded plan."""
    units = [frozenset({1}), frozenset({10}), frozenset({4}), frozenset({14})]
    free = frozenset(set(range(16)) - {0, 8} - set().union(*units))
    unbounded = greedy_moves(TOPO, free, units, False)
    assert len(unbounded) >= 2
    assert greedy_moves(TOPO, free, units, False, deadline=0.0) == []  # past already
    ticks = iter(range(1000))
    monkeypatch.setattr(defrag_greedy.time, "monotonic", lambda: next(ticks))
    bounded = greedy_moves(TOPO, free, units, False, deadline=len(units) + 0.5)  # one step's checks, then stop
    assert bounded == unbounded[:len(bounded)] and len(bounded) < len(unbounded)
