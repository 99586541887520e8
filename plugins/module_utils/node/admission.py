# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The Topology Manager's admission of a container about to get exclusive CPUs (ALGORITHM.md section 12,
HINTS.md), and the what-if report of a fresh admission of everything that runs."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..errors import TopologyAffinityError
from ..kubelet.cpuset import CPUSet
from ..kubelet.device_state import DeviceNodes
from ..kubelet.hints import TopologyHint
from ..kubelet.pod import Pod
from ..kubelet.policy import Policy
from ..kubelet.state import CPUState
from ..kubelet.topology import Topology
from ..kubelet.topology_manager import NONE, TopologyManager
from .judge import Judge, MemoryNodes
from .plan import Plan

Providers = List[Optional[Mapping[str, Optional[Sequence[TopologyHint]]]]]


class Admission:
    """A Topology Manager policy and scope in front of the CPU policy (``none``: everything passes through)."""

    def __init__(self, topology: Topology, policy: str = NONE, scope: str = "container",
                 options: Optional[Mapping[str, str]] = None) -> None:
        self.topology = topology
        self.scope = scope
        self.manager: Optional[TopologyManager] = None
        if policy != NONE:
            self.manager = TopologyManager(policy, sorted(topology.numa_cpus), options, topology.numa_distances)

    @property
    def policy(self) -> str:
        return NONE if self.manager is None else self.manager.policy

    def admit(self, policy: Policy, state: CPUState, pod: Pod, container: str,
              hint_nodes: Optional[Sequence[int]]) -> Optional[Sequence[int]]:
        """The CPU hints (and a preferred hint for ``hint_nodes``, a device's NUMA node) merged under the policy.
        Returns the NUMA affinity to allocate in; raises TopologyAffinityError when the policy does not admit the
        container. Without a Topology Manager policy ``hint_nodes`` stays a plain NUMA preference."""
        if self.manager is None or state.get(pod.uid, container) is not None or pod.guaranteed_cpus(container) == 0:
            return hint_nodes
        cpu_hints = policy.topology_hints(state, pod, container, self.scope)
        providers: Providers = [{"cpu": cpu_hints}]
        if hint_nodes:
            providers.append({"device": [TopologyHint(tuple(sorted(hint_nodes)), True)]})
        merged = self.manager.merge(providers)
        if not merged.admit:
            shown = "none" if cpu_hints is None else ", ".join(
                "%s%s" % (list(h.affinity or ()), "" if h.preferred else "?") for h in cpu_hints) or "empty"
            raise TopologyAffinityError("topology manager policy %s, scope %s, CPU hints %s"
                                        % (self.manager.policy, self.scope, shown))
        return merged.nodes

    def judge(self, policy: Policy, *, memory: Optional[MemoryNodes] = None, pods: Optional[Sequence[Pod]] = None,
              devices: Optional[DeviceNodes] = None) -> Judge:
        """The restarted kubelet with this Topology Manager in front of ``policy`` (``node/judge.py``)."""
        return Judge(policy, self.manager, self.scope, memory=memory, pods=pods, devices=devices)

    def readmission(self, policy: Policy, state: CPUState, *, memory: Optional[MemoryNodes] = None,
                    devices: Optional[DeviceNodes] = None) -> List[Dict[str, str]]:
        """The pods a restarted kubelet with this Topology Manager would reject when it admits the running pods again
        (``node/judge.py``, the pods read from the checkpoint alone), each with the kubelet's reason."""
        if self.manager is None:
            return []
        return [refusal.to_dict() for refusal in self.judge(policy, memory=memory, devices=devices).readmission(state)]

    def report(self, simulated: Plan, skipped: List[Dict[str, str]]) -> Dict[str, Any]:
        """The what-if document from a plan that allocated every running container afresh."""
        rows: List[Dict[str, Any]] = []
        for action in simulated.actions:
            cpus = CPUSet.parse(action.cpus)
            rows.append({"pod": action.pod, "pod_uid": action.pod_uid, "container": action.container,
                         "container_id": action.container_id, "admitted": True, "cpus": action.cpus,
                         "numa_nodes": sorted({self.topology.loc[c][2] for c in cpus if c in self.topology.loc}),
                         "reason": None})
        for error in simulated.errors:
            rows.append({"pod": error.get("pod"), "pod_uid": None, "container": error.get("container"),
                         "container_id": error.get("container_id"), "admitted": False, "cpus": None,
                         "numa_nodes": [], "reason": error["error"],
                         "topology": TopologyAffinityError.TEXT in error["error"]})
        rows.sort(key=lambda r: (r["pod"] or "", r["container"] or ""))
        return {"topology_manager_policy": self.policy, "topology_manager_scope": self.scope, "containers": rows,
                "admitted": sum(1 for r in rows if r["admitted"]),
                "rejected": sum(1 for r in rows if not r["admitted"]), "skipped": skipped}
