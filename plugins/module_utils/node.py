# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""One way to build a node's CPU manager from its settings, shared by ``bin/kubecpu`` and the modules."""

from __future__ import annotations

import os
from typing import Mapping, NamedTuple, Optional

from .cgroups import DEFAULT_ROOT, CgroupFS
from .cpuset import CPUSet
from .crictl import DEFAULT_TIMEOUT, CrictlRuntime, default_endpoint
from .discovery import discover
from .errors import PolicyError, TopologyError
from .manager import ContainerCache, ManagerOptions, NodeManager, check_kubelet_policy, check_reservation
from .policy import STATIC, Policy, new_policy
from .runtime import Runtime
from .state_store import DEFAULT_PATH, KUBELET_PATH, StateStore
from .topology import Topology

RUNTIMES = ("crictl", "cri")


class NodeConfig(NamedTuple):
    state_path: str = DEFAULT_PATH
    policy: str = STATIC
    reserved_cpus: Optional[CPUSet] = None
    num_reserved: Optional[int] = None
    policy_options: Optional[Mapping[str, str]] = None
    topology_path: Optional[str] = None
    sysfs_root: Optional[str] = None
    read_only: bool = False
    runtime: str = "crictl"
    runtime_endpoint: Optional[str] = None
    crictl_path: str = "crictl"
    runtime_timeout: float = DEFAULT_TIMEOUT
    cgroup_root: str = DEFAULT_ROOT
    kubelet_state_path: str = KUBELET_PATH
    force: bool = False
    options: ManagerOptions = ManagerOptions()
    cache_path: Optional[str] = None  # None: <state>.containers.json


def check_cpus_known(topo: Topology, cpus: CPUSet, what: str) -> None:
    offline = cpus.intersection(topo.offline_cpus)
    unknown = cpus.difference(topo.all_cpus).difference(offline)
    if offline:
        raise TopologyError("%s lists offline CPU(s) %s" % (what, offline))
    if unknown:
        raise TopologyError("%s lists CPU(s) %s that are not in the topology (online CPUs: %s)"
                            % (what, unknown, topo.all_cpus))


def build_policy(topo: Topology, name: str, reserved: Optional[CPUSet], num_reserved: Optional[int],
                 options: Optional[Mapping[str, str]], *, what: str = "reserved CPUs") -> Policy:
    """The kubelet's rules: an explicit list alone implies the count; with a count the two must agree."""
    if name != STATIC:
        return new_policy(name, topo, raw_options=options)
    if reserved:
        check_cpus_known(topo, reserved, what)
    count = num_reserved if num_reserved is not None else (len(reserved) if reserved else 0)
    return new_policy(STATIC, topo, count, reserved, options)


def load_topology(config: NodeConfig) -> Topology:
    if config.topology_path:
        return Topology.load(config.topology_path)
    return discover(config.sysfs_root or "/")


def build_runtime(config: NodeConfig) -> Runtime:
    if config.runtime_timeout <= 0:
        raise PolicyError("runtime_timeout must be a positive number of seconds, got %r" % config.runtime_timeout)
    endpoint = config.runtime_endpoint or default_endpoint()
    if config.runtime == "crictl":
        return CrictlRuntime(config.crictl_path, endpoint, config.runtime_timeout)
    if config.runtime == "cri":
        from .cri_grpc import CRIRuntime  # noqa: PLC0415  # optional dependency: imported only when asked for

        codegen = os.path.join(os.path.dirname(os.path.abspath(config.state_path)), ".kubecpu-cri")
        return CRIRuntime(endpoint, config.runtime_timeout, codegen)
    raise PolicyError('unknown runtime "%s" (expected one of %s)' % (config.runtime, ", ".join(RUNTIMES)))


def build_manager(config: NodeConfig, with_runtime: bool = False, topology: Optional[Topology] = None,
                  runtime: Optional[Runtime] = None, checks: bool = True) -> NodeManager:
    """The manager. One that acts through a runtime first checks that it may (``checks``): the kubelet must not
    pin CPUs itself, and the static policy needs a reservation."""
    topo = topology or load_topology(config)
    policy = build_policy(topo, config.policy, config.reserved_cpus, config.num_reserved, config.policy_options)
    store = StateStore(config.state_path, policy.name, read_only=config.read_only or None)
    cache = ContainerCache(config.cache_path or store.path + ".containers.json", read_only=store.read_only)
    if not with_runtime:
        return NodeManager(topo, policy, store, cgroups=CgroupFS(config.cgroup_root), cache=cache)
    if checks:
        check_kubelet_policy(config.kubelet_state_path, config.force)
        check_reservation(policy)
    return NodeManager(topo, policy, store, runtime or build_runtime(config), cgroups=CgroupFS(config.cgroup_root),
                       cache=cache, options=config.options)
