# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""How the kubelet's static policy chooses CPUs (ALGORITHM.md sections 10-13).

``take_by_topology_packed`` is the topology-aware best fit, ``take_by_topology_distributed`` the
NUMA-distributed algorithm. Both follow the kubelet's choices and sort orders exactly, except for the
three documented kubelet defects (ALGORITHM.md D1-D3): whole-unit takes only add CPUs that are still
free (D2), remainder subsets are feasible only in whole groups (D1), and the combination chosen by the
balance score is the one allocated (D3).
"""

from __future__ import annotations

import math
from functools import partial
from itertools import combinations
from typing import AbstractSet, Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from ..errors import AllocationError
from .cpuset import CPUSet
from .topology import Topology

PACKED = "packed"
SPREAD = "spread"


class Accumulator:
    """The kubelet's cpuAccumulator: free CPUs ("details"), the need and the result.

    Free CPUs are kept per unit (core, socket, NUMA node, uncore cache); the unit relations among free
    CPUs (which cores of a socket still have a free CPU, ...) are derived from them when a sort needs them.
    """

    def __init__(self, topo: Topology, available: Iterable[int], need: int, strategy: str = PACKED,
                 minor: int = 35) -> None:
        self.topo = topo
        self.minor = minor  # kubelet 1.38: exact free-unit tests, the round-robin spread order
        self.need = need
        self.result: Set[int] = set()
        self.numa_first = topo.num_sockets >= topo.num_numa
        self.spread = strategy == SPREAD
        free = topo.all_cpus.as_frozenset().intersection(available)
        self.free: Set[int] = set(free)
        self.by_core = _split(topo.core_cpus, free)
        self.by_socket = _split(topo.socket_cpus, free)
        self.by_numa = _split(topo.numa_cpus, free)
        self.by_uncore = _split(topo.uncore_cpus, free)

    def _inner(self, outer: Dict[int, Set[int]], unit: int, level: int) -> Set[int]:
        """Units of ``level`` (0 core, 1 socket, 2 NUMA, 3 uncore) among the free CPUs of ``outer[unit]``."""
        loc = self.topo.loc
        return {loc[cpu][level] for cpu in outer.get(unit, ())}

    # --- state ---------------------------------------------------------------------------------
    def is_satisfied(self) -> bool:
        return self.need < 1

    def is_failed(self) -> bool:
        return self.need > len(self.free)

    def needs_at_least(self, n: int) -> bool:
        return self.need >= n

    def take(self, cpus: Iterable[int]) -> None:
        """Claim the CPUs of ``cpus`` that are still free (D2); the need drops by what was added."""
        loc = self.topo.loc
        tables = (self.by_core, self.by_socket, self.by_numa, self.by_uncore)
        for cpu in cpus:
            if cpu not in self.free:
                continue
            self.free.discard(cpu)
            self.result.add(cpu)
            self.need -= 1
            for table, key in zip(tables, loc[cpu]):
                members = table[key]
                members.discard(cpu)
                if not members:
                    del table[key]

    # --- the kubelet's orders (ascending free CPUs in the unit, then id) -----------------------
    @staticmethod
    def _sorted(ids: Iterable[int], by: Dict[int, Set[int]]) -> List[int]:
        return sorted(ids, key=lambda unit: (len(by.get(unit, ())), unit))

    def sort_numa_nodes(self) -> List[int]:
        if self.numa_first:
            return self._sorted(self.by_numa, self.by_numa)
        out: List[int] = []
        for socket in self.sort_sockets():
            out.extend(self._sorted(self._inner(self.by_socket, socket, 2), self.by_numa))
        return out

    def sort_sockets(self) -> List[int]:
        if not self.numa_first:
            return self._sorted(self.by_socket, self.by_socket)
        out: List[int] = []
        for numa in self.sort_numa_nodes():
            out.extend(self._sorted(self._inner(self.by_numa, numa, 1), self.by_socket))
        return out

    def sort_cores(self) -> List[int]:
        out: List[int] = []
        if self.numa_first:
            for socket in self.sort_sockets():
                out.extend(self._sorted(self._inner(self.by_socket, socket, 0), self.by_core))
        else:
            for numa in self.sort_numa_nodes():
                out.extend(self._sorted(self._inner(self.by_numa, numa, 0), self.by_core))
        return out

    def sort_uncore_caches(self) -> List[int]:
        out: List[int] = []
        for numa in self.sort_numa_nodes():
            out.extend(self._sorted(self._inner(self.by_numa, numa, 3), self.by_uncore))
        return out

    def free_cpus(self) -> List[int]:
        """Single CPUs in the packed (by core) or spread (by socket) order."""
        out: List[int] = []
        if self.spread and self.minor >= 38:  # one CPU of every core of the socket, then the second ones, ...
            for socket in self.sort_sockets():
                cores = self._sorted({self.topo.loc[c][0] for c in self.by_socket.get(socket, ())}, self.by_core)
                lists = [sorted(c for c in self.by_core[core] if self.topo.loc[c][1] == socket) for core in cores]
                for index in range(max((len(items) for items in lists), default=0)):
                    out.extend(items[index] for items in lists if index < len(items))
        elif self.spread:
            for socket in self.sort_sockets():
                out.extend(sorted(self.by_socket.get(socket, ())))
        else:
            for core in self.sort_cores():
                out.extend(sorted(self.by_core.get(core, ())))
        return out

    # --- free units ------------------------------------------------------------------------------
    def free_numa_nodes(self) -> List[int]:
        full = self.topo.numa_cpus
        return [n for n in self.sort_numa_nodes() if len(self.by_numa.get(n, ())) == len(full[n])]

    def free_sockets(self) -> List[int]:
        if self.minor >= 38:  # the exact test: every CPU of the socket free
            return [s for s in self.sort_sockets() if len(self.by_socket.get(s, ())) == len(self.topo.socket_cpus[s])]
        per_socket = self.topo.cpus_per_socket
        return [s for s in self.sort_sockets() if len(self.by_socket.get(s, ())) == per_socket]

    def free_cores(self) -> List[int]:
        if self.minor >= 38:  # the exact test: every CPU of the core free
            return [c for c in self.sort_cores() if len(self.by_core.get(c, ())) == len(self.topo.core_cpus[c])]
        per_core = self.topo.cpus_per_core
        return [c for c in self.sort_cores() if len(self.by_core.get(c, ())) == per_core]

    def free_uncore_caches(self) -> List[int]:
        full = self.topo.uncore_cpus
        return [u for u in self.sort_uncore_caches() if len(self.by_uncore.get(u, ())) == len(full[u])]

    # --- takes -----------------------------------------------------------------------------------
    def _take_units(self, units: Sequence[int], members: Mapping[int, AbstractSet[int]]) -> None:
        for unit in units:
            cpus = members[unit]
            if self.needs_at_least(len(cpus)):
                self.take(cpus)

    def take_full_numa_nodes(self) -> None:
        self._take_units(self.free_numa_nodes(), self.topo.numa_cpus)

    def take_full_sockets(self) -> None:
        self._take_units(self.free_sockets(), self.topo.socket_cpus)

    def take_full_uncore(self) -> None:
        self._take_units(self.free_uncore_caches(), self.topo.uncore_cpus)

    def take_full_cores(self) -> None:
        self._take_units(self.free_cores(), self.topo.core_cpus)

    def take_partial_uncore(self, uncore: int) -> None:
        group = self.topo.cpus_per_core
        if group < 1:
            return
        cores_needed = (self.need + group - 1) // group
        cores = sorted(self._inner(self.by_uncore, uncore, 0))[:cores_needed]
        cpus: List[int] = sorted(c for core in cores for c in self.by_core.get(core, ()))
        if self.need % 2 != 0 and group > 1 and len(cpus) > self.need:
            cpus = cpus[:-1]
        if len(cpus) == self.need:
            self.take(cpus)

    def take_uncore_caches(self) -> None:
        per_uncore = self.topo.cpus_per_uncore
        for uncore in self.sort_uncore_caches():
            if self.needs_at_least(per_uncore):
                self.take_full_uncore()
            if self.is_satisfied():
                return
            self.take_partial_uncore(uncore)
            if self.is_satisfied():
                return

    def take_remaining_cpus(self) -> None:
        for cpu in self.free_cpus():
            self.take((cpu,))
            if self.is_satisfied():
                return

    def range_numa_nodes_needed(self, group: int, min_numas: int = 0) -> Tuple[int, int]:
        """The fewest and most NUMA nodes to try; from 1.38 the Topology Manager hint's node count, when it is in
        between, is the fewest."""
        num_numa = len(self.topo.numa_cpus)
        num_cpus = len(self.topo.loc)
        groups = (num_cpus - 1) // group + 1
        groups_per_numa = (groups - 1) // num_numa + 1
        groups_needed = (self.need - 1) // group + 1
        low, high = (groups_needed - 1) // groups_per_numa + 1, min(groups_needed, len(self.by_numa))
        if self.minor >= 38 and low < min_numas <= high:
            low = min_numas
        return low, high


def _split(units: Mapping[int, FrozenSet[int]], free: FrozenSet[int]) -> Dict[int, Set[int]]:
    """Free CPUs per unit, only units that have one."""
    out: Dict[int, Set[int]] = {}
    for unit, members in units.items():
        mine = members & free
        if mine:
            out[unit] = set(mine)
    return out


def _not_enough(requested: int, available: AbstractSet[int]) -> AllocationError:
    return AllocationError("not enough cpus available to satisfy request: requested=%d, available=%d"
                           % (requested, len(available)))


def take_by_topology_packed(topo: Topology, available: AbstractSet[int], num_cpus: int,
                            strategy: str = PACKED, prefer_align_by_uncore: bool = False, *, minor: int = 35) -> CPUSet:
    """takeByTopologyNUMAPacked: whole NUMA nodes/sockets, [uncore], whole cores, then single CPUs."""
    acc = Accumulator(topo, available, num_cpus, strategy, minor)
    if acc.is_satisfied():
        return CPUSet._trusted(acc.result)
    if acc.is_failed():
        raise _not_enough(num_cpus, available)
    steps = [acc.take_full_numa_nodes, acc.take_full_sockets]
    if not acc.numa_first:
        steps.reverse()
    if prefer_align_by_uncore:
        steps.append(acc.take_uncore_caches)
    if strategy != SPREAD:
        steps.append(acc.take_full_cores)
    steps.append(acc.take_remaining_cpus)
    for step in steps:
        step()
        if acc.is_satisfied():
            return CPUSet._trusted(acc.result)
    raise AllocationError("failed to allocate cpus")


def _go_round3(value: float) -> float:
    """math.Round(v*1000)/1000 with Go's half-away-from-zero rounding."""
    scaled = value * 1000
    whole = float(math.trunc(scaled))
    if abs(scaled - whole) >= 0.5:
        whole += math.copysign(1.0, scaled)
    return whole / 1000


