# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The system partition: the reserved CPUs for the system, and nothing else on them (KEP-5894's ask;
docs/HOUSEKEEPING.md).

kubecpu's daemon drop-ins confine systemd's daemons to the reserved CPUs; the node's own DaemonSets (the CNI,
kube-proxy, the node exporter) still run in the shared pool beside the Burstable pods. With ``system_partition`` on,
the shared containers of the system pods run on the reserved CPUs only, and every other shared container on the
shared pool without them, as ``strict-cpu-reservation`` keeps the shared pool off them (a container with exclusive
CPUs keeps them, whatever its pod).

A system pod is one of ``system_namespaces`` (the kubelet's ``io.kubernetes.pod.namespace`` label, which the pod does
not write), or one whose ``priority-class.kubecpu.io`` annotation names one of ``system_priority_classes`` (default
``system-node-critical``). No runtime shows a pod's priority class: the kubelet passes a pod's labels and annotations
to the runtime, never its ``priorityClassName``, so the class is read from that annotation, which a manifest or a
mutating admission policy sets from ``spec.priorityClassName``. A pod's annotations are its author's: on a cluster
whose tenants create pods, allow that annotation only through admission, or choose by namespace only
(``system_priority_classes: []``).

A reserved set smaller than what the system pods' running containers request is a warning with the figures (kind
``partition``), never a move back: they share the reserved CPUs, as the operator chose. When the shared pool without
the reserved CPUs is empty (every other CPU is exclusive), the other shared containers keep the whole shared pool and
the pass says so, rather than run on no CPU. Switched off, the next pass gives every shared container the whole shared
pool again.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Optional, Sequence, Tuple

from ..kubelet.cpuset import CPUSet
from ..kubelet.state import CPUState
from ..runtime.model import PRIORITY_ANNOTATION, RUNNING, ContainerInfo, ListedContainer
from .config import ManagerOptions
from .plan import Plan

KIND = "partition"  # a plan's warning: the system pods request more than the reserved CPUs
SYSTEM_REASON = "system partition: the reserved CPUs"  # a system container's update (never "shared pool ...")
Pair = Tuple[ListedContainer, ContainerInfo]


class Partition(NamedTuple):
    """Who is a system pod, and the reserved CPUs they run on."""

    reserved: CPUSet
    namespaces: Tuple[str, ...]
    priority_classes: Tuple[str, ...]

    def is_system(self, namespace: str, annotations: Optional[Mapping[str, str]]) -> bool:
        if namespace in self.namespaces:
            return True
        priority = (annotations or {}).get(PRIORITY_ANNOTATION)
        return priority is not None and priority.strip() in self.priority_classes

    def pool(self, state: CPUState) -> CPUSet:
        """The other shared containers' CPUs: the shared pool without the reserved ones (the whole pool when that
        leaves none)."""
        rest = state.default.difference(self.reserved)
        return rest if rest else state.default

    def target(self, info: ContainerInfo, state: CPUState) -> CPUSet:
        """A shared container's CPUs: the reserved ones for a system pod's, else ``pool``."""
        return self.reserved if self.is_system(info.pod_namespace, info.annotations) else self.pool(state)

    def report(self, plan: Plan, pairs: Sequence[Pair], state: CPUState) -> None:
        """The partition's figures in ``plan.counts`` (the metrics), and the warnings: system pods requesting more
        than the reserved CPUs; other shared containers left on the reserved CPUs for want of any other."""
        system = [(listed, info) for listed, info in pairs if listed.state == RUNNING and listed.is_kubernetes
                  and state.get(listed.pod_uid, listed.name) is None
                  and self.is_system(info.pod_namespace, info.annotations)]
        requested = sum(info.requested_milli() for _listed, info in system)
        plan.counts.update(system_partition_cpus=len(self.reserved), system_partition_containers=len(system),
                           system_partition_request_millicores=requested)
        if requested > len(self.reserved) * 1000:
            pods = sorted({listed.pod_ref for listed, _info in system})
            plan.errors.append({"error": "the system partition's %d containers (pods %s) request %dm of CPU and the "
                                         "reserved CPUs %s are %dm: they share them (kept there; reserve more CPUs "
                                         "to give them room)" % (len(system), ", ".join(pods), requested,
                                                                 self.reserved, len(self.reserved) * 1000),
                                "kind": KIND})
        if not state.default.difference(self.reserved) and state.default:
            plan.errors.append({"error": "the shared pool without the reserved CPUs is empty (every other CPU is "
                                         "exclusive): the other shared containers keep the whole shared pool %s"
                                         % state.default, "kind": KIND})


def partition_of(options: ManagerOptions, reserved: CPUSet) -> Optional[Partition]:
    """The node's partition when ``system_partition`` is on (and there are reserved CPUs); else None."""
    namespaces, classes = options.system_namespaces, options.system_priority_classes
    if not options.system_partition or not reserved:
        return None
    return Partition(reserved, namespaces, classes)


def shared_target(partition: Optional[Partition], info: ContainerInfo, state: CPUState) -> CPUSet:
    """What a container without exclusive CPUs runs on: the shared pool, or with a partition its side of it."""
    return state.default if partition is None else partition.target(info, state)


def shared_pool(partition: Optional[Partition], state: CPUState) -> CPUSet:
    """The CPUs of the shared containers that are not the system's."""
    return state.default if partition is None else partition.pool(state)


def is_system(partition: Optional[Partition], info: ContainerInfo) -> bool:
    return partition is not None and partition.is_system(info.pod_namespace, info.annotations)
