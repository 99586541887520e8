# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""What a node's manager would decide for what runs, without changing the node: every running container admitted
into a given state (as a kubelet that turns static admits them), and every one re-admitted afresh under the manager's
Topology Manager policy (as the kubelet does after its checkpoint is removed). Both read the runtime once.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ..errors import ContainerRuntimeError
from ..kubelet.cpuset import CPUSet
from ..kubelet.device_state import devices_beside, read_device_nodes
from ..kubelet.memory_state import beside, read_memory_nodes
from ..kubelet.pod import Pod
from ..kubelet.policy import Policy
from ..kubelet.state import CPUState
from ..kubelet.topology import Topology
from .config import NodeConfig
from .admission import Admission
from .factory import build_manager
from .judge import Judge
from .manager import NodeManager
from .plan import Plan
from .pod_views import PodView, build_views, running_pods


def adopt(manager: NodeManager, state: CPUState) -> Plan:
    """Every running container admitted into ``state`` (pods in creation order), as the kubelet admits what runs on a
    node that turns static. Reads the runtime; changes ``state``, nothing on the node."""
    simulated = Plan(state.copy())
    views = build_views(manager.observe(simulated))
    manager.allocate_running(simulated, state, views)
    return simulated


def readmission(manager: NodeManager) -> Dict[str, Any]:
    """What if every running container were admitted afresh under the manager's Topology Manager policy: which would
    be admitted (CPUs, NUMA nodes) and which rejected, with the kubelet's reason. Reads the runtime; changes nothing."""
    fresh = CPUState(manager.policy.name)
    manager.policy.start(fresh)
    pods = (manager.store.load() or fresh).pod_entries  # pod-level exclusive CPUs (kubelet 1.36+) stay taken
    fresh.pod_entries, fresh.default = pods, fresh.default.difference(CPUSet().union(*pods.values()))
    simulated = adopt(manager, fresh)
    return manager.topology_admission.report(simulated, simulated.skipped)


class Running:
    """What runs on a node, listed once through a read-only manager for ``config`` (its runtime closed after the
    list): called with a state, every running container admitted into it (``adopt``); ``pods``, the pods a restarted
    kubelet admits again (``node/judge.py``)."""

    def __init__(self, config: NodeConfig, topology: Topology) -> None:
        self.config = config._replace(read_only=True)
        self.topology = topology
        self._listed: Optional[Tuple[NodeManager, Dict[str, PodView], Plan]] = None

    def _list(self) -> Tuple[NodeManager, Dict[str, PodView], Plan]:
        if self._listed is None:
            with build_manager(self.config, with_runtime=True, topology=self.topology, checks=False) as manager:
                seen = Plan(CPUState(manager.policy.name))
                self._listed = manager, build_views(manager.observe(seen)), seen
        return self._listed

    def __call__(self, state: CPUState) -> Plan:
        """``adopt`` on the one list: raises ContainerRuntimeError when the runtime cannot list."""
        manager, views, seen = self._list()
        simulated = Plan(state.copy())
        simulated.skipped = list(seen.skipped)
        manager.allocate_running(simulated, state, views)
        return simulated

    def pods(self) -> Optional[List[Pod]]:
        """The running pods in creation order; None when the runtime cannot list them."""
        try:
            return running_pods(self._list()[1])
        except ContainerRuntimeError:
            return None


def judge_for(config: NodeConfig, policy: Policy, topology: Topology, pods: Optional[List[Pod]] = None) -> Judge:
    """The judge (``node/judge.py``) of the checkpoint at ``config.state_path`` under ``policy``: the Topology Manager
    of ``config``, the Memory Manager's checkpoint beside that file and the Device Manager's below its directory (none
    there: nothing pinned); ``pods``, the running pods (None: the checkpoint's own)."""
    options = config.options
    admission = Admission(topology, options.topology_manager_policy, options.topology_manager_scope,
                          options.topology_manager_options)
    return admission.judge(policy, memory=read_memory_nodes(beside(config.state_path)), pods=pods,
                           devices=read_device_nodes(devices_beside(config.state_path)))
