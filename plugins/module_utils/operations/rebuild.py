# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""A lost or corrupt checkpoint rebuilt from what runs (asked for since kubernetes#52709): the runtime says which
containers run and what they request, cgroupfs which CPUs each one has.

A running Guaranteed container with an integral request whose cpuset holds exactly that many CPUs, none reserved
and none in any other running container's cpuset, was pinned: it gets an entry under its pod UID and container
name. The shared pool is the rest. A container that looks pinned but overlaps another or holds reserved CPUs is
reported and left to the shared pool (the kubelet's reconcile moves it there).
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from ..kubelet.cpuset import CPUSet
from ..kubelet.policy import STATIC, Policy
from ..kubelet.state import CPUState
from ..node.manager import NodeManager
from ..node.plan import Action, Plan
from ..node.pod_views import Pair, build_views
from ..runtime.cgroups import CgroupFS
from ..runtime.model import RUNNING


def rebuild_state(policy: Policy, cgroups: CgroupFS, pairs: Sequence[Pair], plan: Plan) -> CPUState:
    """The rebuilt state (also ``plan.after``); ``plan.actions`` has an entry per container kept, ``plan.errors``
    one per container left to the shared pool."""
    state = CPUState(policy.name)
    policy.start(state)
    plan.after = state
    if policy.name != STATIC:
        return state
    views = build_views(pairs)
    seen: Dict[str, CPUSet] = {}
    pinned: List[Tuple[Pair, CPUSet]] = []
    everything = policy.topology.all_cpus
    for listed, info in pairs:
        if listed.state != RUNNING or not listed.is_kubernetes:
            continue
        cpus = cgroups.cpus(info.cgroup_path)
        if cpus is None:
            continue
        seen[listed.id] = cpus
        view = views.get(listed.pod_uid)
        count = view.model.guaranteed_cpus(listed.name) if view is not None else 0
        if count and len(cpus) == count and cpus != everything:
            pinned.append(((listed, info), cpus))
    for (listed, _info), cpus in pinned:
        others = CPUSet().union(*(c for cid, c in seen.items() if cid != listed.id))
        reserved = cpus.intersection(policy.reserved)
        if reserved or not cpus.isdisjoint(others):
            why = "holds reserved CPU(s) %s" % reserved if reserved else "shares CPUs with another container"
            plan.error(listed, "container %s/%s has cpuset %s but %s: left to the shared pool"
                       % (listed.pod_ref, listed.name, cpus, why), "rebuild")
            continue
        state.set(listed.pod_uid, listed.name, cpus)
        state.default = state.default.difference(cpus)
        plan.actions.append(Action("allocate", listed.id, listed.pod_ref, listed.pod_uid, listed.name, str(cpus),
                                   "its cgroup holds exactly its integral request, exclusively"))
    return state


def rebuild_node(manager: NodeManager) -> Plan:
    """A checkpoint from what the manager's runtime runs (``plan.after``). Writes nothing."""
    plan = Plan(CPUState(manager.policy.name))
    rebuild_state(manager.policy, manager.cgroups, manager.observe(plan), plan)
    return plan
