# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The greedy defragmentation search, ``plan_defrag``'s fallback when the exact search finds no safe order.

Each step takes the one move (a unit given the same number of CPUs elsewhere) that raises the most whole cores on
one NUMA node and then the free whole cores the most, fewest CPUs changed first on a tie; a unit moves at most once;
it stops when no move raises them. Every move it makes is needed (each strictly improves), but a result that two
simultaneous moves reach and no single one improves towards is not found (``defrag_search`` finds it). Candidate
places for a unit, per NUMA node: the CPUs of the cores with the fewest free CPUs first (filling half-used cores),
and, for a unit of whole cores, whole cores (``full-pcpus-only`` allows only those). Scoring is incremental (only
the cores a move touches are counted again).
"""

from __future__ import annotations

import time
from typing import Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

from ..kubelet.topology import Topology

Score = Tuple[int, int]  # (most free whole cores on one NUMA node, free whole cores)


def whole_per_numa(topo: Topology, pool: FrozenSet[int]) -> Dict[int, int]:
    """Per NUMA node, its cores whose every CPU is in ``pool``."""
    counts = {node: 0 for node in topo.numa_cpus}
    for cpus in topo.core_cpus.values():
        if cpus and cpus <= pool:
            counts[topo.loc[min(cpus)][2]] += 1
    return counts


class _Pool:
    """The free CPUs with the counts the score needs, updated per CPU."""

    def __init__(self, topo: Topology, free: FrozenSet[int]) -> None:
        self.topo = topo
        self.free: Set[int] = set(free)
        self.core_of = {cpu: loc[0] for cpu, loc in topo.loc.items()}
        self.core_numa = {core: topo.loc[min(cpus)][2] for core, cpus in topo.core_cpus.items() if cpus}
        self.core_free = {core: len(cpus & free) for core, cpus in topo.core_cpus.items()}
        self.whole = whole_per_numa(topo, free)

    def score(self) -> Score:
        return max(self.whole.values(), default=0), sum(self.whole.values())

    def _count(self, cpus: FrozenSet[int], delta: int) -> None:
        for cpu in cpus:
            core = self.core_of[cpu]
            size = len(self.topo.core_cpus[core])
            was_whole = self.core_free[core] == size
            self.core_free[core] += delta
            if was_whole != (self.core_free[core] == size):
                self.whole[self.core_numa[core]] += 1 if not was_whole else -1

    def release(self, cpus: FrozenSet[int]) -> None:
        self.free |= cpus
        self._count(cpus, 1)

    def take(self, cpus: FrozenSet[int]) -> None:
        self.free -= cpus
        self._count(cpus, -1)


def _candidates(pool: _Pool, own: FrozenSet[int], whole_only: bool,
                homes: Optional[FrozenSet[int]] = None) -> List[FrozenSet[int]]:
    """Places for a unit of ``len(own)`` CPUs once its own are free: per NUMA node (of ``homes`` only, when given),
    half-used cores first, and whole cores first (only those when ``whole_only``)."""
    topo, size = pool.topo, len(own)
    threads = topo.cpus_per_core
    found: List[FrozenSet[int]] = []
    for node in sorted(n for n in topo.numa_cpus if homes is None or n in homes):
        cores = sorted((core for core, numa in pool.core_numa.items() if numa == node),
                       key=lambda core: (pool.core_free[core], core))
        orders = [] if whole_only else [cores]
        if size % threads == 0:
            orders.append([c for c in cores if pool.core_free[c] == len(topo.core_cpus[c])])
        for order in orders:
            picked: List[int] = []
            for core in order:
                picked.extend(sorted(cpu for cpu in topo.core_cpus[core] if cpu in pool.free))
                if len(picked) >= size:
                    break
            if len(picked) >= size:
                place = frozenset(picked[:size])
                if place != own and place not in found:
                    found.append(place)
    return found


def greedy_moves(topo: Topology, free: FrozenSet[int], holdings: Sequence[FrozenSet[int]], whole_only: bool,
                 max_moves: Optional[int] = None, *, deadline: Optional[float] = None,
                 movable: Optional[Sequence[bool]] = None,
                 homes: Optional[Sequence[Optional[FrozenSet[int]]]] = None) -> List[Tuple[int, FrozenSet[int]]]:
    """The greedy moves (unit index, its new CPUs) in order, from the exclusive pool ``free``. Under ``whole_only``
    (``full-pcpus-only``) a unit that does not hold whole cores never moves, nor does one ``movable`` says stays;
    ``homes[i]``: the NUMA nodes unit i may move to (None: any).
    At ``deadline`` (``time.monotonic``) it stops with the moves found so far: each improves on the one before, so
    any prefix is a valid plan."""
    pool = _Pool(topo, free)
    units = list(holdings)
    threads = topo.cpus_per_core
    moved: Set[int] = {index for index, own in enumerate(units)
                       if (whole_only and len(own) % threads) or (movable is not None and not movable[index])}
    moves: List[Tuple[int, FrozenSet[int]]] = []
    current = pool.score()
    while max_moves is None or len(moves) < max_moves:
        best: Optional[Tuple[Score, int, int, FrozenSet[int]]] = None
        for index, own in enumerate(units):
            if deadline is not None and time.monotonic() > deadline:
                return moves
            if index in moved:
                continue
            pool.release(own)
            for place in _candidates(pool, own, whole_only, None if homes is None else homes[index]):
                pool.take(place)
                score = pool.score()
                pool.release(place)
                changed = len(place - own)
                if score > current and (best is None or (score, -changed) > (best[0], -best[1])):
                    best = (score, changed, index, place)
            pool.take(own)
        if best is None:
            break
        current, _changed, index, place = best
        pool.release(units[index])
        pool.take(place)
        moved.add(index)
        units[index] = place
        moves.append((index, place))
    return moves
