# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The modules that manage a node's CPUs: their shared argument spec (doc fragment ``kubecpu.cpu_manager.cpu_manager``),
the node's settings from their parameters, and a device's NUMA node as a preference."""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Mapping, Optional

from ..errors import TopologyError
from ..kubelet.policy import POLICY_NAMES
from ..kubelet.topology_manager import POLICIES as TM_POLICIES
from ..kubelet.topology_manager import SCOPES as TM_SCOPES
from ..node.config import (DEFAULT_CGROUP_ROOT, DEFAULT_STATE_PATH, IRQ_MODES, ISOLATED_MODES, KUBELET_STATE_PATH,
                           QUOTA_MODES, RUNTIMES, NodeConfig)
from ..runtime.model import DEFAULT_TIMEOUT
from .module_common import TOPOLOGY_ARGS

RUNTIME_ARGS: Dict[str, Dict[str, Any]] = {  # doc fragment kubecpu.cpu_manager.cpu_manager.runtime
    "runtime": {"type": "str", "choices": list(RUNTIMES), "default": "crictl"},
    "runtime_endpoint": {"type": "str"},
    "crictl_path": {"type": "path", "default": "crictl"},
    "runtime_timeout": {"type": "float", "default": DEFAULT_TIMEOUT},
    "cgroup_root": {"type": "path", "default": DEFAULT_CGROUP_ROOT},
}
STATE_ARGS: Dict[str, Dict[str, Any]] = {
    "state_path": {"type": "path", "default": DEFAULT_STATE_PATH},
    "policy": {"type": "str", "choices": list(POLICY_NAMES), "default": "static"},
    "reserved_cpus": {"type": "str"},
    "num_reserved": {"type": "int"},
    "policy_options": {"type": "dict", "default": {}},
    "kubelet_version": {"type": "str"},
    "feature_gates": {"type": "dict"},
    **RUNTIME_ARGS,
    **TOPOLOGY_ARGS,
    "kubelet_state_path": {"type": "path", "default": KUBELET_STATE_PATH},
    "force": {"type": "bool", "default": False},
    "isolated_cpus": {"type": "str", "choices": list(ISOLATED_MODES), "default": "ignore"},
    "align_memory": {"type": "bool", "default": False},
    "cpu_quota": {"type": "str", "choices": list(QUOTA_MODES), "default": "keep"},
    "irq_isolation": {"type": "str", "choices": list(IRQ_MODES), "default": "off"},
    "besteffort_idle": {"type": "bool", "default": False},
    "cpu_burst": {"type": "bool", "default": False},
    "cpu_power": {"type": "bool", "default": False},
    "exclusive_burstable": {"type": "bool", "default": False},
    "system_partition": {"type": "bool", "default": False},
    "system_namespaces": {"type": "list", "elements": "str", "default": []},
    "system_priority_classes": {"type": "list", "elements": "str", "default": ["system-node-critical"]},
    "topology_manager_policy": {"type": "str", "choices": list(TM_POLICIES), "default": "none"},
    "topology_manager_scope": {"type": "str", "choices": list(TM_SCOPES), "default": "container"},
    "topology_manager_policy_options": {"type": "dict", "default": {}},
}
_PCI = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def node_config(params: Mapping[str, Any], read_only: bool = False) -> NodeConfig:
    """The node's settings from module parameters, each validated once (``NodeConfig``)."""
    return NodeConfig.from_mapping(params, read_only=read_only or None)


def device_numa_node(sysfs_root: str, address: str) -> Optional[int]:
    """The NUMA node of a PCI device (``near_device``), None when the kernel reports none (-1)."""
    if not _PCI.match(address):
        raise TopologyError('near_device "%s" is not a PCI address like 0000:3b:00.0' % address)
    path = os.path.join(sysfs_root, "sys", "bus", "pci", "devices", address.lower(), "numa_node")
    try:
        with open(path, encoding="utf-8") as handle:
            node = int(handle.read().strip())
    except OSError as exc:
        raise TopologyError("near_device %s: cannot read %s: %s" % (address, path, exc.strerror or exc)) from None
    except ValueError:
        raise TopologyError("near_device %s: %s does not hold a number" % (address, path)) from None
    return None if node < 0 else node


def numa_affinity(params: Dict[str, Any]) -> Optional[List[int]]:
    nodes = params.get("numa_affinity")
    device = params.get("near_device")
    if nodes:
        if any(n < 0 for n in nodes):
            raise TopologyError("numa_affinity: NUMA node ids must not be negative")
        return sorted(set(nodes))
    if device:
        node = device_numa_node(params.get("sysfs_root") or "/", device)
        return None if node is None else [node]
    return None
