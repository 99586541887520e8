# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Fragmentation and defragmentation of the exclusive CPUs.

Exclusive allocations fragment a node: the free CPUs end up scattered over half-used cores and NUMA nodes, so a
pod asking for a whole NUMA node or whole cores is refused although enough CPUs are free. ``headroom`` says what a
node can still admit; ``plan_defrag`` finds container moves that raise, in this order, the largest single-NUMA
whole-core request the node would admit and then its free whole cores.

The search is greedy: each step takes the one move (a container, or the containers of a pod that share CPUs,
given the same number of CPUs elsewhere) that raises that pair the most, fewest CPUs changed first on a tie; a
container moves at most once; it stops when no move raises it. Every move it makes is needed for the result it
reaches (each one strictly improves it), and a node already optimal for it gets no move; it does not try every
combination of moves (fewest moves is a packing problem), so a result two simultaneous moves would reach and no
single one improves towards is not found. Candidate places for a container, per NUMA node: the CPUs of the cores
with the fewest free CPUs first (filling half-used cores), and, for a container of whole cores, whole cores
(``full-pcpus-only`` allows only those). Scoring is incremental (only the cores a move touches are counted again).
"""

from __future__ import annotations

from typing import Dict, FrozenSet, List, NamedTuple, Optional, Set, Tuple, cast

from ..errors import PolicyError
from ..kubelet.checkpoint_formats import write
from ..kubelet.cpuset import CPUSet
from ..kubelet.options import PolicyOptions
from ..kubelet.policy import STATIC, StaticPolicy
from ..kubelet.state import CPUState
from ..kubelet.topology import Topology
from ..node.config import NodeConfig
from ..node.factory import build_manager
from ..node.manager import NodeManager
from ..node.plan import Action, Plan
from ..node.state_store import opened_read_only

Score = Tuple[int, int]  # (most free whole cores on one NUMA node, free whole cores)


def headroom(topo: Topology, free: CPUSet) -> Dict[str, int]:
    """What the exclusive pool ``free`` can still admit: free whole cores, and the largest request (in CPUs) per
    alignment: whole cores anywhere (``full-pcpus-only``), one NUMA node, one socket, and whole cores on one NUMA
    node (what a ``full-pcpus-only`` pod under ``single-numa-node`` can get)."""
    pool = free.as_frozenset()
    per_numa = _whole_per_numa(topo, pool)
    threads = topo.cpus_per_core
    return {"free_cpus": len(pool), "free_whole_cores": sum(per_numa.values()),
            "largest_full_pcpus_only": sum(per_numa.values()) * threads,
            "largest_single_numa": max((len(pool & cpus) for cpus in topo.numa_cpus.values()), default=0),
            "largest_single_socket": max((len(pool & cpus) for cpus in topo.socket_cpus.values()), default=0),
            "largest_single_numa_whole_cores": max(per_numa.values(), default=0) * threads}


def _whole_per_numa(topo: Topology, pool: FrozenSet[int]) -> Dict[int, int]:
    counts = {node: 0 for node in topo.numa_cpus}
    for cpus in topo.core_cpus.values():
        if cpus and cpus <= pool:
            counts[topo.loc[min(cpus)][2]] += 1
    return counts


class Move(NamedTuple):
    pod_uid: str
    containers: Tuple[str, ...]
    cpus_before: CPUSet
    cpus_after: CPUSet

    def to_dict(self) -> Dict[str, object]:
        return {"pod_uid": self.pod_uid, "containers": list(self.containers), "cpus_before": str(self.cpus_before),
                "cpus_after": str(self.cpus_after)}


class Defrag(NamedTuple):
    moves: List[Move]
    before: Dict[str, int]
    after: Dict[str, int]
    state: CPUState  # the state after the moves

    def to_dict(self) -> Dict[str, object]:
        return {"moves": [m.to_dict() for m in self.moves], "before": self.before, "after": self.after}


class _Pool:
    """The free CPUs with the counts the score needs, updated per CPU."""

    def __init__(self, topo: Topology, free: FrozenSet[int]) -> None:
        self.topo = topo
        self.free: Set[int] = set(free)
        self.core_of = {cpu: loc[0] for cpu, loc in topo.loc.items()}
        self.core_numa = {core: topo.loc[min(cpus)][2] for core, cpus in topo.core_cpus.items() if cpus}
        self.core_free = {core: len(cpus & free) for core, cpus in topo.core_cpus.items()}
        self.whole = _whole_per_numa(topo, free)

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


def _units(state: CPUState) -> List[Tuple[str, Tuple[str, ...], FrozenSet[int]]]:
    """The movable units: containers of one pod holding the same CPUs move together; a pod whose containers hold
    partly overlapping CPUs stays as it is, and so does a pod with pod-level exclusive CPUs (kubelet 1.36+)."""
    units: List[Tuple[str, Tuple[str, ...], FrozenSet[int]]] = []
    for pod in sorted(set(state.entries) - set(state.pod_entries)):
        groups: Dict[FrozenSet[int], List[str]] = {}
        for name, cpus in sorted(state.entries[pod].items()):
            groups.setdefault(cpus.as_frozenset(), []).append(name)
        sets = list(groups)
        if any(a != b and a & b for a in sets for b in sets):
            continue
        units.extend((pod, tuple(names), cpus) for cpus, names in groups.items())
    return units


def _candidates(pool: _Pool, own: FrozenSet[int], whole_only: bool) -> List[FrozenSet[int]]:
    """Places for a unit of ``len(own)`` CPUs once its own are free: per NUMA node, half-used cores first, and whole
    cores first (only those when ``whole_only``)."""
    topo, size = pool.topo, len(own)
    threads = topo.cpus_per_core
    found: List[FrozenSet[int]] = []
    for node in sorted(topo.numa_cpus):
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


def plan_defrag(topo: Topology, options: PolicyOptions, state: CPUState, reserved: CPUSet,
                max_moves: Optional[int] = None) -> Defrag:
    """The moves (and the state after them) for the static policy's ``state``; ``state`` is not changed."""
    pool = _Pool(topo, state.default.difference(reserved).as_frozenset())
    before = headroom(topo, CPUSet(pool.free))
    units = _units(state)
    moved: Set[int] = set()
    moves: List[Move] = []
    current = pool.score()
    while max_moves is None or len(moves) < max_moves:
        best: Optional[Tuple[Score, int, int, FrozenSet[int]]] = None
        for index, (_pod, _names, own) in enumerate(units):
            if index in moved:
                continue
            whole_only = options.full_pcpus_only and len(own) % topo.cpus_per_core == 0
            pool.release(own)
            for place in _candidates(pool, own, whole_only):
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
        pod, names, own = units[index]
        pool.release(own)
        pool.take(place)
        moved.add(index)
        units[index] = (pod, names, place)
        moves.append(Move(pod, names, CPUSet(own), CPUSet(place)))
    after_state = state.copy()
    for move in moves:
        for name in move.containers:
            after_state.set(move.pod_uid, name, move.cpus_after)
    after_state.default = after_state.default.union(*(m.cpus_before for m in moves)).difference(
        CPUSet().union(*(m.cpus_after for m in moves)))
    return Defrag(moves, before, headroom(topo, CPUSet(pool.free)), after_state)


