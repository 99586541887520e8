# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Fragmentation and defragmentation of the exclusive CPUs.

Exclusive allocations fragment a node: the free CPUs end up scattered over half-used cores and NUMA nodes, so a
pod asking for a whole NUMA node or whole cores is refused although enough CPUs are free. ``headroom`` says what a
node can still admit; ``plan_defrag`` finds the container moves that raise, in this order, the largest single-NUMA
whole-core request the node would admit and its free whole cores, with the fewest containers moved and then the
fewest CPUs changed.

It plans in three parts: ``defrag_search`` finds the best packing (which units stay, which move to which NUMA
node; proven best when its search ends within the time budget), ``defrag_moves`` gives the moved units their CPUs
and orders the moves so that no CPU is ever held by two containers (a swap passes through free CPUs), and where no
such order exists, or the packing found is no better than it, the greedy search (``defrag_greedy``) plans instead,
in what is left of the same time budget. A live defragmentation searches on a copy of the state, outside the lock
(the OCI hook and the NRI plugin never wait for a search), and takes the moves under the lock only while the state
is still that copy (else it searches again, ``PLAN_ATTEMPTS`` times).
A movable unit is a container, or the containers of a pod that hold the same CPUs; a pod whose containers hold
partly overlapping CPUs, pod-level exclusive CPUs (kubelet 1.36+), a unit too large for one NUMA node and, under
``full-pcpus-only``, a unit that is not whole cores stay where they are. A moved unit lands on one NUMA node, which
every Topology Manager policy and ``align-by-socket`` accept; ``full-pcpus-only`` gives it whole cores. Options
that spread an allocation (``distribute-cpus-across-cores``) are not reproduced: a moved unit fills half-used cores.

