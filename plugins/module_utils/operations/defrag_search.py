# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The best packing of a node's exclusive CPUs: which units stay, which move, and to which NUMA node.

A unit (a container, or the containers of a pod that share CPUs) either stays on its CPUs or moves whole onto one
NUMA node, which satisfies every Topology Manager policy and ``align-by-socket`` as an allocation would. Inside a
NUMA node a moved unit may take any free CPUs (``defrag_moves`` picks them), so what a node can keep whole depends
only on what stays and how many CPUs move in. With ``Z`` its non-reserved cores that nothing staying touches, ``C``
its allocatable CPUs, ``U`` the CPUs of everything that ends on it and ``T`` threads per core, at most
``min(Z, (C - U) // T)`` cores stay whole, and filling the half-used cores first reaches it. Under
``full-pcpus-only`` a moved unit takes whole cores only: ``Z - A // T`` for ``A`` CPUs moved in.

Objective, in order: the most whole cores on one NUMA node (the largest single-NUMA whole-core request), the free
whole cores, the fewest units moved, the fewest CPUs moved to another NUMA node (the CPUs changed inside a node are
``defrag_moves``' to keep few).

Search: a climb seeds it (clear the one core whose units' moves raise the objective most, again while one does;
then every move that is not needed is dropped), then branch and bound decides unit by unit (stay, or move to a
node) with every undecided unit floating, which bounds the result: the cores nothing decided to stay touches, and
the CPUs still to place, which must land somewhere. A search that ends within its time budget has proven its
result best; one that does not returns the best it found.
"""

from __future__ import annotations

import time
from typing import Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Set, Tuple

STAY = -1
FLOAT = -2
_CLOCK_EVERY = 1024  # search nodes between two looks at the clock
TIES = 8  # placements of the best objective kept, for the one with the fewest live moves

Key = Tuple[int, int, int, int]  # (most whole cores on one node, whole cores, -units moved, -CPUs moved across)


class Unit(NamedTuple):
    """What moves together: its size, the CPUs it holds per NUMA node (index), the cores it touches, whether it may
    move, and where to (``homes``: the nodes, by index, its memory or devices are on; None: any)."""

    size: int
    held: Tuple[Tuple[int, int], ...]
    cores: Tuple[int, ...]
    movable: bool
    homes: Optional[FrozenSet[int]] = None

    def may_go(self, node: int) -> bool:
        return self.homes is None or node in self.homes


class Room(NamedTuple):
    """A NUMA node (index) as the search sees it: its allocatable CPUs and its cores without a reserved CPU."""

    capacity: int
    cores: FrozenSet[int]


class Result(NamedTuple):
    where: List[int]  # per unit: STAY or the node index it moves to
    key: Key
    proven: bool
    ties: List[List[int]]  # other placements as good (``where`` first)


class Packing:
    """Units placed on nodes, with per-node counts updated per decision (``place``) and the objective from them."""

    def __init__(self, rooms: Sequence[Room], units: Sequence[Unit], threads: int, whole_only: bool) -> None:
        self.rooms, self.units, self.threads, self.whole_only = rooms, units, threads, whole_only
        self.used = [0] * len(rooms)
        self.moved_in = [0] * len(rooms)
        self.node_of = {core: n for n, room in enumerate(rooms) for core in room.cores}
        self.holders = {core: 0 for core in self.node_of}
        self.clear = [len(room.cores) for room in rooms]
        self.where = [FLOAT] * len(units)
        self.moves = self.across = self.floating = 0
        for index in range(len(units)):
            self.floating += units[index].size
            self.place(index, STAY)

    def _hold(self, unit: Unit, sign: int) -> None:
        for node, count in unit.held:
            self.used[node] += sign * count
        for core in unit.cores:
            if core in self.holders:
                before = self.holders[core]
                self.holders[core] = before + sign
                if (before == 0) != (before + sign == 0):
                    self.clear[self.node_of[core]] -= sign

    def _put(self, index: int, where: int, sign: int) -> None:
        unit = self.units[index]
        if where == FLOAT:
            self.floating += sign * unit.size
        elif where == STAY:
            self._hold(unit, sign)
        else:
            self.used[where] += sign * unit.size
            self.moved_in[where] += sign * unit.size
            self.moves += sign
            self.across += sign * (unit.size - dict(unit.held).get(where, 0))

    def place(self, index: int, where: int) -> None:
        if self.where[index] != where:
            self._put(index, self.where[index], -1)
            self._put(index, where, 1)
            self.where[index] = where

    def whole(self, node: int, extra: int = 0) -> int:
        """The node's whole cores, with ``extra`` more CPUs moved in."""
        if self.whole_only:
            return self.clear[node] - (self.moved_in[node] + extra) // self.threads
        return min(self.clear[node], (self.rooms[node].capacity - self.used[node] - extra) // self.threads)

    def fits(self, node: int, extra: int = 0) -> bool:
        """Whether what is on the node, and ``extra`` more CPUs moved in, fits it."""
        if self.used[node] + extra > self.rooms[node].capacity:
            return False
        return not self.whole_only or self.moved_in[node] + extra <= self.clear[node] * self.threads

    def key(self) -> Key:
        whole = [self.whole(node) for node in range(len(self.rooms))]
        return max(whole, default=0), sum(whole), -self.moves, -self.across

    def bound(self) -> Tuple[int, int]:
        """The best (most on one node, total) whole cores any decision of the floating units can reach."""
        room = [r.capacity - u for r, u in zip(self.rooms, self.used)]
        total_room = sum(room)
        best_one, total = 0, 0
        for node in range(len(self.rooms)):
            clear = self.clear[node] - (self.moved_in[node] // self.threads if self.whole_only else 0)
            forced = max(0, self.floating - (total_room - room[node]))
            best_one = max(best_one, min(clear, (room[node] - forced) // self.threads))
            total += min(clear, room[node] // self.threads)
        return best_one, min(total, (total_room - self.floating) // self.threads)


def _lift(packing: Packing, lifted: Sequence[int], max_moves: Optional[int]) -> bool:
    """Moves each of ``lifted`` (staying units) to the node where the objective ends highest; False when one has
    nowhere to go (the others are moved all the same)."""
    for index in lifted:
        packing.place(index, FLOAT)
    whole = [packing.whole(node) for node in range(len(packing.rooms))]
    placed = True
    for index in lifted:
        size = packing.units[index].size
        best: Optional[Tuple[Tuple[int, int, int], int]] = None
        for node in range(len(packing.rooms)):
            if not packing.fits(node, size) or not packing.units[index].may_go(node):
                continue
            after = packing.whole(node, size)
            others = max((w for n, w in enumerate(whole) if n != node), default=0)
            rank = (max(others, after), after - whole[node], dict(packing.units[index].held).get(node, 0))
            if best is None or rank > best[0]:
                best = (rank, node)
        if best is None or (max_moves is not None and packing.moves >= max_moves):
            packing.place(index, STAY)
            placed = False
            continue
        packing.place(index, best[1])
        whole[best[1]] = packing.whole(best[1])
    return placed


def _candidates(packing: Packing, on_core: Dict[int, List[int]], blocked: Set[int]) -> List[List[int]]:
    """What a climbing step may lift: the staying units of one core, or of a node's two or three cheapest cores
    (fewest units, then fewest CPUs, to lift) when one core alone cannot raise its node (its room binds)."""
    single: List[Tuple[Tuple[int, int], int, List[int]]] = []
    for core, holders in packing.holders.items():
        if holders and core not in blocked:
            lifted = [i for i in on_core[core] if packing.where[i] == STAY]
            single.append(((len(lifted), sum(packing.units[i].size for i in lifted)), core, lifted))
    found = [lifted for _cost, _core, lifted in single]
    single.sort()
    for node in range(len(packing.rooms)):
        cheapest = [lifted for _cost, core, lifted in single if packing.node_of[core] == node][:3]
        for count in (2, 3):
            if len(cheapest) >= count:
                found.append(sorted(set().union(*cheapest[:count])))
    return found


def climb(packing: Packing, max_moves: Optional[int], deadline: float) -> None:
    """Clears the core (or a node's few cheapest cores) whose units' moves raise the objective most, while one
    does; then keeps every moved unit whose move the result does not need."""
    on_core: Dict[int, List[int]] = {}
    for index, unit in enumerate(packing.units):
        for core in unit.cores:
            on_core.setdefault(core, []).append(index)
    blocked = {core for core, indexes in on_core.items() if not all(packing.units[i].movable for i in indexes)}
    while time.monotonic() < deadline:
        current = packing.key()
        best: Optional[Tuple[Key, List[Tuple[int, int]]]] = None
        for lifted in _candidates(packing, on_core, blocked):
            lifted.sort(key=lambda i: -packing.units[i].size)
            if _lift(packing, lifted, max_moves):
                key = packing.key()
                if key[:2] > current[:2] and (best is None or key > best[0]):
                    best = (key, [(i, packing.where[i]) for i in lifted])
            for index in lifted:
                packing.place(index, STAY)
        if best is None:
            break
        for index, where in best[1]:
            packing.place(index, where)
    drop_needless(packing)


def drop_needless(packing: Packing) -> None:
    """Keeps in place every moved unit whose move does not raise the objective (fewer moves, same score)."""
    for index in sorted(range(len(packing.units)), key=lambda i: packing.units[i].size):
        where = packing.where[index]
        if where < 0:
            continue
        before = packing.key()
        packing.place(index, STAY)
        if not all(packing.fits(n) for n in range(len(packing.rooms))) or packing.key() < before:
            packing.place(index, where)


class _OutOfTime(Exception):
    pass


class _Search:
    """Branch and bound over the units in ``order``: stay first, then each node with room. It keeps up to
    ``TIES`` placements of the best objective (their live moves may differ in number: a swap needs a detour)."""

    def __init__(self, packing: Packing, order: Sequence[int], max_moves: Optional[int], deadline: float,
                 best: Tuple[Key, List[int]]) -> None:
        self.packing, self.order, self.max_moves, self.deadline = packing, order, max_moves, deadline
        self.best_key = best[0]
        self.ties = [best[1]]
        self.visited = 0

    def run(self, position: int) -> None:
        self.visited += 1
        if self.visited % _CLOCK_EVERY == 0 and time.monotonic() > self.deadline:
            raise _OutOfTime()
        packing = self.packing
        if position == len(self.order):
            key = packing.key()
            if key > self.best_key:
                self.best_key, self.ties = key, [list(packing.where)]
            elif key == self.best_key and len(self.ties) < TIES and packing.where not in self.ties:
                self.ties.append(list(packing.where))
            return
        most, total = packing.bound()
        best = self.best_key
        tied = (most, total) == best[:2] and (-packing.moves, -packing.across) == best[2:] and len(self.ties) < TIES
        if (most, total) < best[:2] or ((most, total) == best[:2] and (-packing.moves, -packing.across) <= best[2:]
                                        and not tied):
            return
        index = self.order[position]
        unit = packing.units[index]
        packing.place(index, STAY)
        if all(packing.fits(node) for node, _count in unit.held):
            self.run(position + 1)
        if self.max_moves is None or packing.moves < self.max_moves:
            home = [node for node, _count in sorted(unit.held, key=lambda held: -held[1])]
            for node in home + [n for n in range(len(packing.rooms)) if n not in home]:
                if not unit.may_go(node):
                    continue
                packing.place(index, node)
                if packing.fits(node):
                    self.run(position + 1)
        packing.place(index, FLOAT)


def search(rooms: Sequence[Room], units: Sequence[Unit], threads: int, whole_only: bool, *,
           max_moves: Optional[int] = None, budget: float = 0.5) -> Result:
    """The best placement the budget (seconds) finds for ``units``; ``proven`` when the search ended within it."""
    deadline = time.monotonic() + budget
    packing = Packing(rooms, units, threads, whole_only)
    climb(packing, max_moves, deadline)
    best = (packing.key(), list(packing.where))
    movable = [i for i, unit in enumerate(units) if unit.movable]
    for index in movable:
        packing.place(index, FLOAT)
    order = sorted(movable, key=lambda i: (min(n for n, _c in units[i].held), min(units[i].cores, default=0)))
    finder = _Search(packing, order, max_moves, deadline, best)
    try:
        finder.run(0)
        proven = True
    except _OutOfTime:
        proven = False
    return Result(finder.ties[0], finder.best_key, proven, finder.ties)


def rooms_and_units(numa_of_core: Dict[int, int], core_cpus: Dict[int, FrozenSet[int]], reserved: Set[int],
                    groups: Sequence[Tuple[FrozenSet[int], bool]],
                    homes: Optional[Sequence[Optional[FrozenSet[int]]]] = None) \
        -> Tuple[List[Room], List[Unit], List[int]]:
    """The search's view of a node: rooms per NUMA node (``nodes[i]`` is room i's NUMA id) and a unit per group of
    CPUs (its CPUs, and whether it may move; ``homes[i]``: the NUMA ids group i may move to, None: any)."""
    nodes = sorted(set(numa_of_core.values()))
    index = {numa: i for i, numa in enumerate(nodes)}
    core_of = {cpu: core for core, cpus in core_cpus.items() for cpu in cpus}
    capacity = [0] * len(nodes)
    clear: List[Set[int]] = [set() for _node in nodes]
    for core, cpus in core_cpus.items():
        node = index[numa_of_core[core]]
        capacity[node] += len(cpus - reserved)
        if not cpus & reserved:
            clear[node].add(core)
    rooms = [Room(capacity[i], frozenset(clear[i])) for i in range(len(nodes))]
    units: List[Unit] = []
    for cpus, movable in groups:
        held: Dict[int, int] = {}
        for cpu in cpus:
            node = index[numa_of_core[core_of[cpu]]]
            held[node] = held.get(node, 0) + 1
        allowed = None if homes is None or homes[len(units)] is None else frozenset(
            index[numa] for numa in homes[len(units)] or () if numa in index)
        units.append(Unit(len(cpus), tuple(sorted(held.items())), tuple(sorted({core_of[c] for c in cpus})),
                          movable and any(len(cpus) <= room.capacity for room in rooms), allowed))
    return rooms, units, nodes
