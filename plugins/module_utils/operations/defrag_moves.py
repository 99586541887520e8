# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""From a packing to live moves: the CPUs each moved unit takes, and an order in which no CPU is ever held by two.

``targets`` gives the units ``defrag_search`` moved to a NUMA node their CPUs there: the free CPUs of half-used
cores first, then as few whole cores as the rest needs (whole cores only under ``full-pcpus-only``), which reaches
the whole cores the search counted. Among equal choices it keeps a unit's own CPUs, then takes CPUs free now (a
move that waits for nobody), and gives a unit the CPUs of as few cores as it can.

``sequence`` orders the moves: a unit moves once every CPU it goes to is free. Units that wait for each other (a
swap, a chain that closes) are untied by a detour: the smallest of them moves first to CPUs that are free and
that no other waiting unit goes to (its own goal's and its own first, then its NUMA node's), and on to its place
when that is free. Without such CPUs there is no safe order, and ``None`` says so.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Set, Tuple

from ..kubelet.topology import Topology
from .defrag_search import STAY


class Step(NamedTuple):
    unit: int
    cpus_before: FrozenSet[int]
    cpus_after: FrozenSet[int]


def _slots(topo: Topology, avail: Set[int], needed: int, whole_only: bool, prefer: Dict[int, int]) -> List[int]:
    """``needed`` CPUs out of ``avail`` that keep the most cores whole; ``prefer`` ranks CPUs (lower first)."""
    cores: Dict[int, List[int]] = {}
    for cpu in avail:
        cores.setdefault(topo.loc[cpu][0], []).append(cpu)
    whole = [core for core, cpus in cores.items() if len(cpus) == len(topo.core_cpus[core])]
    partial = [] if whole_only else sorted(cpu for core, cpus in cores.items() if core not in whole for cpu in cpus)

    def rank(cpu: int) -> Tuple[int, int]:
        return prefer.get(cpu, 2), cpu

    if needed <= len(partial):
        return sorted(partial, key=rank)[:needed]
    taken = list(partial)
    whole.sort(key=lambda core: (sum(rank(cpu)[0] for cpu in cores[core]), core))
    for core in whole:
        taken.extend(sorted(cores[core], key=rank)[:needed - len(taken)])
        if len(taken) == needed:
            break
    return taken


def targets(topo: Topology, nodes: Sequence[int], reserved: Set[int], holdings: Sequence[FrozenSet[int]],
            where: Sequence[int], *, whole_only: bool, own_first: bool = True) -> List[FrozenSet[int]]:
    """Every unit's CPUs after the moves (``where[i]``: STAY or the index in ``nodes`` of its NUMA node); among
    equal choices a unit's own CPUs before those free now, or after them (``own_first`` false: fewer waits)."""
    result = list(holdings)
    held_now = {cpu for cpus in holdings for cpu in cpus}
    staying = {cpu for unit, cpus in enumerate(holdings) if where[unit] == STAY for cpu in cpus}
    for index, numa in enumerate(nodes):
        incoming = sorted((u for u in range(len(holdings)) if where[u] == index), key=lambda u: -len(holdings[u]))
        if not incoming:
            continue
        avail = set(topo.numa_cpus[numa]) - reserved - staying
        prefer = {cpu: int((cpu in holdings[u]) != own_first) for u in incoming for cpu in topo.numa_cpus[numa]
                  if cpu in holdings[u] or cpu not in held_now}
        slots = set(_slots(topo, avail, sum(len(holdings[u]) for u in incoming), whole_only, prefer))
        for unit in incoming:  # its own CPUs first
            mine = set(sorted(slots & holdings[unit])[:len(holdings[unit])])
            if whole_only:
                mine = {cpu for cpu in mine if topo.core_cpus[topo.loc[cpu][0]] <= mine}
            slots -= mine
            result[unit] = frozenset(mine)
        for unit in incoming:
            mine = set(result[unit])
            while len(mine) < len(holdings[unit]):
                per_core: Dict[int, List[int]] = {}
                for cpu in slots:
                    per_core.setdefault(topo.loc[cpu][0], []).append(cpu)
                short = len(holdings[unit]) - len(mine)
                core = min(per_core, key=lambda c: (len(per_core[c]) < short,  # the tightest core that holds it all
                                                    abs(len(per_core[c]) - short), c))
                mine.update(sorted(per_core[core])[:short])
                slots -= mine
            result[unit] = frozenset(mine)
    return result


def sequence(holdings: Sequence[FrozenSet[int]], goals: Sequence[FrozenSet[int]], spare: Set[int],
             numa_of: Dict[int, int]) -> Optional[List[Step]]:
    """The moves from ``holdings`` to ``goals`` in an order where no CPU is held by two units at any step;
    ``spare``: the CPUs free before the moves (reserved ones excluded)."""
    owner = {cpu: unit for unit, cpus in enumerate(holdings) for cpu in cpus}
    usable = spare.union(owner)
    current = list(holdings)
    pending = [unit for unit in range(len(goals)) if goals[unit] != holdings[unit]]
    steps: List[Step] = []

    def move(unit: int, cpus: FrozenSet[int]) -> None:
        for cpu in current[unit]:
            del owner[cpu]
        for cpu in cpus:
            owner[cpu] = unit
        steps.append(Step(unit, current[unit], cpus))
        current[unit] = cpus

    for _round in range(2 * len(pending) + 1):
        ready = [unit for unit in pending if all(owner.get(cpu, unit) == unit for cpu in goals[unit])]
        for unit in ready:
            move(unit, goals[unit])
        pending = [unit for unit in pending if unit not in ready]
        if not pending:
            return steps
        if ready:
            continue
        for unit in sorted(pending, key=lambda u: (len(current[u]), u)):
            others = {cpu for other in pending if other != unit for cpu in goals[other]}
            if not others & current[unit]:
                continue  # nobody waits for it
            room = [cpu for cpu in usable if owner.get(cpu, unit) == unit and cpu not in others]
            if len(room) >= len(current[unit]):
                home = {numa_of[cpu] for cpu in goals[unit]}
                room.sort(key=lambda cpu: (cpu not in goals[unit], cpu not in current[unit], numa_of[cpu] not in home,
                                           cpu))
                move(unit, frozenset(room[:len(current[unit])]))
                break
        else:
            return None
    return None
