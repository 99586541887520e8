"""From a packing to live moves: moved units take the free CPUs of half-used cores first and then as few whole
cores as they need (whole cores only under full-pcpus-only), keep their own CPUs where they can; and the moves come
in an order where no CPU is ever held by two units: a chain from its free end, a swap through free CPUs (the unit
appears twice), no order at all without free CPUs to pass through."""

from __future__ import annotations

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.defrag_moves import (Step, sequence,
                                                                                                  targets)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.defrag_search import STAY
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated

# Two NUMA nodes of 4 cores x 2 threads, core g = {g, g + 8}: NUMA 0 = CPUs 0-3, 8-11; core 0 reserved.
TOPO = generated(2, 4, 2)
RESERVED = {0, 8}
NUMA_OF = {cpu: TOPO.loc[cpu][2] for cpu in range(16) if cpu not in RESERVED}


def cpus(*values):
    return frozenset(values)


def whole_free(taken):
    return sorted(core for core, members in TOPO.core_cpus.items() if not members & (set(taken) | RESERVED))


def test_the_issue_example_all_three_into_numa_0_leaves_numa_1_whole():
    holdings = [cpus(3, 13), cpus(12, 15), cpus(7)]
    goals = targets(TOPO, [0, 1], RESERVED, holdings, [0, 0, 0], whole_only=False)
    assert [len(goal) for goal in goals] == [2, 2, 1]
    assert set().union(*goals) <= {1, 2, 3, 9, 10, 11} and len(set().union(*goals)) == 5
    assert goals[0] >= {3}  # the unit keeps the CPU it already had there
    assert whole_free(set().union(*goals)) == [4, 5, 6, 7]


@pytest.mark.parametrize("own_first, goal", [(True, cpus(1)), (False, cpus(10))])
def test_half_used_cores_are_filled_first_own_cpus_or_free_ones_first(own_first, goal):
    # a staying unit on 2 leaves core 2's CPU 10 free; the moving unit holds 1 (core 1's sibling 9 is held too)
    holdings = [cpus(2), cpus(1), cpus(9)]
    goals = targets(TOPO, [0, 1], RESERVED, holdings, [STAY, 0, STAY], whole_only=False, own_first=own_first)
    assert goals[1] == goal and goals[0] == cpus(2) and goals[2] == cpus(9)


def test_whole_cores_only_under_full_pcpus_only():
    holdings = [cpus(2), cpus(5, 13)]  # the 2-CPU unit moves to NUMA 0, where core 2 is half held
    goals = targets(TOPO, [0, 1], RESERVED, holdings, [STAY, 0], whole_only=True)
    assert goals[1] in (cpus(1, 9), cpus(3, 11))


def test_a_chain_moves_from_its_free_end():
    holdings = [cpus(1), cpus(2)]
    goals = [cpus(2), cpus(3)]  # 0 waits for 1, which goes to a free CPU
    assert sequence(holdings, goals, {3, 4}, NUMA_OF) == [Step(1, cpus(2), cpus(3)), Step(0, cpus(1), cpus(2))]


def test_a_swap_passes_through_free_cpus():
    holdings = [cpus(1), cpus(2)]
    goals = [cpus(2), cpus(1)]
    steps = sequence(holdings, goals, {5}, NUMA_OF)
    assert steps == [Step(0, cpus(1), cpus(5)), Step(1, cpus(2), cpus(1)), Step(0, cpus(5), cpus(2))]


def test_a_swap_without_free_cpus_has_no_safe_order():
    assert sequence([cpus(1), cpus(2)], [cpus(2), cpus(1)], set(), NUMA_OF) is None


def test_a_unit_passes_through_its_own_free_goal_when_the_spare_cpus_are_too_few():
    holdings = [cpus(1, 2, 3), cpus(4, 5, 6)]
    goals = [cpus(4, 5, 9), cpus(1, 2, 10)]  # 9 and 10 are free; 11 is the only other free CPU
    steps = sequence(holdings, goals, {9, 10, 11}, NUMA_OF)
    assert steps is not None and steps[-1].cpus_after in goals
    owner = {cpu: unit for unit, held in enumerate(holdings) for cpu in held}
    current = list(holdings)
    for step in steps:  # no CPU is held by two units at any step
        assert step.cpus_before == current[step.unit]
        assert all(owner.get(cpu, step.unit) == step.unit for cpu in step.cpus_after)
        for cpu in current[step.unit]:
            del owner[cpu]
        owner.update(dict.fromkeys(step.cpus_after, step.unit))
        current[step.unit] = step.cpus_after
    assert current == goals
