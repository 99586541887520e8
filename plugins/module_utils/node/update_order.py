# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The order of a pass's cgroup updates (node/targets.py applies them): who vacates a CPU goes before who takes it,
the shared containers shrink around a defragmentation's moves and grow back after them, a cycle is untied through a
detour on free CPUs, and consecutive updates of the same shared pool go together (one call where the runtime takes
many)."""

from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

from ..kubelet.cpuset import CPUSet
from ..kubelet.state import CPUState
from .plan import Action, Plan

SHRINKING = "shared pool while containers move"  # the shared containers' first push around moves
DETOUR = "passing through"  # a moving container's push onto free CPUs on its way (a swap's, or a repair's)


def runs(actions: List[Action]) -> List[List[Action]]:
    """``actions`` cut into runs: consecutive updates that set only the same cpuset (the shared pool's) together,
    every other action alone."""
    cut: List[List[Action]] = []
    for action in actions:
        if cut and _cpus_only(action) and _cpus_only(cut[-1][-1]) and cut[-1][-1].cpus == action.cpus:
            cut[-1].append(action)
        else:
            cut.append([action])
    return cut


def _cpus_only(action: Action) -> bool:
    return action.action == "update" and action.mems is None and action.quota is None and action.period is None


def in_move_order(plan: Plan, updates: List[Action]) -> List[Action]:
    """A defragmentation's moved containers pushed in the order of its ``move`` actions (each move's CPUs free by
    then; a container passing through free CPUs is pushed there first), where the first exclusive update was."""
    moves = [a for a in plan.actions if a.action == "move"]
    last = {(m.pod_uid, m.container): index for index, m in enumerate(moves)}
    pushes = {(a.pod_uid, a.container): a for a in updates if a.action == "update" and (a.pod_uid, a.container) in last}
    if not pushes:
        return updates
    ordered = []
    for index, move in enumerate(moves):
        push = pushes.get((move.pod_uid, move.container))
        if push is not None:
            last_move = last[(move.pod_uid, move.container)] == index
            ordered.append(push if last_move else push._replace(cpus=move.cpus, reason=DETOUR))
    rest = [a for a in updates if a.action != "update" or (a.pod_uid, a.container) not in pushes]
    at = next((i for i, a in enumerate(rest) if a.action == "update" and a.reason.startswith("exclusive")), len(rest))
    return rest[:at] + ordered + rest[at:]


def shrink_first(plan: Plan, updates: List[Action],
                 moving: Set[Tuple[str, str]]) -> Tuple[List[Action], List[Action]]:
    """The shared containers' updates split around the moves: first to the CPUs shared before and after, without
    those a swap passes through (no shared container on a CPU a moving one still holds or passes through), then,
    once the moves are done, to the pool after (the second list)."""
    detours = CPUSet().union(*(CPUSet.parse(a.cpus) for a in updates
                               if a.action == "update" and a.reason == DETOUR))
    shrunk = plan.before.default.intersection(plan.after.default).difference(detours)
    rest: List[Action] = []
    shrinks: List[Action] = []
    grow: List[Action] = []
    for action in updates:
        shared = action.action == "update" and (action.pod_uid, action.container) not in moving \
            and action.reason.startswith("shared pool")
        if not shared:
            rest.append(action)
            continue
        mine = shrunk.intersection(CPUSet.parse(action.cpus)) or shrunk  # (the system partition: its side only)
        if mine and CPUSet.parse(action.cpus) != mine:
            shrinks.append(action._replace(cpus=str(mine), reason=SHRINKING))
        grow.append(action)
    at = next((i for i, a in enumerate(rest) if (a.pod_uid, a.container) in moving), len(rest))
    return rest[:at] + shrinks + rest[at:], grow


def moved_so_far(plan: Plan, done: List[Action], all_cpus: CPUSet) -> CPUState:
    """The state the applied moves left: each container where its last applied push put it, the others where they
    were; the shared pool what no entry holds."""
    after = plan.before.copy()
    for action in done:
        after.set(action.pod_uid, action.container, CPUSet.parse(action.cpus))
    after.default = all_cpus.difference(after.assigned().union(after.pod_assigned()))
    return after


def _detour(plan: Plan, waiting: List[Action], held: Dict[str, CPUSet]) -> Optional[Action]:
    """For a cycle of ``waiting`` containers (each wants CPUs another holds): its smallest member's update to as many
    CPUs of the shared pool as it holds, none held or wanted by a waiting one, the pool keeping at least one; None
    when the pool has too few."""
    member = min(waiting, key=lambda a: (len(CPUSet.parse(a.cpus)), a.container_id))
    busy = CPUSet().union(*(held[a.container_id].union(CPUSet.parse(a.cpus)) for a in waiting))
    spare = sorted(plan.after.default.difference(busy), reverse=True)  # the pool's highest first: its reserved stay
    size = len(CPUSet.parse(member.cpus))
    if len(spare) < size or len(plan.after.default) <= size:
        return None
    return member._replace(cpus=str(CPUSet(spare[:size])), reason=DETOUR)


def vacate_first(plan: Plan, updates: List[Action]) -> Tuple[List[Action], List[Action]]:
    """A pass's exclusive updates in an order where each container's new CPUs are no longer held by another
    (``plan.holding``: what each had); the shared containers first to their pool without the CPUs a container still
    holds, then (the second list) to the pool. A cycle (containers taking each other's CPUs: a defragmentation
    killed before it pushed a swap) is untied as the defragmentation does it, through a detour (``_detour``) on CPUs
    the shared containers leave first; with no such CPUs its members go as listed."""
    exclusive = [a for a in updates if a.action == "update" and not a.reason.startswith("shared pool")]
    if len(exclusive) < 2 and not (exclusive and any(a.reason.startswith("shared pool") for a in updates)):
        return updates, []
    held = {a.container_id: plan.holding.get(a.container_id, CPUSet()) for a in exclusive}
    still = CPUSet().union(*(held[a.container_id].difference(CPUSet.parse(a.cpus)) for a in exclusive))
    waiting = list(exclusive)
    ordered: List[Action] = []
    while waiting:
        pending = {a.container_id for a in waiting}
        free = [a for a in waiting if not any(CPUSet.parse(a.cpus).intersection(held[other])
                                              for other in pending if other != a.container_id)]
        if not free:  # a cycle: its smallest member first through CPUs the shared pool gives up (as listed: none)
            detour = _detour(plan, waiting, held)
            if detour is None:
                ordered.extend(waiting)
                break
            ordered.append(detour)
            held[detour.container_id] = CPUSet.parse(detour.cpus)
            still = still.union(held[detour.container_id])
            continue
        ordered.extend(free)
        waiting = [a for a in waiting if a not in free]
    first: List[Action] = []
    grow: List[Action] = []
    for action in updates:
        if action.action == "update" and action.reason.startswith("shared pool") and still:
            target = CPUSet.parse(action.cpus)
            shrunk = target.difference(still)
            if shrunk and shrunk != target:
                first.append(action._replace(cpus=str(shrunk), reason=SHRINKING))
                grow.append(action)
                continue
        if action not in exclusive:
            first.append(action)
    at = next((i for i, a in enumerate(first) if a.action == "update" and not a.reason.startswith("shared")),
              len(first))
    return first[:at] + ordered + first[at:], grow
