# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""A node's CPU manager built from its ``NodeConfig``: the one factory of ``bin/kubecpu`` and the modules.

A manager that acts through a runtime is built only where it may act: the kubelet must not pin CPUs itself, and the
static policy needs a reservation.
"""

from __future__ import annotations

from typing import Mapping, Optional

from ..errors import ConfigError, KubeletPinsError, PolicyError, TopologyError
from ..kubelet import discovery
from ..kubelet.cpuset import CPUSet
from ..kubelet.kubelet_versions import DEFAULT
from ..kubelet.options import parse_options
from ..kubelet.policy import STATIC, ZERO_RESERVATION, Policy, StaticPolicy, new_policy
from ..kubelet.topology import Topology
from ..runtime.cgroups import CgroupFS
from ..runtime.container_cache import ContainerCache
from ..runtime.model import Runtime
from .config import NodeConfig
from .housekeeping import IrqIsolation, KubeletHousekeeping, irq_isolation, machine_files, record_path
from .kubelet_policy import PINNING_OPTIONS, kubelet_pins, options_refused, recorded_policy
from .manager import NodeManager
from .power import cpu_power
from .state_paths import KUBELET_PATH
from .state_store import StateStore


def check_cpus_known(topo: Topology, cpus: CPUSet, what: str) -> None:
    offline = cpus.intersection(topo.offline_cpus)
    unknown = cpus.difference(topo.all_cpus).difference(offline)
    if offline:
        raise TopologyError("%s lists offline CPU(s) %s" % (what, offline))
    if unknown:
        raise TopologyError("%s lists CPU(s) %s that are not in the topology (online CPUs: %s)"
                            % (what, unknown, topo.all_cpus))


def build_policy(topo: Topology, name: str, reserved: Optional[CPUSet], num_reserved: Optional[int],
                 options: Optional[Mapping[str, str]], *, what: str = "reserved CPUs",
                 kubelet_minor: int = DEFAULT.minor, unreserved: bool = False) -> Policy:
    """The kubelet's rules: an explicit list alone implies the count; with a count the two must agree; none at all
    is refused with the kubelet's words, except for a reader that only shows a checkpoint (``unreserved``: the
    report of a node whose kubelet configuration cannot be read). The allocation follows kubelet 1.<kubelet_minor>
    (docs/VERSIONS_IN_KUBECPU.md)."""
    if name != STATIC:
        return new_policy(name, topo, raw_options=options)
    if reserved:
        check_cpus_known(topo, reserved, what)
    count = num_reserved if num_reserved is not None else (len(reserved) if reserved else 0)
    if count == 0 and not unreserved:  # the kubelet's CPU manager refuses to start so (the shared pool could empty)
        raise PolicyError(ZERO_RESERVATION + " (set reserved_cpus or num_reserved)")
    parsed = parse_options(options)._replace(kubelet_minor=kubelet_minor)
    return StaticPolicy(topo, count, reserved, parsed)


def load_topology(config: NodeConfig) -> Topology:
    return discovery.load_topology(config.topology_path, config.sysfs_root)


def build_runtime(config: NodeConfig) -> Runtime:
    """The runtime backend asked for (each imported only then: the OCI hook, which needs none, loads neither)."""
    from ..runtime.crictl import CrictlRuntime, default_endpoint  # noqa: PLC0415

    endpoint = config.runtime_endpoint or default_endpoint()
    if config.runtime == "cri":
        from ..runtime.cri_grpc import CRIRuntime  # noqa: PLC0415

        return CRIRuntime(endpoint, config.runtime_timeout)
    return CrictlRuntime(config.crictl_path, endpoint, config.runtime_timeout)


def check_kubelet_policy(path: str = KUBELET_PATH, force: bool = False) -> Optional[str]:
    """Refuse to manage CPUs when the kubelet pins them itself (``node.kubelet_policy``); the policy it names."""
    reason = kubelet_pins(path, force)
    if reason:
        raise KubeletPinsError(reason)
    return recorded_policy(path)


def build_manager(config: NodeConfig, with_runtime: bool = False, topology: Optional[Topology] = None,
                  runtime: Optional[Runtime] = None, checks: bool = True, *, service: bool = False) -> NodeManager:
    """The manager. One that acts through a runtime first checks that it may (``checks``): a command refuses at once
    when the kubelet pins CPUs; a ``service`` (the agent, the NRI plugin) starts anyway and steps aside at each pass
    while the kubelet pins (``NodeManager.steps_aside``)."""
    topo = topology or load_topology(config)
    policy = build_policy(topo, config.policy, config.reserved_cpus, config.num_reserved, config.policy_options,
                          kubelet_minor=config.kubelet.minor, unreserved=not with_runtime)  # without one: a reader
    store = StateStore(config.state_path, policy.name, read_only=config.read_only or None, kubelet=config.kubelet,
                       kubelet_path=config.kubelet_state_path)
    cache = ContainerCache(config.cache_path or store.path + ".containers.json", read_only=store.read_only)
    if with_runtime and checks:
        if not service:
            check_kubelet_policy(config.kubelet_state_path, config.force)
            if options_refused(config.kubelet_state_path, config.options):
                raise KubeletPinsError(options_refused(config.kubelet_state_path, config.options))
    if with_runtime and runtime is None:
        runtime = build_runtime(config)
    manager = NodeManager(topo, policy, store, runtime, cgroups=CgroupFS(config.cgroup_root), cache=cache,
                          options=config.options if with_runtime else None, sysfs_root=config.sysfs_root)
    if with_runtime and checks:
        manager.steps_aside = lambda: (kubelet_pins(config.kubelet_state_path, config.force)
                                       or options_refused(config.kubelet_state_path, config.options))
    return manager


def kubelet_housekeeping(config: NodeConfig, topology: Optional[Topology] = None,
                         runtime: Optional[Runtime] = None) -> KubeletHousekeeping:
    """Interrupt isolation and per-pod power beside a kubelet that pins CPUs itself: its checkpoint
    (``kubelet_state_path``, read in the format of ``kubelet_version``) read-only, kubecpu's state file
    (``state_path``) for the lock and the records. With ``cpu_power`` the runtime (``runtime``, else the config's)
    tells the pods' annotations."""
    asked = [name for name in PINNING_OPTIONS if getattr(config.options, name)]
    if asked:
        raise ConfigError("housekeeping runs beside a kubelet that pins CPUs itself, and %s change%s who holds which "
                          "CPU: the kubelet would not know of it; switch %s off" % (
                              " and ".join(asked), "" if len(asked) > 1 else "s", " and ".join(asked)))
    topo = topology or load_topology(config)
    checkpoint = StateStore(config.kubelet_state_path, recorded_policy(config.kubelet_state_path) or STATIC,
                            read_only=True, kubelet=config.kubelet)
    own = StateStore(config.state_path, STATIC)
    mode = config.options.irq_isolation
    if mode == "annotated" or (mode == "off" and not config.options.cpu_power):
        raise ConfigError("housekeeping beside the kubelet needs irq_isolation exclusive or cpu_power (got "
                          "irq_isolation %s: beside the kubelet interrupts follow every exclusive CPU)" % mode)
    if mode == "exclusive":
        isolation: Optional[IrqIsolation] = IrqIsolation(topo.all_cpus, record_path(own.path),
                                                         *machine_files(config.sysfs_root))
    else:  # off: what an earlier run moved is given back
        isolation = irq_isolation(mode, topo.all_cpus, own.path, config.sysfs_root)
    power = cpu_power(config.options.cpu_power, own.path, config.sysfs_root)
    if config.options.cpu_power:
        runtime = runtime or build_runtime(config)
        runtime.want_annotations = True
    return KubeletHousekeeping(topo, checkpoint, own, isolation, power=power, runtime=runtime, irq_mode=mode)
