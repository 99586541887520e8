# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The runtime side of a pass, after the state lock is released (``NodeManager.session``): the plan's updates pushed,
and planned again when another writer saved the state meanwhile (docs/SECURITY.md: no lock across a runtime call)."""

from __future__ import annotations

import functools
from typing import Callable, List, Optional

from ..kubelet.state import CPUState
from ..runtime.model import Runtime
from .plan import Plan
from .pod_views import Pair
from .state_store import StateStore
from .targets import CgroupTargets, Scope

REPLANS = 3  # a pass plans again at most this often after other writers saved while it pushed (then the next pass)


def push_unlocked(targets: CgroupTargets, store: StateStore, plan: Plan, runtime: Runtime, *,
                  load: Optional[Callable[[], CPUState]], pairs: List[Pair], scope: Scope,
                  committed: Optional[List[int]]) -> None:
    """The plan's updates through the runtime, outside the lock. Before each update the state file's identity is
    compared with the one ``committed`` (a stat): when another writer saved since (the OCI hook allocated, and moved
    the shared containers off its new CPUs), the updates left are dropped and the targets are planned again, under
    the lock, from the state as it is now (``load``; None: nothing to plan again, the none policy) with what this pass
    observed. So an update planned from an older state reaches at most one container (or one batch) after a newer
    state was saved, and the replan sets it right. When other writers keep saving past ``REPLANS`` replans, the
    shared containers left on CPUs the saved state gives exclusively are moved in cgroupfs under the lock, as the
    OCI hook moves them (``CgroupTargets.settle``: no runtime call), and the next pass tells the runtime."""
    current = plan
    for round_ in range(REPLANS + 1):
        changed = functools.partial(_saved_since, store, committed)
        targets.apply(current, runtime, stale=changed)
        if current is not plan:
            plan.actions.extend(current.actions)
            plan.errors.extend(current.errors)
            plan.skipped.extend(current.skipped)
            plan.followers.extend(current.followers)
        if load is None or (not current.interrupted and not changed()):
            break
        if round_ == REPLANS:  # out of replans: what is left set right in cgroupfs, under the lock, no runtime call
            with store.locked():
                plan.counts["settled"] = len(targets.settle(load(), pairs))
            break
        with store.locked():
            state = load()
            current = Plan(state)
            targets.plan(current, state, pairs, scope)
            committed = store.generation()
        plan.counts["replans"] = plan.counts.get("replans", 0) + 1
    plan.applied = True


def _saved_since(store: StateStore, committed: Optional[List[int]]) -> bool:
    """Another writer saved the state file since it had the identity ``committed``."""
    return store.generation() != committed