def standard_deviation(values: Sequence[int]) -> float:
    mean = _go_round3(float(sum(values)) / len(values))
    spread = 0.0
    for value in values:
        spread += (value - mean) * (value - mean)
    return _go_round3(math.sqrt(spread / len(values)))


def _spend(after: Dict[int, int], group: int, numa: int) -> None:
    after[numa] -= group


def _round_robin(subset: Sequence[int], remainder: int, group: int, room: Callable[[int], int],
                 give: Callable[[int], object]) -> int:
    """Hand out ``group`` CPUs at a time over ``subset`` (skipping nodes with less room than a group) until
    the remainder is placed; returns what could not be placed (0 unless no node has room left)."""
    while remainder > 0:
        progressed = False
        for numa in subset:
            if remainder == 0:
                break
            if room(numa) < group:
                continue
            give(numa)
            remainder -= group
            progressed = True
        if not progressed:
            break
    return remainder


def _best_combo(acc: Accumulator, numas: Sequence[int], k: int, n: int, group: int, *,
                align_by_socket: bool = False) -> Optional[Tuple[Tuple[int, ...], Tuple[int, ...]]]:
    """Score every k-combination of NUMA nodes; the first with the strictly smallest balance wins. With
    ``align_by_socket`` (1.37+), a combination within one socket beats every other whatever its balance, the
    distribution is lowered to what every node of the combination holds in whole groups, and the search stops
    early only on a perfect balance within one socket."""
    free = {numa: len(acc.by_numa.get(numa, ())) for numa in numas}
    best_balance = math.inf
    best: Optional[Tuple[Tuple[int, ...], Tuple[int, ...]]] = None
    best_in_one_socket = False
    for combo in combinations(numas, k):
        if best_balance == 0 and (not align_by_socket or best_in_one_socket):
            break
        if sum(free[m] for m in combo) < n or sum(free[m] // group for m in combo) * group < n:
            continue
        distribution = (n // k // group) * group
        if align_by_socket:
            distribution = min([distribution] + [free[m] // group * group for m in combo])
        if any(free[m] < distribution for m in combo):
            continue
        after = dict(free)
        for numa in combo:
            after[numa] -= distribution
        remainder = n - distribution * k
        candidates = [m for m in combo if after[m] >= group]
        local_balance = math.inf
        local_subset: Tuple[int, ...] = ()
        if remainder == 0:
            local_balance = standard_deviation([after[m] for m in numas])
        size = len(candidates)
        while remainder > 0 and size >= 1:
            for subset in combinations(candidates, size):
                if sum(after[m] // group for m in subset) * group < remainder:  # D1: whole groups only
                    continue
                trial = dict(after)
                _round_robin(subset, remainder, group, trial.__getitem__, partial(_spend, trial, group))
                balance = standard_deviation([trial[m] for m in numas])
                if balance < local_balance:
                    local_balance, local_subset = balance, subset
            size -= 1
        in_one_socket = align_by_socket and len(acc.topo.sockets_in_numa_nodes(*combo)) <= 1
        better = local_balance < best_balance
        if align_by_socket and in_one_socket != best_in_one_socket and local_balance < math.inf:
            better = in_one_socket
        if better:
            best_balance, best_in_one_socket = local_balance, in_one_socket
            best = (combo, local_subset)
    return best


def take_by_topology_distributed(topo: Topology, available: AbstractSet[int], num_cpus: int, group: int = 1,
                                 strategy: str = PACKED, *, minor: int = 35, align_by_socket: bool = False,
                                 min_numas: int = 0) -> CPUSet:
    """takeByTopologyNUMADistributed: spread the request evenly over the fewest balanced NUMA nodes.

    ``minor`` 37 and 38 follow those kubelets: align-by-socket inside the search (``_best_combo``) and the
    distribution lowered to what every chosen node holds in whole groups (37), the hint's NUMA count as the fewest
    nodes (``min_numas``, 38)."""
    group = max(group, 1)
    if num_cpus % group != 0:
        return take_by_topology_packed(topo, available, num_cpus, strategy, False, minor=minor)
    acc = Accumulator(topo, available, num_cpus, strategy, minor)
    if acc.is_satisfied():
        return CPUSet._trusted(acc.result)
    if acc.is_failed():
        raise _not_enough(num_cpus, available)
    numas = acc.sort_numa_nodes()
    low, high = acc.range_numa_nodes_needed(group, min_numas)
    for k in range(low, high + 1):
        best = _best_combo(acc, numas, k, num_cpus, group, align_by_socket=align_by_socket and minor >= 37)
        if best is None:
            continue
        combo, subset = best
        distribution = (num_cpus // len(combo) // group) * group
        if minor >= 37:  # always lowered to what every chosen node holds in whole groups
            distribution = min([distribution] + [len(acc.by_numa.get(m, ())) // group * group for m in combo])
        for numa in combo:
            acc.take(take_by_topology_packed(topo, acc.by_numa.get(numa, set()), distribution, strategy, False,
                                             minor=minor))
        _round_robin(subset, num_cpus - distribution * len(combo), group,
                     lambda numa: len(acc.by_numa.get(numa, ())),
                     lambda numa: acc.take(take_by_topology_packed(topo, acc.by_numa[numa], group, strategy, False,
                                                                   minor=minor)))
        if acc.need > 0:
            raise AllocationError("accounting error, not enough CPUs allocated, remaining: %d" % acc.need)
        if acc.need < 0:
            raise AllocationError("accounting error, too many CPUs allocated, remaining: %d" % acc.need)
        return CPUSet._trusted(acc.result)
    return take_by_topology_packed(topo, available, num_cpus, strategy, False, minor=minor)
