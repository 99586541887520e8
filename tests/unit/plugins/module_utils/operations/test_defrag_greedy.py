"""The greedy search, plan_defrag's fallback: whole cores per NUMA node; one strictly improving move at a time,
a unit moved at most once, none past max_moves; and the limit the exact search exists for (the issue's node,
where no single move leads to the best packing)."""

from __future__ import annotations

import pytest
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
