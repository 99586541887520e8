# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""What is pinned where: the state joined with the runtime and cgroupfs (drift, CFS throttling, free cores)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..errors import ContainerRuntimeError
from ..kubelet.cpuset import CPUSet
from ..kubelet.state import CPUState
from ..kubelet.topology import Topology
from ..node.manager import NodeManager
from ..node.plan import Plan
from ..node.pod_views import build_views
from ..runtime.model import RUNNING
from .defrag import headroom


def free_whole_cores(topo: Topology, free: CPUSet) -> Dict[str, int]:
    """Per NUMA node, the cores all of whose CPUs are free (what full-pcpus-only can still hand out)."""
    counts = {str(node): 0 for node in sorted(topo.numa_cpus)}
    for cpus in topo.core_cpus.values():
        if cpus and all(c in free for c in cpus):
            counts[str(topo.loc[min(cpus)][2])] += 1
    return counts


def cpu_map(topo: Topology, reserved: CPUSet, assignments: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One row per online CPU, where it sits and who owns it: the data of the fleet report's core map.

    ``kind`` is exclusive (owned by ``owner``, the pod name where the runtime told it, else the pod UID, then
    the container), reserved or shared.
    """
    owners: Dict[int, Dict[str, Any]] = {}
    for assignment in assignments:
        for cpu in CPUSet.parse(assignment["cpus"]):
            owners[cpu] = assignment
    rows = []
    for cpu in sorted(topo.loc):
        core, socket, numa, uncore = topo.loc[cpu]
        row: Dict[str, Any] = {"cpu": cpu, "core": core, "socket": socket, "numa": numa, "uncore": uncore,
                               "kind": "shared", "owner": None, "pod": None, "pod_uid": None, "container": None}
        if cpu in owners:
            owner = owners[cpu]
            row.update(kind="exclusive", pod=owner["pod"], pod_uid=owner["pod_uid"], container=owner["container"],
                       owner="%s/%s" % (owner["pod"] or owner["pod_uid"], owner["container"]))
        elif cpu in reserved:
            row["kind"] = "reserved"
        rows.append(row)
    return rows


def node_info(manager: NodeManager, state: CPUState, use_runtime: bool = True) -> Dict[str, Any]:
    """The state joined with the runtime and cgroupfs, and the per-CPU map."""
    info = _joined(manager, state, use_runtime)
    pod_level = [{"pod": None, "pod_uid": uid, "container": "(pod-level)", "cpus": str(cpus)}
                 for uid, cpus in sorted(state.pod_entries.items())]
    info["cpus"] = cpu_map(manager.topology, manager.policy.reserved, pod_level + info["assignments"])
    return info


def _joined(manager: NodeManager, state: CPUState, use_runtime: bool) -> Dict[str, Any]:
    topo = manager.topology
    reserved = manager.policy.reserved
    shared = state.default if manager.policy.name == "static" else topo.all_cpus  # none: everything is shared
    free = shared.difference(reserved)
    info: Dict[str, Any] = {
        "policy": manager.policy.name, "state_file": manager.store.path, "state": state.to_dict(),
        "reserved_cpus": str(reserved), "shared_pool": str(shared),
        "exclusive_cpus": str(state.assigned().union(state.pod_assigned())),
        "pod_entries": [{"pod_uid": uid, "cpus": str(cpus)} for uid, cpus in sorted(state.pod_entries.items())],
        "free_whole_cores_per_numa": free_whole_cores(topo, free), "headroom": headroom(topo, free),
        "topology": topo.summary(),
        "runtime": None, "assignments": [], "containers": [], "drift": [], "warnings": []}
    by_key: Dict[Any, Dict[str, Any]] = {}
    for uid, name, cpus in state.assignments():
        entry: Dict[str, Any] = {
            "pod_uid": uid, "container": name, "cpus": str(cpus), "pod": None, "container_id": None,
            "running": False, "cgroup_cpus": None, "drift": None,
            "numa_nodes": str(CPUSet(topo.loc[c][2] for c in cpus if c in topo.loc))}
        info["assignments"].append(entry)
        by_key[(uid, name)] = entry
    if not use_runtime or manager.runtime is None:
        return info
    try:
        pairs = manager.observe(Plan(state))
        info["runtime"] = manager.runtime.name
    except ContainerRuntimeError as exc:
        info["warnings"].append("runtime not queried: %s" % exc)
        return info
    views = build_views(pairs)
    for view in views.values():
        for listed_item, details in view.latest.values():
            assigned = state.get(view.uid, listed_item.name)
            target = assigned if assigned is not None else state.default
            running = listed_item.state == RUNNING
            current: Optional[CPUSet] = manager.cgroups.cpus(details.cgroup_path) if running else None
            drift = running and current is not None and current != target and manager.policy.name == "static"
            row = {"pod": listed_item.pod_ref, "pod_uid": view.uid, "container": listed_item.name,
                   "container_id": listed_item.id, "state": listed_item.state, "qos": details.qos,
                   "cpu_request_milli": details.requested_milli(), "exclusive": assigned is not None,
                   "cpus": str(target), "cgroup_cpus": None if current is None else str(current), "drift": drift,
                   "cpu_stat": manager.cgroups.cpu_stat(details.cgroup_path) if running else {},
                   "cfs_quota": (manager.cgroups.quota(details.cgroup_path) or (None, None))[0] if running else None}
            info["containers"].append(row)
            if drift:
                info["drift"].append({"container_id": listed_item.id, "pod": listed_item.pod_ref,
                                      "container": listed_item.name, "want": str(target), "have": str(current)})
            owner = by_key.get((view.uid, listed_item.name))
            if owner is not None:
                owner.update(pod=listed_item.pod_ref, container_id=listed_item.id, running=running,
                             cgroup_cpus=row["cgroup_cpus"], drift=drift)
    info["containers"].sort(key=lambda r: (r["pod"], r["container"]))
    return info
