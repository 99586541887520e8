# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The cgroup side of a pass: the cpuset (and with the options, memory nodes and CFS quota) each running container
should have, compared with what cgroupfs shows, and the updates carried out in a safe order (RUNTIME.md 3, 6)."""

from __future__ import annotations

import os
from typing import AbstractSet, Callable, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

from ..errors import ContainerNotFoundError, ContainerRuntimeError, StoreError
from ..kubelet.cpuset import CPUSet
from ..kubelet.qos import BEST_EFFORT, BURSTABLE, GUARANTEED
from ..kubelet.settings import parse_duration
from ..kubelet.state import CPUState
from ..kubelet.topology import Topology
from ..runtime.cgroups import CgroupFS
from ..runtime.model import CREATED, RUNNING, ContainerInfo, ListedContainer, Runtime
from .config import ManagerOptions
from .exclusive import follows_limit, with_quota
from .partition import SYSTEM_REASON, Partition, is_system, partition_of, shared_pool, shared_target
from .hook_marks import HookMarks
from .plan import Action, Plan
from .pod_views import Pair
from .update_order import DETOUR, SHRINKING, in_move_order, moved_so_far, runs, shrink_first, vacate_first

# A created container (not started yet) is given its CPUs too: containerd applies its spec at the start, CRI-O's
# cgroup exists already; one left on its old CPUs would start on CPUs another container now holds.
_PINNED_STATES = (RUNNING, CREATED)
BURST_ANNOTATION = "cpu-burst.kubecpu.io"  # a pod's CFS burst, a duration ("20ms")
Scope = Optional[AbstractSet[str]]  # pod UIDs: the pods a pass decides again (None: every pod)


class CgroupTargets:
    """Targets for the running containers, and the runtime updates that reach them."""

    def __init__(self, topology: Topology, cgroups: CgroupFS, options: ManagerOptions,
                 marks: Optional[HookMarks] = None, reserved: Optional[CPUSet] = None) -> None:
        """``reserved``: the policy's reserved CPUs, the system partition's (``options.system_partition``)."""
        self.topology = topology
        self.cgroups = cgroups
        self.options = options
        self.marks = marks or HookMarks(None)
        self.pushed: Dict[str, CPUSet] = {}  # container ID -> the cpuset it was last given or found with
        self.hooked: FrozenSet[str] = frozenset()  # marked by the OCI hook when this plan was made
        self.present: Set[str] = set()  # the containers the runtime listed last
        self.idle_known: Dict[str, Optional[str]] = {}  # cgroup -> its cpu.idle as a pass verified it (None: none)
        self.at_pool: List[Pair] = []  # the shared containers the last plan left as they are (on the pool)
        self.stale: Optional[Callable[[], bool]] = None  # apply()'s: the plan's state is no longer the file's
        self.partition: Optional[Partition] = partition_of(options, reserved or CPUSet())  # node/partition.py

    def current_request(self, listed: ListedContainer, info: ContainerInfo) -> ContainerInfo:
        """The facts with the CFS quota cgroupfs shows now, when a Guaranteed running container's differs from
        what was learned (an in-place resize: the kubelet updates the quota of the same container). A quota of
        none (-1, what ``cpu_quota: unlimited`` sets on pinned containers) says nothing of the request."""
        if listed.state != RUNNING or (info.qos != GUARANTEED
                                       and not follows_limit(info, self.options.exclusive_burstable)):
            return info
        have = self.cgroups.quota(info.cgroup_path)
        if have is None or have[0] <= 0 or have == (info.cpu_quota, info.cpu_period):
            return info
        return with_quota(info, have[0], have[1])

    def forget_except(self, present: Set[str]) -> None:
        self.present = present
        self.pushed = {cid: cpus for cid, cpus in self.pushed.items() if cid in present}

    def plan(self, plan: Plan, state: CPUState, pairs: Sequence[Pair], scope: Scope = None) -> None:
        """The cpuset (and with the options, memory nodes and quota) each running container should have.

        With a ``scope`` (pod UIDs), a container outside it that was given or found with a cpuset before is taken to
        still have it (cgroupfs is not read): it is left alone when its target is that cpuset, and when it is a shared
        container whose pool moved it joins ``plan.followers``, updated in bulk to the new pool. Such a container costs
        a dictionary lookup."""
        all_nodes = CPUSet(self.topology.numa_cpus)
        pods_exclusive: Dict[str, bool] = {}
        pushed = self.pushed
        self.at_pool = at_pool = []
        self.hooked = hooked = self.marks.pending()
        for listed, info in pairs:
            if listed.state not in _PINNED_STATES or not listed.is_kubernetes:
                continue
            assigned = state.get(listed.pod_uid, listed.name)
            exclusive = assigned is not None
            system = not exclusive and is_system(self.partition, info)  # on the reserved CPUs: not in the pool
            target = shared_target(self.partition, info, state) if assigned is None else assigned
            forced = listed.id in hooked  # its cgroup is right, the runtime's record of it is not
            settled = scope is not None and listed.pod_uid not in scope and listed.id in pushed and not forced
            if settled:
                if pushed[listed.id] == target:
                    if not exclusive and not system:
                        at_pool.append((listed, info))
                    continue
                if not exclusive and not system:  # a shared container whose pool moved (not its mems or quota)
                    plan.followers.append(listed.id)
                    continue
            pods_exclusive[listed.pod_uid] = pods_exclusive.get(listed.pod_uid, False) or exclusive
            current = pushed[listed.id] if settled else self.cgroups.cpus(info.cgroup_path)
            known = current if current is not None else self.pushed.get(listed.id)
            if known is not None:
                plan.holding[listed.id] = known
            cpus = None if known == target and not forced else target
            if cpus is None:
                self.pushed[listed.id] = target
            mems = quota = period = None
            if self.options.align_memory:
                want = CPUSet(self.topology.loc[c][2] for c in target) if exclusive else all_nodes
                if self.cgroups.mems(info.cgroup_path) != want:
                    mems = want
            if self.options.cpu_quota == "unlimited":
                want_quota = -1 if exclusive else (info.cpu_quota if info.cpu_quota > 0 else -1)
                have = self.cgroups.quota(info.cgroup_path)
                if have is not None and have[0] != want_quota:
                    quota, period = want_quota, (info.cpu_period or have[1]) if want_quota > 0 else None
            if cpus is None and mems is None and quota is None:
                if not exclusive and not system:
                    at_pool.append((listed, info))
                continue
            shown = target if cpus is None else cpus
            if cpus is None:
                why = "memory nodes or quota differ"
            elif forced and known == target:
                why = "the runtime's record of what the OCI hook set"
            elif system:
                why = "%s %s" % (SYSTEM_REASON, target)
            elif not exclusive:
                why = "shared pool is now %s (was %s)" % (target, "unknown" if known is None else known)
            elif self.pushed.get(listed.id) == target:  # it had them: something else changed its cpuset
                why = "exclusive CPUs drifted in cgroupfs (%s)" % known
            elif listed.attempt > 0:
                why = "restarted container keeps its CPUs"
            else:
                why = "exclusive CPUs"
            plan.actions.append(Action("update", listed.id, listed.pod_ref, listed.pod_uid, listed.name, str(shown),
                                       why, None if mems is None else str(mems), quota, period,
                                       info.cgroup_path))
        if plan.followers:
            plan.counts["followers"] = len(plan.followers)
        if self.partition is not None:
            self.partition.report(plan, pairs, state)
        _idle(plan, pairs, self.cgroups, self.options.besteffort_idle, self.idle_known)
        if self.options.cpu_burst:
            _burst(plan, pairs, self.cgroups)
        if self.options.cpu_quota == "unlimited":
            _pod_quotas(plan, pairs, {uid: exclusive for uid, exclusive in pods_exclusive.items()
                                      if scope is None or uid in scope}, self.cgroups)

    def settle(self, state: CPUState, pairs: Sequence[Pair]) -> List[str]:
        """Under the lock, in cgroupfs alone (no runtime call): every shared container found on a CPU ``state`` gives a
        container exclusively moved to the shared pool, as the OCI hook moves them, and marked so that the next pass
        brings the runtime's record in line; the IDs moved. What a pass does when other writers kept saving while it
        pushed (node/push.py), so that no update planned from an older state outlives it."""
        exclusive = state.assigned().union(state.pod_assigned())
        moved = []
        for listed, info in pairs:
            if listed.state not in _PINNED_STATES or not listed.is_kubernetes or not info.cgroup_path \
                    or state.get(listed.pod_uid, listed.name) is not None:
                continue
            have = self.cgroups.cpus(info.cgroup_path)
            if have is not None and have.intersection(exclusive):
                self.cgroups.move_cpus(info.cgroup_path, shared_target(self.partition, info, state))
                self.pushed.pop(listed.id, None)
                moved.append(listed.id)
        self.marks.mark(moved)
        return moved

    def apply(self, plan: Plan, runtime: Runtime, stale: Optional[Callable[[], bool]] = None) -> None:
        """Shrink first (shared containers leaving CPUs that became exclusive), pin last; pod quotas first.

        A defragmentation's moves (``move`` actions) go in their order, each only once the moves before it are done:
        the shared containers first shrink to the CPUs shared both before and after (without the CPUs a swap passes
        through), then each move, then the shared containers grow to the pool after. A move the runtime refuses stops
        the ones after it: ``plan.after`` becomes the state the applied moves left (``plan.recommit``: the caller
        saves it), the pool grows to what that state leaves, and the error is the plan's (kind ``move``).

        ``stale``, asked before each runtime update: True when the state this plan came from is no longer the file's
        (another writer saved it). The updates left are then not made (``plan.interrupted``): the caller plans again."""
        self.stale = stale
        order = {"quota": 0, "idle": 0, "burst": 0, "update": 1}
        updates = in_move_order(plan, sorted((a for a in plan.actions if a.action in order), key=lambda a: (
            order[a.action], a.quota is None or a.quota >= 0, a.reason.startswith("exclusive"))))
        moving = {(a.pod_uid, a.container) for a in plan.actions if a.action == "move"}
        grow: List[Action] = []
        if moving:
            updates, grow = shrink_first(plan, updates, moving)
        else:  # a repair (after a kill mid-defragmentation, say): who vacates a CPU goes before who takes it
            updates, grow = vacate_first(plan, updates)
        shrinks, regrow = self._off_detours(plan, updates)
        updates, grow = shrinks + updates, grow + regrow
        failed: List[Action] = []
        done_moves: List[Action] = []
        stopped = False
        if not moving:  # a pass's updates: the shared pool's in batches, in the order planned
            for run in runs(updates + grow):
                if len(run) > 1:
                    failed.extend(self._push_many(plan, runtime, run, CPUSet.parse(run[0].cpus)))
                else:
                    self._push(plan, runtime, run[0], failed)
            updates = grow = []
        for action in updates:
            if stopped and (action.pod_uid, action.container) in moving:
                failed.append(action)  # after a failed move: not applied (its CPUs may not be free)
                continue
            if not self._push(plan, runtime, action, failed):
                stopped = stopped or (action.pod_uid, action.container) in moving
            elif (action.pod_uid, action.container) in moving:
                done_moves.append(action)
        if stopped:
            plan.after = moved_so_far(plan, done_moves, self.topology.all_cpus)
            plan.recommit = True
            plan.errors.append({"error": "a move failed: the moves after it were not made; the state says where "
                                         "each container is", "kind": "move"})
            grow = [a._replace(cpus=str(shared_pool(self.partition, plan.after))) for a in grow]
        for action in grow:
            self._push(plan, runtime, action, failed)
        plan.actions = [a for a in plan.actions if a not in failed]
        self._follow(plan, runtime)
        if self.hooked:  # the runtime knows now, or the container is gone
            done = {a.container_id for a in plan.actions if a.action == "update"} | set(plan.followers)
            self.marks.clear(self.hooked & done | self.hooked - self.present)
        plan.applied = True

    def _off_detours(self, plan: Plan, updates: List[Action]) -> Tuple[List[Action], List[Action]]:
        """The shared containers already on the pool (no update of their own) off the CPUs a detour passes through,
        first, and back on the pool once the moves are done (the second list)."""
        detours = CPUSet().union(*(CPUSet.parse(a.cpus) for a in updates
                                   if a.action == "update" and a.reason == DETOUR))
        pool = shared_pool(self.partition, plan.after) if plan.after is not None else CPUSet()
        shrunk = pool.difference(detours)
        if not detours or not shrunk:
            return [], []
        back = [Action("update", listed.id, listed.pod_ref, listed.pod_uid, listed.name, str(pool),
                       "shared pool again after a detour", cgroup=info.cgroup_path) for listed, info in self.at_pool]
        return [a._replace(cpus=str(shrunk), reason=SHRINKING) for a in back], back

    def _halted(self, plan: Plan) -> bool:
        """The plan was interrupted: its state is no longer the file's (``apply``'s ``stale``)."""
        if not plan.interrupted and self.stale is not None and self.stale():
            plan.interrupted = True
        return plan.interrupted

    def _push(self, plan: Plan, runtime: Runtime, action: Action, failed: List[Action]) -> bool:
        """One action; False (recorded in ``failed`` and, unless interrupted, the plan) when it was not done."""
        if action.action == "update" and self._halted(plan):
            failed.append(action)
            return False
        try:
            if action.action == "quota":
                self.cgroups.set_quota(action.cgroup, action.quota or -1, action.period or 100000)
            elif action.action == "idle":
                self.cgroups.set_idle(action.cgroup, action.quota or 0)
            elif action.action == "burst":
                self.cgroups.set_burst(action.cgroup, action.quota or 0)
            else:
                cpus = CPUSet.parse(action.cpus)
                runtime.update(action.container_id, cpuset_cpus=cpus,
                               cpuset_mems=None if action.mems is None else CPUSet.parse(action.mems),
                               cpu_quota=action.quota, cpu_period=action.period)
                self.pushed[action.container_id] = cpus
            return True
        except (ContainerRuntimeError, StoreError) as exc:
            failed.append(action)
            self._failed(plan, action, exc)
        return False

    @staticmethod
    def _failed(plan: Plan, action: Action, error: Exception) -> None:
        """An update the runtime refused, in the plan: skipped when the container went, else an error."""
        where = {key: value for key, value in (("container_id", action.container_id), ("pod", action.pod),
                                               ("container", action.container)) if value or key == "container_id"}
        if isinstance(error, ContainerNotFoundError):
            plan.skipped.append(dict(where, reason="removed before its update"))
        else:
            plan.errors.append(dict(where, error=str(error), kind="update"))

    def _follow(self, plan: Plan, runtime: Runtime) -> None:
        """The followers to the new shared pool, at once where the runtime takes many (``_push_many``)."""
        if not plan.followers:
            return
        pool = shared_pool(self.partition, plan.after)
        batch = [Action("update", cid, "", "", "", str(pool), "shared pool follows") for cid in plan.followers]
        done = [a.container_id for a in batch if a not in self._push_many(plan, runtime, batch, pool)]
        plan.followers = done
        plan.counts["followers"] = len(done)

    def _push_many(self, plan: Plan, runtime: Runtime, batch: List[Action], cpus: CPUSet) -> List[Action]:
        """Updates that set only the same cpuset: in one call where the runtime takes many (``update_many``: NRI's
        reply, crictl's one process), else one by one; the ones not done (as ``_push``)."""
        many = getattr(runtime, "update_many", None)
        if many is None or len(batch) < 2:
            failed: List[Action] = []
            for action in batch:
                self._push(plan, runtime, action, failed)
            return failed
        if self._halted(plan):
            return list(batch)
        by_id = {a.container_id: a for a in batch}
        try:
            outcome = many([a.container_id for a in batch], cpus)
        except (ContainerRuntimeError, StoreError) as exc:
            outcome = [(a.container_id, exc) for a in batch]
        failed = []
        for cid, error in outcome:
            action = by_id[cid]
            if error is None:
                self.pushed[cid] = cpus
            else:
                failed.append(action)
                self._failed(plan, action, error)
        return failed


def _idle(plan: Plan, pairs: Sequence[Pair], cgroups: CgroupFS, on: bool, known: Dict[str, Optional[str]]) -> None:
    """``cpu.idle`` of each running BestEffort pod's cgroup: 1 with ``besteffort_idle`` (its tasks count as idle: a
    CPU running only them is taken as idle when other work wakes up), else 0; its QoS cgroup's and its containers'
    stay 0. The kernel refuses a cgroup's ``cpu.weight`` while it is idle (EINVAL, seen on the guest's 6.1): the
    kubelet rewrites the BestEffort QoS cgroup's weight (at every pod start and every minute, and stops updating the
    QoS cgroups at the first error), and the runtime a container's with every update (kubecpu's own, of its cpuset,
    would fail). What an earlier version set there, or the option left when turned off, is set back to 0. Where the
    kernel has no ``cpu.idle`` (cgroup v1, before 5.15), nothing is written. A value a pass verified is not read
    again (``known``, kept for the cgroups of the containers listed now)."""
    seen: Set[str] = set()
    verified = dict(known)
    known.clear()
    for listed, info in pairs:
        if listed.state != RUNNING or info.qos != BEST_EFFORT or not info.cgroup_path:
            continue
        pod = info.pod_cgroup_path
        for path, want in ((os.path.dirname(pod.rstrip("/")), "0"), (pod, "1" if on else "0"),
                           (info.cgroup_path, "0")):
            if path in seen or path in ("", "/"):
                continue
            seen.add(path)
            have = verified[path] if path in verified else cgroups.idle(path)
            if have is None or have == want:
                known[path] = have
            else:
                own = path == info.cgroup_path
                plan.actions.append(Action("idle", listed.id if own else "", listed.pod_ref, listed.pod_uid,
                                           listed.name if own else "", "", "BestEffort: cpu.idle = %s" % want,
                                           quota=int(want), cgroup=path))


def _burst(plan: Plan, pairs: Sequence[Pair], cgroups: CgroupFS) -> None:
    """``cpu.max.burst`` of each running Burstable container whose pod says ``cpu-burst.kubecpu.io: <duration>``, at
    most its CFS quota (a container without a quota has nothing to burst over). A value that is not a duration is
    the plan's error (kind ``annotation``); a kernel without ``cpu.max.burst`` (before 5.14, cgroup v1) is skipped.

    The kernel refuses a ``cpu.max`` below the burst (EINVAL, seen on the guest's 6.1): an in-place decrease of the
    limit would fail. The quota the runtime is about to apply counts too (the NRI plugin's UpdateContainer carries
    it, before the runtime writes it), so the burst is lowered first; the agent, which learns of a resize only once
    it is applied, cannot, and a pod with a burst then needs its burst annotation below the new limit first."""
    for listed, info in pairs:
        text = (info.annotations or {}).get(BURST_ANNOTATION)
        if listed.state != RUNNING or info.qos != BURSTABLE or text is None:
            continue
        try:
            wanted = round(parse_duration(text) * 1000000)
        except ValueError as exc:
            plan.error(listed, "%s of pod %s: %s" % (BURST_ANNOTATION, listed.pod_ref, exc), "annotation")
            continue
        quota, have = cgroups.quota(info.cgroup_path), cgroups.burst(info.cgroup_path)
        if quota is None or quota[0] <= 0 or have is None:
            continue
        limit = min(quota[0], info.cpu_quota) if info.cpu_quota > 0 else quota[0]  # (the new one, coming)
        burst = min(wanted, limit)
        if have != burst:
            plan.actions.append(Action("burst", listed.id, listed.pod_ref, listed.pod_uid, listed.name, "",
                                       "%s: %s (at most the quota, %d µs)" % (BURST_ANNOTATION, text, limit),
                                       quota=burst, cgroup=info.cgroup_path))


def _pod_quotas(plan: Plan, pairs: Sequence[Pair], pods_exclusive: Dict[str, bool], cgroups: CgroupFS) -> None:
    """Pod-level CFS quota: none while the pod holds exclusive CPUs, else the sum of its containers' quotas."""
    seen: Set[str] = set()
    for listed, info in pairs:
        if listed.pod_uid in seen or listed.pod_uid not in pods_exclusive or info.qos != GUARANTEED:
            continue
        seen.add(listed.pod_uid)
        path = info.pod_cgroup_path
        have = cgroups.quota(path)
        if have is None:
            continue
        if pods_exclusive[listed.pod_uid]:
            want = -1
        else:
            quotas = [i.cpu_quota for other, i in pairs
                      if other.pod_uid == listed.pod_uid and other.state == RUNNING]
            want = sum(quotas) if quotas and all(q > 0 for q in quotas) else -1
        if have[0] != want:
            plan.actions.append(Action("quota", "", listed.pod_ref, listed.pod_uid, "", "",
                                       "pod-level CFS quota", quota=want, period=have[1], cgroup=path))
