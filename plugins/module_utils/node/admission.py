# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The Topology Manager's admission of a container about to get exclusive CPUs (ALGORITHM.md section 12,
HINTS.md), and the what-if report of a fresh admission of everything that runs."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..errors import TopologyAffinityError
from ..kubelet.cpuset import EMPTY, CPUSet
from ..kubelet.hints import TopologyHint, container_hints, pod_hints
from ..kubelet.pod import Pod
from ..kubelet.policy import Policy, StaticPolicy
from ..kubelet.state import CPUState
from ..kubelet.topology import Topology
from ..kubelet.topology_manager import NONE, TopologyManager
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

    def readmission(self, policy: Policy, state: CPUState) -> List[Dict[str, str]]:
        """The pinned containers this Topology Manager would reject when a restarted kubelet admits the running pods
        again (ALGORITHM.md section 9: a container that holds CPUs gets its hints from those CPUs alone; under the
        pod scope, a pod from all its containers' CPUs together), each with the kubelet's reason. Read from the
        checkpoint alone: a pod's request is taken to be the CPUs its containers hold."""
        if self.manager is None or not isinstance(policy, StaticPolicy):
            return []
        rejected: List[Dict[str, str]] = []
        for pod, containers in sorted(state.entries.items()):
            if self.scope == "pod":
                sets = list(containers.values())
                held = CPUSet().union(*sets)
                hints = pod_hints(self.topology, policy.options, EMPTY, len(held),
                                  assigned=[(len(cpus), cpus) for cpus in sets])
                checks = [(", ".join(sorted(containers)), held, hints)]
            else:
                checks = [(name, cpus, container_hints(self.topology, policy.options, EMPTY, len(cpus), assigned=cpus))
                          for name, cpus in sorted(containers.items())]
            for name, cpus, hints in checks:
                if not self.manager.merge([{"cpu": hints}]).admit:
                    nodes = sorted({self.topology.loc[c][2] for c in cpus if c in self.topology.loc})
                    rejected.append({"pod": pod, "container": name, "cpus": str(cpus), "reason": "%s: topology manager "
                                     "policy %s, scope %s, rejects CPUs %s on NUMA node(s) %s when the restarted "
                                     "kubelet admits the pod again" % (TopologyAffinityError.TEXT, self.policy,
                                                                       self.scope, cpus, nodes)})
        return rejected

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