What an allocation honours, a move honours too (``Limits``): with ``isolated_cpus: only`` units move only within the
isolated CPUs (a unit outside them stays); under the Topology Manager's pod scope with ``single-numa-node`` or
``restricted`` the kubelet admits a pod by the NUMA nodes of all its containers together, so a pod whose containers
hold different CPUs stays where it is (moving one of them alone could split the pod over two NUMA nodes, and the
kubelet's re-admission at its next start would reject it). The checkpoint planned for the kubelet's own file is
judged before it is returned (``node/judge.py``: the restarted kubelet admitting every running pod again); one it
would refuse is planned again with every unit on its NUMA nodes, and refused again, never returned.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Dict, FrozenSet, List, Mapping, NamedTuple, Optional, Sequence, Tuple, cast

from ..errors import ConfigError, PolicyError, StateError
from ..kubelet.checkpoint_formats import write
from ..kubelet.cpuset import CPUSet
from ..kubelet.device_state import DeviceNodes, devices_beside, read_device_nodes
from ..kubelet.memory_state import beside, read_memory_nodes
from ..kubelet.options import PolicyOptions
from ..kubelet.policy import STATIC, StaticPolicy
from ..kubelet.state import CPUState
from ..kubelet.topology import Topology
from ..node.config import NodeConfig
from ..node.factory import build_manager
from ..node.manager import NodeManager
from ..node.plan import Action, Plan
from ..node.pod_views import build_views, running_pods
from ..node.state_store import fingerprint, opened_read_only
from .defrag_greedy import greedy_moves, whole_per_numa
from .defrag_moves import Step, sequence, targets
from .defrag_search import rooms_and_units, search

SEARCH_BUDGET = 0.5  # seconds of search per node (exact, then greedy) before the best packing found so far is taken
PLAN_ATTEMPTS = 3  # searches on a state that changed under them before a defragmentation gives up
MAX_BUDGET = 600.0  # an operator's longest search: beyond it a defragmentation holds the node's lock too long


def headroom(topo: Topology, free: CPUSet) -> Dict[str, int]:
    """What the exclusive pool ``free`` can still admit: free whole cores, and the largest request (in CPUs) per
    alignment: whole cores anywhere (``full-pcpus-only``), one NUMA node, one socket, and whole cores on one NUMA
    node (what a ``full-pcpus-only`` pod under ``single-numa-node`` can get)."""
    pool = free.as_frozenset()
    per_numa = whole_per_numa(topo, pool)
    threads = topo.cpus_per_core
    return {"free_cpus": len(pool), "free_whole_cores": sum(per_numa.values()),
            "largest_full_pcpus_only": sum(per_numa.values()) * threads,
            "largest_single_numa": max((len(pool & cpus) for cpus in topo.numa_cpus.values()), default=0),
            "largest_single_socket": max((len(pool & cpus) for cpus in topo.socket_cpus.values()), default=0),
            "largest_single_numa_whole_cores": max(per_numa.values(), default=0) * threads}


class Move(NamedTuple):
    pod_uid: str
    containers: Tuple[str, ...]
    cpus_before: CPUSet
    cpus_after: CPUSet

    def to_dict(self) -> Dict[str, object]:
        return {"pod_uid": self.pod_uid, "containers": list(self.containers), "cpus_before": str(self.cpus_before),
                "cpus_after": str(self.cpus_after)}


class Defrag(NamedTuple):
    moves: List[Move]  # in the order they are made; a container passing through free CPUs appears twice
    before: Dict[str, int]
    after: Dict[str, int]
    state: CPUState  # the state after the moves
    proven_best: bool = False  # no set of moves reaches a better packing (within max_moves)
    planner: str = "exact"  # or "greedy", the fallback

    def to_dict(self) -> Dict[str, object]:
        return {"moves": [m.to_dict() for m in self.moves], "before": self.before, "after": self.after,
                "proven_best": self.proven_best, "planner": self.planner,
                "containers_moved": len({(m.pod_uid, m.containers) for m in self.moves})}


Unit = Tuple[str, Tuple[str, ...], FrozenSet[int]]


class Limits(NamedTuple):
    """Where units may go beyond the policy's own rules: ``within`` (``isolated_cpus: only``: the isolated CPUs),
    ``pods_whole`` (pod scope under ``single-numa-node`` or ``restricted``: a pod of several units stays),
    ``keep_numa`` (every unit stays on the NUMA nodes it is on: devices placed near them), ``memory`` (the kubelet
    Memory Manager's NUMA nodes per container: a unit moves only onto those) and ``devices`` (the NUMA nodes of the
    devices the kubelet's Device Manager allocated per container: likewise)."""

    within: Optional[FrozenSet[int]] = None
    pods_whole: bool = False
    keep_numa: bool = False
    memory: Optional[Mapping[Tuple[str, str], FrozenSet[int]]] = None
    devices: Optional[DeviceNodes] = None

    @classmethod
    def of(cls, manager: NodeManager, *, keep_numa: bool = False,
           memory: Optional[Mapping[Tuple[str, str], FrozenSet[int]]] = None,
           devices: Optional[DeviceNodes] = None) -> Limits:
        options = manager.options
        within = manager.topology.isolated.as_frozenset() if options.isolated_cpus == "only" else None
        return cls(within, options.topology_manager_scope == "pod"
                   and options.topology_manager_policy in ("single-numa-node", "restricted"), keep_numa, memory,
                   devices)

    def homes(self, topo: Topology, unit: Unit) -> Optional[FrozenSet[int]]:
        """The NUMA nodes ``unit`` may move to (None: any)."""
        pod, names, cpus = unit
        allowed = frozenset(topo.loc[cpu][2] for cpu in cpus) if self.keep_numa else None
        for name in names:
            held = (self.devices or {}).get((pod, name), {}).values()
            for pinned in [(self.memory or {}).get((pod, name))] + [frozenset().union(*held) if held else None]:
                if pinned is not None:
                    allowed = pinned if allowed is None else allowed & pinned
        return allowed


NO_LIMITS = Limits()


def _units(state: CPUState) -> List[Unit]:
    """The movable units: containers of one pod holding the same CPUs move together; a pod whose containers hold
    partly overlapping CPUs stays as it is, and so does a pod with pod-level exclusive CPUs (kubelet 1.36+)."""
    units: List[Unit] = []
    for pod in sorted(set(state.entries) - set(state.pod_entries)):
        groups: Dict[FrozenSet[int], List[str]] = {}
        for name, cpus in sorted(state.entries[pod].items()):
            groups.setdefault(cpus.as_frozenset(), []).append(name)
        sets = list(groups)
        if any(a != b and a & b for a in sets for b in sets):
            continue
        units.extend((pod, tuple(names), cpus) for cpus, names in groups.items())
    return units


def _score(found: Dict[str, int]) -> Tuple[int, int]:
    return found["largest_single_numa_whole_cores"], found["free_whole_cores"]


def _exact(topo: Topology, node: _Node, reserved: FrozenSet[int], *, whole_only: bool, max_moves: Optional[int],
           budget: float) -> Tuple[Optional[List[Step]], bool]:
    """The exact search's moves in a safe order (None: no safe order) and whether its packing is proven best."""
    numa_of_core = {core: topo.loc[min(cpus)][2] for core, cpus in topo.core_cpus.items() if cpus}
    rooms, units, nodes = rooms_and_units(numa_of_core, topo.core_cpus, set(reserved),
                                          list(zip(node.holdings, node.movable)), node.homes)
    numa_of = {cpu: loc[2] for cpu, loc in topo.loc.items() if cpu not in reserved}
    cap = max_moves
    while True:
        found = search(rooms, units, topo.cpus_per_core, whole_only, max_moves=cap, budget=budget)
        orders: List[Tuple[int, int, int, List[Step]]] = []
        for where in found.ties:  # the fewest moves (a detour is one more), then the fewest CPUs changed
            for own_first in (True, False):
                goals = targets(topo, nodes, set(reserved), node.holdings, where, whole_only=whole_only,
                                own_first=own_first)
                order = sequence(node.holdings, goals, set(node.free), numa_of)
                if order is not None:
                    changed = sum(len(goal - held) for goal, held in zip(goals, node.holdings))
                    orders.append((len(order), changed, len(orders), order))
        steps = min(orders)[-1] if orders else None
        if steps is None or max_moves is None or len(steps) <= max_moves or cap == 0:
            return steps, found.proven and cap == max_moves  # with fewer containers, not proven for the moves
        cap = max(0, len({step.unit for step in steps}) - (len(steps) - max_moves))  # a detour is a move too


class _Node(NamedTuple):
    units: List[Unit]
    holdings: List[FrozenSet[int]]  # the units' CPUs, then (unmovable) every other CPU held
    movable: List[bool]
    homes: List[Optional[FrozenSet[int]]]  # per holding, the NUMA nodes it may move to (None: any)
    free: FrozenSet[int]
    before: Dict[str, int]


def _node(topo: Topology, options: PolicyOptions, state: CPUState, reserved: CPUSet, limits: Limits) -> _Node:
    free = state.default.difference(reserved).as_frozenset()
    units = _units(state)
    held = frozenset(cpu for _pod, _names, cpus in units for cpu in cpus)
    fixed = frozenset(topo.all_cpus.as_frozenset() - free - reserved.as_frozenset() - held)
    holdings = [cpus for _pod, _names, cpus in units] + ([fixed] if fixed else [])
    whole_only, threads = options.full_pcpus_only, topo.cpus_per_core
    per_pod = Counter(pod for pod, _names, _cpus in units)
    movable = [(not whole_only or len(cpus) % threads == 0) and (limits.within is None or cpus <= limits.within)
               and not (limits.pods_whole and per_pod[pod] > 1) for pod, _names, cpus in units] + [False] * bool(fixed)
    homes = [limits.homes(topo, unit) for unit in units] + [None] * bool(fixed)
    return _Node(units, holdings, movable, homes, free, headroom(topo, CPUSet(free)))


def _bounded(state: CPUState, reserved: CPUSet, limits: Limits) -> CPUSet:
    """``reserved`` with the free CPUs outside ``limits.within``: the search neither counts them nor moves there."""
    if limits.within is None:
        return reserved
    return reserved.union(state.default.difference(CPUSet(limits.within)))


def plan_defrag(topo: Topology, options: PolicyOptions, state: CPUState, reserved: CPUSet,
                max_moves: Optional[int] = None, *, budget: float = SEARCH_BUDGET,
                limits: Limits = NO_LIMITS) -> Defrag:
    """The moves (and the state after them) for the static policy's ``state``; ``state`` is not changed.
    ``max_moves``: at most that many moves; ``budget``: seconds of exact search; ``limits``: see ``Limits``."""
    deadline = time.monotonic() + budget  # the whole plan: the exact search, then the greedy fallback in what is left
    reserved = _bounded(state, reserved, limits)
    node = _node(topo, options, state, reserved, limits)
    steps, proven = _exact(topo, node, reserved.as_frozenset(), whole_only=options.full_pcpus_only,
                           max_moves=max_moves, budget=budget)
    exact = None if steps is None else _applied(topo, state, reserved, node, steps, proven=proven, planner="exact")
    if exact is not None and (proven or _score(exact.after) > _score(node.before)):
        return exact
    fallback = _greedy(topo, options, state, reserved, node=node, max_moves=max_moves, deadline=deadline)
    return exact if exact is not None and _score(exact.after) >= _score(fallback.after) else fallback


def plan_greedy(topo: Topology, options: PolicyOptions, state: CPUState, reserved: CPUSet,
                max_moves: Optional[int] = None, *, limits: Limits = NO_LIMITS) -> Defrag:
    """``plan_defrag`` with the greedy search alone (``defrag_greedy``), the exact search's fallback."""
    reserved = _bounded(state, reserved, limits)
    return _greedy(topo, options, state, reserved, node=_node(topo, options, state, reserved, limits),
                   max_moves=max_moves)


def _greedy(topo: Topology, options: PolicyOptions, state: CPUState, reserved: CPUSet, *, node: _Node,
            max_moves: Optional[int], deadline: Optional[float] = None) -> Defrag:
    moves = greedy_moves(topo, node.free, node.holdings[:len(node.units)], options.full_pcpus_only, max_moves,
                         deadline=deadline, movable=node.movable[:len(node.units)], homes=node.homes)
    steps = [Step(index, node.holdings[index], place) for index, place in moves]
    return _applied(topo, state, reserved, node, steps, proven=False, planner="greedy")


def _applied(topo: Topology, state: CPUState, reserved: CPUSet, node: _Node, steps: Sequence[Step], *,
             proven: bool, planner: str) -> Defrag:
    """The plan of ``steps`` (unit index, CPUs before, after) on ``state``."""
    after_state = state.copy()
    units = node.units
    moves = [Move(units[s.unit][0], units[s.unit][1], CPUSet(s.cpus_before), CPUSet(s.cpus_after)) for s in steps]
    for move in moves:
        for name in move.containers:
            after_state.set(move.pod_uid, name, move.cpus_after)
    vacated = CPUSet().union(*(m.cpus_before for m in moves))  # a detour's CPUs too: free again at the end
    taken = CPUSet().union(*(after_state.entries[m.pod_uid][m.containers[0]] for m in moves))
    after_state.default = after_state.default.union(vacated).difference(taken)
    return Defrag(moves, node.before, headroom(topo, after_state.default.difference(reserved)), after_state, proven,
                  planner)


def defrag_config(config: NodeConfig, *, check: bool, max_moves: Optional[int] = None,
                  topology: Optional[Topology] = None, budget: float = SEARCH_BUDGET,
                  keep_numa: bool = False) -> Tuple[Plan, Optional[str]]:
    """``defrag_node`` for a node's settings: live on kubecpu's own state; on a read-only one (the kubelet's) only
    planned, with the checkpoint after the moves, in that kubelet's format, to write with the kubelet stopped (and
    ``plan.result["planned_from"]``, the fingerprint of the checkpoint it was planned from, for that write).
    ``keep_numa``: no unit leaves its NUMA nodes; a container whose memory the kubelet's Memory Manager pinned (its
    checkpoint beside ``config.kubelet_state_path``), or that holds devices (the Device Manager's checkpoint below that
    directory), moves only within their NUMA nodes."""
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget <= MAX_BUDGET:
        raise ConfigError("time_budget must be more than 0 and at most %d seconds, got %r" % (MAX_BUDGET, budget))
    if max_moves is not None and (isinstance(max_moves, bool) or not isinstance(max_moves, int) or max_moves < 0):
        raise ConfigError("max_moves must be a whole number, 0 or more, got %r" % (max_moves,))
    read_only = opened_read_only(config.state_path, config.read_only, kubelet_path=config.kubelet_state_path)
    memory = read_memory_nodes(beside(config.kubelet_state_path))
    devices = read_device_nodes(devices_beside(config.kubelet_state_path))
    with build_manager(config, with_runtime=True, topology=topology, checks=not read_only) as manager:
        limits = Limits.of(manager, keep_numa=keep_numa, memory=memory, devices=devices)
        plan = defrag_node(manager, apply=not (check or read_only), max_moves=max_moves, budget=budget, limits=limits)
        planned_from = fingerprint(manager.store.last_read)  # the bytes the moves were taken on, under the lock
        if read_only and plan.actions:
            plan, planned_from = _judged(manager, plan, planned_from, limits, max_moves=max_moves, budget=budget)
    if not (read_only and plan.actions):
        return plan, None
    if plan.result is not None:  # the write of rewritten_state refuses once the kubelet has changed the file
        plan.result["planned_from"] = planned_from
    return plan, write(plan.after, config.kubelet).decode("utf-8")


def _judged(manager: NodeManager, plan: Plan, planned_from: str, limits: Limits, *, max_moves: Optional[int],
            budget: float) -> Tuple[Plan, str]:
    """The planned moves of the kubelet's checkpoint as the restarted kubelet judges them (``node/judge.py``): when it
    would reject a pod, planned again with every unit kept on its NUMA nodes (``keep_numa``); refused again (or
    already so planned), a StateError: that checkpoint is never written."""
    listed = Plan(plan.before)
    judge = manager.topology_admission.judge(manager.policy, memory=limits.memory, devices=limits.devices,
                                             pods=running_pods(build_views(manager.observe(listed))))
    if judge.verdict(plan.after) is not None and not limits.keep_numa:
        plan = defrag_node(manager, apply=False, max_moves=max_moves, budget=budget,
                           limits=limits._replace(keep_numa=True))
        planned_from = fingerprint(manager.store.last_read)
    judge.check(plan.after, manager.store.path)
    return plan, planned_from


def defrag_node(manager: NodeManager, apply: bool = True, max_moves: Optional[int] = None, *,
                budget: float = SEARCH_BUDGET, limits: Optional[Limits] = None) -> Plan:
    """The moves made live under the manager's lock: the state first, then the cpusets through the runtime in the
    moves' order (``plan.result``: the moves, the headroom before and after, whether proven best)."""
    policy = manager.policy
    if policy.name != STATIC:
        raise PolicyError("defragmentation moves exclusive CPUs, and the %s policy has none" % policy.name)
    options, limits = cast(StaticPolicy, policy).options, limits or Limits.of(manager)
    for _attempt in range(PLAN_ATTEMPTS):
        # The search runs on a copy, outside the lock: the OCI hook (2 s) and the NRI plugin (half the runtime's
        # timeout) never wait for it. Under the lock the moves are taken only if the state is still that copy.
        snapshot = manager.read_state()
        found = plan_defrag(manager.topology, options, snapshot, policy.reserved, max_moves, budget=budget,
                            limits=limits)
        try:
            with manager.session(apply) as (state, plan, _pairs):
                if state != snapshot:
                    raise _Changed()  # a container came or went meanwhile: nothing committed, search again
                state.entries, state.default = found.state.entries, found.state.default
                for move in found.moves:
                    for name in move.containers:
                        plan.actions.append(Action("move", "", "", move.pod_uid, name, str(move.cpus_after),
                                                   "defragmentation (was %s)" % move.cpus_before))
                plan.result = found.to_dict()
        except _Changed:
            continue
        return plan
    raise StateError("the state changed during each of %d searches (containers coming and going): nothing was moved; "
                     "run the defragmentation again when the node is quieter" % PLAN_ATTEMPTS)


class _Changed(Exception):
    """The state under the lock is not the one the moves were searched on."""
