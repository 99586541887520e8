# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""A lost or corrupt checkpoint rebuilt from what runs (asked for since kubernetes#52709): the runtime says which
containers run and what they request, cgroupfs which CPUs each one has.

A running Guaranteed container with an integral request whose cpuset holds exactly that many CPUs, none reserved
and none in any other running container's cpuset, was pinned: it gets an entry under its pod UID and container
name. The shared pool is the rest. A container that looks pinned but overlaps another or holds reserved CPUs is
reported and left to the shared pool (the kubelet's reconcile moves it there).

A finished init container keeps its entry in the kubelet's checkpoint for as long as its pod runs; without it the
restarted kubelet allocates its CPUs afresh when it admits the pod again (and rejects the pod on a node without
that many free CPUs). Its cgroup is gone, but the pod's app containers took its CPUs first (the kubelet's reuse):
when they hold at least as many, the entry is rebuilt from theirs (the CPUs the kubelet's topology rules take
among them; any of them is what its start accepts, and the entry only lets them be reused). When they hold fewer,
the init container's own CPUs cannot be proven: it is said, with what the kubelet will do. Pod-level assignments
(kubelet 1.36 and later) cannot be rebuilt: the runtime does not show a pod's pod-level request.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple, cast

from ..kubelet.cpuset import CPUSet
from ..kubelet.device_state import devices_beside, read_device_nodes
from ..kubelet.memory_state import beside, read_memory_nodes
from ..kubelet.policy import STATIC, Policy, StaticPolicy, take_by_topology
from ..kubelet.state import CPUState
from ..node.manager import NodeManager
from ..node.plan import Action, Plan
from ..node.pod_views import Pair, PodView, build_views, running_pods
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
    for view in views.values():
        _init_entries(policy, state, view, plan)
    return state


def _init_entries(policy: Policy, state: CPUState, view: PodView, plan: Plan) -> None:
    """The entries of ``view``'s finished init containers, from the CPUs its app containers were given (see above)."""
    apps = CPUSet().union(*(state.entries.get(view.uid, {}).values()))
    for init in view.model.init_containers:
        count = view.model.guaranteed_cpus(init.name)
        listed = view.latest[init.name][0]
        if not count or state.get(view.uid, init.name) is not None:
            continue
        if len(apps) < count:
            plan.error(listed, "init container %s/%s had %d exclusive CPU(s) and its app containers hold %d: the rest "
                       "were its own, which no cgroup shows, so it gets no entry; the kubelet allocates %d CPU(s) for "
                       "it afresh when it starts (and rejects the pod when fewer are free)"
                       % (listed.pod_ref, init.name, count, len(apps), count), "rebuild")
            continue
        cpus = take_by_topology(policy.topology, cast(StaticPolicy, policy).options, apps.as_frozenset(), count)
        state.set(view.uid, init.name, cpus)
        plan.actions.append(Action("allocate", listed.id, listed.pod_ref, view.uid, init.name, str(cpus),
                                   "finished init container: the CPUs its app containers reused"))


def rebuild_node(manager: NodeManager) -> Plan:
    """A checkpoint from what the manager's runtime runs (``plan.after``). Writes nothing. Raises StateError when the
    restarted kubelet would refuse it (``node/judge.py``: its Topology Manager, the Memory and Device Managers'
    checkpoints beside the file, the running pods admitted again): such a file is never written."""
    plan = Plan(CPUState(manager.policy.name))
    pairs = manager.observe(plan)
    rebuild_state(manager.policy, manager.cgroups, pairs, plan)
    if manager.policy.name == STATIC and manager.store.kubelet.pod_level:
        plan.error(None, "pod-level exclusive CPUs (podEntries) are not rebuilt: the runtime does not show a pod's "
                   "pod-level request; the kubelet allocates them afresh when it admits such a pod again", "rebuild")
    path = manager.store.path
    judge = manager.topology_admission.judge(manager.policy, memory=read_memory_nodes(beside(path)),
                                             pods=running_pods(build_views(pairs)),
                                             devices=read_device_nodes(devices_beside(path)))
    judge.check(plan.after, manager.store.path)
    return plan
