# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""What is pinned where: the state joined with the runtime and cgroupfs (drift, CFS throttling, free cores)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..errors import ContainerRuntimeError, HousekeepingError
from ..kubelet.cpuset import CPUSet
from ..kubelet.state import CPUState
from ..kubelet.topology import Topology
from ..node.manager import NodeManager
from ..node.housekeeping import IrqRecord, machine_files, record_path
from ..node.plan import Plan
from ..node.power import power_info
from ..node.partition import is_system, shared_target
from ..node.pod_views import build_views
from ..runtime.irq import IrqFS
from ..runtime.irqbalance import IrqBalance
from ..runtime.model import RUNNING
from .defrag import headroom


def free_whole_cores(topo: Topology, free: CPUSet) -> Dict[str, int]:
    """Per NUMA node, the cores all of whose CPUs are free (what full-pcpus-only can still hand out)."""
    counts = {str(node): 0 for node in sorted(topo.numa_cpus)}
    for cpus in topo.core_cpus.values():
        if cpus and all(c in free for c in cpus):
            counts[str(topo.loc[min(cpus)][2])] += 1
    return counts


def cpu_map(topo: Topology, reserved: CPUSet, assignments: List[Dict[str, Any]],
            system: bool = False) -> List[Dict[str, Any]]:
    """One row per online CPU, where it sits and who owns it: the data of the fleet report's core map.

    ``kind`` is exclusive (owned by ``owner``, the pod name where the runtime told it, else the pod UID, then
    the container), reserved (``system``: the system partition's, ``system``) or shared.
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
            row["kind"] = "system" if system else "reserved"
        rows.append(row)
    return rows


def node_info(manager: NodeManager, state: CPUState, use_runtime: bool = True) -> Dict[str, Any]:
    """The state joined with the runtime and cgroupfs, and the per-CPU map."""
    info = _joined(manager, state, use_runtime)
    pod_level = [{"pod": None, "pod_uid": uid, "container": "(pod-level)", "cpus": str(cpus)}
                 for uid, cpus in sorted(state.pod_entries.items())]
    partition = manager.cgroup_targets.partition
    info["cpus"] = cpu_map(manager.topology, manager.policy.reserved, pod_level + info["assignments"],
                           partition is not None)
    info["housekeeping"] = housekeeping_info(CPUSet.parse(info["exclusive_cpus"]), manager.cgroups.root,
                                             None if manager.store.read_only else record_path(manager.store.path),
                                             *machine_files(manager.sysfs_root))
    info["housekeeping"]["power"] = power_info(None if manager.store.read_only else manager.store.path,
                                               manager.sysfs_root)
    return info


def _partition_info(manager: NodeManager) -> Optional[Dict[str, Any]]:
    """The system partition (None when off): its CPUs and who is a system pod."""
    partition = manager.cgroup_targets.partition
    if partition is None:
        return None
    return {"cpus": str(partition.reserved), "namespaces": list(partition.namespaces),
            "priority_classes": list(partition.priority_classes)}


DAEMON_CGROUPS = ("system.slice", "user.slice", "init.scope", "kubepods.slice", "kubepods")


def housekeeping_info(exclusive: CPUSet, cgroup_root: str, record: Optional[str], irqs: Optional[IrqFS] = None,
                      irqbalance: Optional[IrqBalance] = None) -> Dict[str, Any]:
    """What else may run on the exclusive CPUs (docs/HOUSEKEEPING.md): the interrupts whose affinity names one (and
    those the kernel refused to move, from the record), whether a running irqbalance bans them, and the CPUs the
    daemons' cgroups may use (cgroup v2's ``cpuset.cpus.effective``)."""
    irqs, irqbalance = irqs or IrqFS(), irqbalance or IrqBalance()
    table = {irq: irqs.affinity(irq) for irq in irqs.irqs()}
    on = sorted(irq for irq, cpus in table.items() if cpus is not None and cpus.intersection(exclusive))
    doc: Dict[str, Any] = {"interrupts": len(table), "interrupts_on_exclusive": on,
                           "interrupts_kept_off": len(table) - len(on), "interrupts_refused": [],
                           "default_affinity": str(irqs.default_affinity() or ""), "irqbalance": None, "daemons": {}}
    try:
        doc["interrupts_refused"] = IrqRecord(record).load()["refused"] if record else []
    except HousekeepingError as exc:
        doc["interrupts_refused"] = str(exc)
    daemon = irqbalance.running()
    if daemon is not None:
        try:
            banned = irqbalance.banned(daemon[1])
            doc["irqbalance"] = {"pid": daemon[0], "banned": None if banned is None else str(banned),
                                 "agrees": banned is not None and exclusive.issubset(banned)}
        except HousekeepingError as exc:
            doc["irqbalance"] = {"pid": daemon[0], "banned": None, "agrees": False, "error": str(exc)}
    for name in DAEMON_CGROUPS:
        try:
            with open("%s/%s/cpuset.cpus.effective" % (cgroup_root, name), encoding="ascii") as handle:
                doc["daemons"][name] = handle.read(4096).strip()
        except OSError:
            continue
    return doc


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
        "topology": topo.summary(), "system_partition": _partition_info(manager),
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
    partition = manager.cgroup_targets.partition
    for view in views.values():
        for listed_item, details in view.latest.values():
            assigned = state.get(view.uid, listed_item.name)
            target = assigned if assigned is not None else shared_target(partition, details, state)
            running = listed_item.state == RUNNING
            current: Optional[CPUSet] = manager.cgroups.cpus(details.cgroup_path) if running else None
            drift = running and current is not None and current != target and manager.policy.name == "static"
            row = {"pod": listed_item.pod_ref, "pod_uid": view.uid, "container": listed_item.name,
                   "container_id": listed_item.id, "state": listed_item.state, "qos": details.qos,
                   "cpu_request_milli": details.requested_milli(), "exclusive": assigned is not None,
                   "system": assigned is None and is_system(partition, details),
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
