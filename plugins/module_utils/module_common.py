# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The thin adapter between AnsibleModule and the core: the shared argument spec and error handling.

The only file under module_utils that knows Ansible; ``bin/kubecpu`` never imports it.
"""

from __future__ import annotations

import os
import re
import traceback
from typing import Any, Callable, Dict, List, Optional

from ansible.module_utils.basic import AnsibleModule

from .cpuset import CPUSet
from .errors import CPUSetError, KubecpuError, OptionError, TopologyError
from .manager import ISOLATED_MODES, QUOTA_MODES, ManagerOptions
from .node import RUNTIMES, NodeConfig
from .options import option_strings
from .topology_manager import POLICIES as TM_POLICIES
from .topology_manager import SCOPES as TM_SCOPES
from .policy import POLICY_NAMES
from .state_store import DEFAULT_PATH, KUBELET_PATH

TOPOLOGY_ARGS: Dict[str, Dict[str, Any]] = {  # doc fragment kubecpu.cpu_manager.cpu_manager.topology
    "sysfs_root": {"type": "path", "default": "/"},
    "topology_path": {"type": "path"},
}
STATE_ARGS: Dict[str, Dict[str, Any]] = {
    "state_path": {"type": "path", "default": DEFAULT_PATH},
    "policy": {"type": "str", "choices": list(POLICY_NAMES), "default": "static"},
    "reserved_cpus": {"type": "str"},
    "num_reserved": {"type": "int"},
    "policy_options": {"type": "dict", "default": {}},
    "runtime": {"type": "str", "choices": list(RUNTIMES), "default": "crictl"},
    "runtime_endpoint": {"type": "str"},
    "crictl_path": {"type": "path", "default": "crictl"},
    "runtime_timeout": {"type": "float", "default": 2.0},
    **TOPOLOGY_ARGS,
    "cgroup_root": {"type": "path", "default": "/sys/fs/cgroup"},
    "kubelet_state_path": {"type": "path", "default": KUBELET_PATH},
    "force": {"type": "bool", "default": False},
    "isolated_cpus": {"type": "str", "choices": list(ISOLATED_MODES), "default": "ignore"},
    "align_memory": {"type": "bool", "default": False},
    "cpu_quota": {"type": "str", "choices": list(QUOTA_MODES), "default": "keep"},
    "topology_manager_policy": {"type": "str", "choices": list(TM_POLICIES), "default": "none"},
    "topology_manager_scope": {"type": "str", "choices": list(TM_SCOPES), "default": "container"},
    "topology_manager_policy_options": {"type": "dict", "default": {}},
}
_PCI = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def node_config(params: Dict[str, Any], read_only: bool = False) -> NodeConfig:
    """NodeConfig from module parameters, every value validated (a KubecpuError names the bad one)."""
    reserved = None
    if params.get("reserved_cpus") not in (None, ""):
        try:
            reserved = CPUSet.parse(str(params["reserved_cpus"]))
        except CPUSetError as exc:
            raise TopologyError("reserved_cpus: %s" % exc) from None
    num = params.get("num_reserved")
    if num is not None and num < 0:
        raise TopologyError("num_reserved must not be negative, got %d" % num)
    timeout = params.get("runtime_timeout", 2.0)
    if not 0 < timeout <= 3600:
        raise TopologyError("runtime_timeout must be more than 0 and at most 3600 seconds, got %r" % timeout)
    options = option_map(params.get("policy_options"), "policy_options")
    return NodeConfig(
        state_path=params["state_path"], policy=params["policy"], reserved_cpus=reserved, num_reserved=num,
        policy_options=options, topology_path=params.get("topology_path"),
        sysfs_root=params.get("sysfs_root") or "/", read_only=read_only, runtime=params["runtime"],
        runtime_endpoint=params.get("runtime_endpoint"), crictl_path=params["crictl_path"],
        runtime_timeout=timeout, cgroup_root=params["cgroup_root"],
        kubelet_state_path=params["kubelet_state_path"], force=params["force"],
        options=ManagerOptions(
            params["isolated_cpus"], params["align_memory"], params["cpu_quota"],
            params.get("topology_manager_policy") or "none", params.get("topology_manager_scope") or "container",
            option_map(params.get("topology_manager_policy_options"), "topology_manager_policy_options")))


def option_map(raw: Any, what: str) -> Dict[str, str]:
    """A module's option dict as the kubelet reads it (a TopologyError names the option on a bad value)."""
    try:
        return option_strings(raw, what)
    except OptionError as exc:
        raise TopologyError(str(exc)) from None


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


def plan_result(module: AnsibleModule, doc: Dict[str, Any], keys: List[str]) -> Dict[str, Any]:
    """The keys of a plan's document a module returns, its diff (state before and after), errors as warnings."""
    result = {key: doc[key] for key in keys}
    if module._diff:  # pylint: disable=protected-access
        result["diff"] = {"before": doc["state_before"], "after": doc["state_after"]}
    for error in doc["errors"]:
        module.warn("%s/%s: %s" % (error.get("pod", ""), error.get("container", ""), error["error"]))
    return result


def run_module(module: AnsibleModule, body: Callable[[AnsibleModule], Dict[str, Any]]) -> None:
    """Run ``body``; domain errors become fail_json with their message, anything else too (no traceback)."""
    try:
        module.exit_json(**body(module))
    except KubecpuError as exc:
        module.fail_json(msg=str(exc), error_type=type(exc).__name__)
    except Exception as exc:  # pylint: disable=broad-except  # a module never dies with a traceback
        module.fail_json(msg="unexpected %s: %s" % (type(exc).__name__, exc), exception=traceback.format_exc())
