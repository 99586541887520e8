# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""What a node's manager would decide for what runs, without changing the node: every running container admitted
into a given state (as a kubelet that turns static admits them), and every one re-admitted afresh under the manager's
Topology Manager policy (as the kubelet does after its checkpoint is removed). Both read the runtime once.
"""

from __future__ import annotations

from typing import Any, Dict

from ..kubelet.cpuset import CPUSet
from ..kubelet.state import CPUState
from .manager import NodeManager
from .plan import Plan
from .pod_views import build_views


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
