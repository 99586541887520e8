# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""A node's settings, validated once: ``NodeConfig.from_mapping`` serves ``bin/kubecpu`` and every module.

Each setting is checked here and nowhere else, and every bad one raises ``ConfigError`` naming the setting
(``bin/kubecpu`` exits 2 on it, a module fails with its text).
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional, Tuple

from ..errors import ConfigError
from ..kubelet.cpuset import CPUSet
from ..kubelet.kubelet_versions import KubeletVersion, kubelet_version
from ..kubelet.policy import POLICY_NAMES, STATIC
from ..kubelet.settings import choice, num_reserved, option_map, reserved_cpus
from ..kubelet.topology_manager import POLICIES as TM_POLICIES
from ..kubelet.topology_manager import SCOPES as TM_SCOPES
from ..runtime.cgroups import DEFAULT_ROOT
from ..runtime.model import DEFAULT_TIMEOUT
from .state_paths import DEFAULT_PATH, KUBELET_PATH

DEFAULT_STATE_PATH = DEFAULT_PATH
KUBELET_STATE_PATH = KUBELET_PATH
DEFAULT_CGROUP_ROOT = DEFAULT_ROOT
MAX_TIMEOUT = 3600.0
RUNTIMES = ("crictl", "cri")
ISOLATED_MODES = ("ignore", "prefer", "only")
QUOTA_MODES = ("keep", "unlimited")
IRQ_MODES = ("off", "exclusive", "annotated")
SYSTEM_PRIORITY_CLASSES = ("system-node-critical",)  # the system partition's pods by default (node/partition.py)
_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.")


class _ManagerOptions(NamedTuple):
    isolated_cpus: str = "ignore"  # ignore | prefer | only: take exclusive CPUs from the isolcpus set
    align_memory: bool = False  # cpuset.mems = NUMA nodes of the exclusive CPUs
    cpu_quota: str = "keep"  # keep | unlimited: no CFS quota for exclusively pinned containers (and their pod)
    topology_manager_policy: str = "none"  # with a policy, CPUs are chosen inside the merged NUMA affinity
    topology_manager_scope: str = "container"
    topology_manager_options: Optional[Mapping[str, str]] = None
    irq_isolation: str = "off"  # off | exclusive | annotated: device interrupts kept off the CPUs held exclusively
    cpu_burst: bool = False  # cpu.max.burst of Burstable containers from their pod's cpu-burst.kubecpu.io
    cpu_power: bool = False  # C-state limit and cpufreq governor of a pod's exclusive CPUs, from its annotations
    besteffort_idle: bool = False  # cpu.idle = 1 for BestEffort pods' cgroups (cgroup v2; node/targets._idle)
    # the containers of a Burstable pod that its cpu-exclusive.kubecpu.io annotation names: exclusive CPUs
    exclusive_burstable: bool = False  # (node/exclusive.py)
    # the system partition: the system pods on the reserved CPUs only, every other container off them
    system_partition: bool = False  # (node/partition.py)
    system_namespaces: Tuple[str, ...] = ()  # every pod of these namespaces is a system pod
    system_priority_classes: Tuple[str, ...] = SYSTEM_PRIORITY_CLASSES  # as its priority-class.kubecpu.io says