def defrag_config(config: NodeConfig, *, check: bool, max_moves: Optional[int] = None,
                  topology: Optional[Topology] = None) -> Tuple[Plan, Optional[str]]:
    """``defrag_node`` for a node's settings: live on kubecpu's own state; on a read-only one (the kubelet's) only
    planned, with the checkpoint after the moves, in that kubelet's format, to write with the kubelet stopped."""
    read_only = opened_read_only(config.state_path, config.read_only)
    with build_manager(config, with_runtime=True, topology=topology, checks=not read_only) as manager:
        plan = defrag_node(manager, apply=not (check or read_only), max_moves=max_moves)
    rewritten = write(plan.after, config.kubelet).decode("utf-8") if read_only and plan.actions else None
    return plan, rewritten


def defrag_node(manager: NodeManager, apply: bool = True, max_moves: Optional[int] = None) -> Plan:
    """The moves made live under the manager's lock: the state first, then the cpusets through the runtime
    (``plan.result``: the moves and the headroom before and after)."""
    policy = manager.policy
    if policy.name != STATIC:
        raise PolicyError("defragmentation moves exclusive CPUs, and the %s policy has none" % policy.name)
    with manager.session(apply) as (state, plan, _pairs):
        found = plan_defrag(manager.topology, cast(StaticPolicy, policy).options, state, policy.reserved, max_moves)
        state.entries, state.default = found.state.entries, found.state.default
        for move in found.moves:
            for name in move.containers:
                plan.actions.append(Action("move", "", "", move.pod_uid, name, str(move.cpus_after),
                                           "defragmentation (was %s)" % move.cpus_before))
        plan.result = found.to_dict()
    return plan