class ManagerOptions(_ManagerOptions):
    """Beyond the kubelet; each off by default so the kubelet-exact behaviour stays the default. Validated when made
    (a NamedTuple rather than a dataclass: ``dataclasses`` costs a module run 10 ms of imports)."""

    __slots__ = ()

    @property
    def reads_annotations(self) -> bool:
        """Whether a pass needs the pods' annotations (the runtime then tells them: a call per new pod)."""
        return (self.irq_isolation == "annotated" or self.cpu_burst or self.exclusive_burstable or self.cpu_power
                or (self.system_partition and bool(self.system_priority_classes)))

    def __new__(cls, *args: Any, **kwargs: Any) -> ManagerOptions:
        self = super().__new__(cls, *args, **kwargs)
        choice(self.isolated_cpus, "isolated_cpus", ISOLATED_MODES)
        choice(self.cpu_quota, "cpu_quota", QUOTA_MODES)
        choice(self.topology_manager_policy, "topology_manager_policy", TM_POLICIES)
        choice(self.topology_manager_scope, "topology_manager_scope", TM_SCOPES)
        choice(self.irq_isolation, "irq_isolation", IRQ_MODES)
        for name in ("align_memory", "besteffort_idle", "cpu_burst", "exclusive_burstable", "system_partition",
                     "cpu_power"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError("%s must be a boolean, got %r" % (name, getattr(self, name)))
        options = option_map(self.topology_manager_options, "topology_manager_policy_options")
        return self._replace(topology_manager_options=options,
                             system_namespaces=name_list(self.system_namespaces, "system_namespaces", 63, "-"),
                             system_priority_classes=name_list(self.system_priority_classes,
                                                               "system_priority_classes", 253, "-."))


def name_list(value: Any, setting: str, longest: int, punctuation: str) -> Tuple[str, ...]:
    """Kubernetes object names (a namespace: a DNS label, at most 63 characters of a-z, 0-9 and '-'; a priority class:
    a DNS subdomain, at most 253 with '.' too): a list, or one text of names separated by commas, each item possibly
    such a text (a command line's repeated flag); sorted, without duplicates."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(item, str) for item in items):
        raise ConfigError("%s must be a list of names, got %r" % (setting, value))
    names = set()
    for item in items:
        for name in filter(None, (part.strip() for part in item.split(","))):
            allowed = _NAME_CHARACTERS if "." in punctuation else _NAME_CHARACTERS - {"."}
            if (len(name) > longest or not set(name) <= allowed or not name[0].isalnum()
                    or not name[-1].isalnum()):
                raise ConfigError("%s: %r is not a Kubernetes name (at most %d characters of a-z, 0-9 and %s, "
                                  "starting and ending with a letter or digit)"
                                  % (setting, name, longest, " and ".join(repr(c) for c in punctuation)))
            names.add(name)
    return tuple(sorted(names))


class _NodeConfig(NamedTuple):
    state_path: str = DEFAULT_STATE_PATH
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
    cgroup_root: str = DEFAULT_CGROUP_ROOT
    kubelet_state_path: str = KUBELET_STATE_PATH
    force: bool = False
    options: ManagerOptions = ManagerOptions()
    cache_path: Optional[str] = None  # None: <state>.containers.json
    kubelet_version: Optional[str] = None  # whose checkpoint format and rules; None: 1.35
    feature_gates: Optional[Mapping[str, Any]] = None


class NodeConfig(_NodeConfig):
    """Everything that builds a node's CPU manager and its runtime backend, validated when made."""

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> NodeConfig:
        self = super().__new__(cls, *args, **kwargs)
        for name, value in zip(self._fields, self):  # paths and the endpoint go to the OS, which takes no NUL
            if isinstance(value, str) and "\x00" in value:
                raise ConfigError("%s must not contain a NUL character, got %r" % (name, value))
        choice(self.policy, "policy", POLICY_NAMES)
        choice(self.runtime, "runtime", RUNTIMES)
        num_reserved(self.num_reserved)
        timeout = self.runtime_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT:
            raise ConfigError("runtime_timeout must be more than 0 and at most %d seconds, got %r"
                              % (MAX_TIMEOUT, timeout))
        kubelet = kubelet_version(self.kubelet_version, self.feature_gates)
        normal = self._replace(reserved_cpus=reserved_cpus(self.reserved_cpus),
                               policy_options=option_map(self.policy_options, "policy_options"),
                               kubelet_version=kubelet.name, feature_gates=dict(kubelet.gates))
        return tuple.__new__(cls, normal)

    @property
    def kubelet(self) -> KubeletVersion:
        """The kubelet whose checkpoint format and rules apply."""
        return kubelet_version(self.kubelet_version, self.feature_gates)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], **overrides: Any) -> NodeConfig:
        """A config from settings by their module option names (a missing or None value takes the default);
        the manager options may be given flat. ``overrides`` win."""
        doc = {k: v for k, v in dict(values, **overrides).items() if v is not None}
        if "options" not in doc:
            flat = {k: doc[k] for k in ManagerOptions._fields if k in doc}
            if "topology_manager_policy_options" in doc:
                flat["topology_manager_options"] = doc["topology_manager_policy_options"]
            doc["options"] = ManagerOptions(**flat)
        return cls(**{k: v for k, v in doc.items() if k in cls._fields})

    def replace(self, **changes: Any) -> NodeConfig:
        """A copy with ``changes``, validated again."""
        return type(self)(**dict(self._asdict(), **changes))
