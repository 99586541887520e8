# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The container runtime as the CPU manager sees it (RUNTIME.md), whatever the backend.

* ``ListedContainer``: one row of the container list (cheap, every pass).
* ``ContainerInfo``: what a container *is*, learned once per container ID from its status (pod, QoS class from
  the pod's cgroup parent, CPU request and limit from shares, quota and period, cgroup path).
* ``Runtime``: what the manager calls on a backend (crictl, CRI over gRPC); ``RuntimeBase`` the common part.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Protocol

from ..errors import ContainerNotFoundError, RuntimeOutputError
from ..kubelet.cpuset import CPUSet
from ..kubelet.qos import GUARANTEED
from .cgroup_paths import qos_from_cgroup
from .ids import check_container_id

POD_UID_LABEL = "io.kubernetes.pod.uid"
POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"

DEFAULT_TIMEOUT = 2.0  # seconds per runtime call: crictl's own default, and the kubelet's runtime request timeout
CREATED, RUNNING, EXITED, UNKNOWN = "CONTAINER_CREATED", "CONTAINER_RUNNING", "CONTAINER_EXITED", "CONTAINER_UNKNOWN"
CONTAINER_STATES = (CREATED, RUNNING, EXITED, UNKNOWN)


class ListedContainer(NamedTuple):
    """A container as the list call shows it."""

    id: str
    sandbox_id: str
    pod_uid: str
    pod_name: str
    pod_namespace: str
    name: str
    attempt: int
    state: str
    created_at: int  # ns since the epoch

    @property
    def pod_ref(self) -> str:
        return "%s/%s" % (self.pod_namespace or "default", self.pod_name or self.pod_uid)

    @property
    def is_kubernetes(self) -> bool:
        return bool(self.pod_uid and self.name)


# The pod annotations kubecpu reads (docs/HOUSEKEEPING.md); a pod's others are not kept.
EXCLUSIVE_ANNOTATION = "cpu-exclusive.kubecpu.io"  # a Burstable pod's containers to pin (node/exclusive.py)
PRIORITY_ANNOTATION = "priority-class.kubecpu.io"  # a pod's priority class, which no runtime shows (node/partition.py)
# The C-state limit and the cpufreq governor of a pod's exclusive CPUs: kubecpu's names, then CRI-O's (node/power.py)
C_STATES_ANNOTATIONS = ("cpu-c-states.kubecpu.io", "cpu-c-states.crio.io")
GOVERNOR_ANNOTATIONS = ("cpu-freq-governor.kubecpu.io", "cpu-freq-governor.crio.io")
POD_ANNOTATIONS = ("irq-load-balancing.kubecpu.io", "irq-load-balancing.crio.io", "cpu-burst.kubecpu.io",
                   EXCLUSIVE_ANNOTATION, PRIORITY_ANNOTATION) + C_STATES_ANNOTATIONS + GOVERNOR_ANNOTATIONS
MAX_ANNOTATION_BYTES = 256  # a value longer than this is not one of kubecpu's: dropped
# Except a list of container names (up to 16 of Kubernetes' longest, 63 characters): a longer value is kept cut at one
# character past this, so that its reader refuses it by name instead of the pod's asking going unseen.
MAX_NAMES_BYTES = 1024
MAX_SANDBOXES_KNOWN = 1024  # pods whose annotations a backend keeps (it forgets them all past this)


def kubecpu_annotations(annotations: Mapping[str, Any]) -> Dict[str, str]:
    """Of a pod's annotations, the ones kubecpu reads (strings of at most MAX_ANNOTATION_BYTES; the container names of
    EXCLUSIVE_ANNOTATION at most MAX_NAMES_BYTES, a longer value cut past it)."""
    kept = {}
    for key in POD_ANNOTATIONS:
        value = annotations.get(key)
        if not isinstance(value, str):
            continue
        if key == EXCLUSIVE_ANNOTATION:
            kept[key] = value[:MAX_NAMES_BYTES + 1]
        elif len(value.encode("utf-8", "replace")) <= MAX_ANNOTATION_BYTES:
            kept[key] = value
    return kept


class ContainerInfo(NamedTuple):
    """What a container is; never changes for a container ID, so it is cached across passes."""

    id: str
    pod_uid: str
    pod_name: str
    pod_namespace: str
    name: str
    attempt: int
    qos: str  # Guaranteed | Burstable | BestEffort | "" (not a kubelet pod cgroup)
    cgroup_path: str  # the container's cgroup (cgroupfs form, relative to a hierarchy's mount point)
    cpu_shares: int
    cpu_quota: int
    cpu_period: int
    memory_limit: int
    exit_code: int = 0
    finished_at: int = 0  # ns since the epoch; 0 while the container has not finished
    reason: str = ""
    annotations: Optional[Mapping[str, str]] = None  # the pod's annotations kubecpu reads; None: not asked for

    @property
    def pod_cgroup_path(self) -> str:
        return self.cgroup_path.rsplit("/", 1)[0] if "/" in self.cgroup_path.strip("/") else ""

    @property
    def cpu_request_milli(self) -> int:
        return shares_to_milli(self.cpu_shares)

    @property
    def cpu_limit_milli(self) -> int:
        return quota_to_milli(self.cpu_quota, self.cpu_period)

    def requested_milli(self) -> int:
        """The CPU request: for a Guaranteed pod the limit (= request, exact from the quota), else from shares."""
        if self.qos == GUARANTEED and self.cpu_limit_milli > 0:
            return self.cpu_limit_milli
        return self.cpu_request_milli

    def to_dict(self) -> Dict[str, Any]:
        return dict(self._asdict())

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ContainerInfo:
        """Inverse of ``to_dict`` (the cache file); raises RuntimeOutputError on any mismatch."""
        try:
            values = {name: doc[name] for name in cls._fields if name in doc}
            info = cls(**values)
        except TypeError as exc:
            raise RuntimeOutputError("bad cached container entry: %s" % exc) from None
        for name, kind in (("id", str), ("pod_uid", str), ("name", str), ("qos", str), ("cgroup_path", str),
                           ("cpu_shares", int), ("cpu_quota", int), ("cpu_period", int), ("attempt", int)):
            if not isinstance(getattr(info, name), kind):
                raise RuntimeOutputError("bad cached container entry: %s is not a %s" % (name, kind.__name__))
        check_container_id(info.id)
        if info.annotations is not None and (not isinstance(info.annotations, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in info.annotations.items())):
            raise RuntimeOutputError("bad cached container entry: annotations is not a map of strings")
        return info


# --- CRI quantities (pkg/kubelet/cm/helpers_linux.go, inverted) -------------------------------------------
def shares_to_milli(shares: int) -> int:
    """The smallest request whose MilliCPUToShares is ``shares`` (2 means 0: BestEffort, or under 2m)."""
    if shares <= 2:
        return 0
    return -(-shares * 1000 // 1024)  # ceiling division, exact in integers


def quota_to_milli(quota: int, period: int) -> int:
    """The CPU limit a CFS quota stands for; 0 without a quota (0 or -1)."""
    if quota <= 0 or period <= 0:
        return 0
    return quota * 1000 // period


class Runtime(Protocol):
    """What the manager calls on a backend. Every method raises a ``ContainerRuntimeError`` subclass on failure."""

    name: str
    calls: Dict[str, int]  # calls made, by operation (the plan and the metrics report them)
    live: bool  # it tells every change of a container's facts as it happens (NRI): nothing to cache or look up again
    want_annotations: bool  # describe() gives the pod's annotations kubecpu reads (the manager sets it when needed)

    def list_containers(self) -> List[ListedContainer]:
        """Every container the runtime knows, in any state (one call)."""

    def describe(self, listed: ListedContainer) -> ContainerInfo:
        """What a listed container is (its status; once per container ID)."""

    def update(self, container_id: str, cpuset_cpus: Optional[CPUSet] = None, cpuset_mems: Optional[CPUSet] = None,
               cpu_quota: Optional[int] = None, cpu_period: Optional[int] = None) -> None:
        """UpdateContainerResources with only the given fields (zero fields are left alone by runtimes)."""

    def close(self) -> None:
        """Release the connection."""


class RuntimeBase:
    """The part the backends share: call counting, and ``describe`` from ``inspect`` (and the pod sandbox's cgroup
    parent when the container's status names no kubelet pod cgroup)."""

    name = "runtime"
    live = False

    def __init__(self) -> None:
        self.calls: Dict[str, int] = {}
        self.want_annotations = False  # describe() asks for the pod's annotations (a call per new pod)
        self._annotations: Dict[str, Dict[str, str]] = {}  # sandbox ID -> kubecpu's annotations of the pod

    def count(self, operation: str) -> None:
        self.calls[operation] = self.calls.get(operation, 0) + 1

    def inspect(self, container_id: str) -> ContainerInfo:
        raise NotImplementedError

    def pod_cgroup_parent(self, sandbox_id: str) -> str:
        """The cgroup parent the kubelet gave the pod (the sandbox's verbose status)."""
        raise NotImplementedError

    def describe(self, listed: ListedContainer) -> ContainerInfo:
        """``inspect``; for a runtime whose verbose info has no OCI spec, the QoS class comes from the pod sandbox's
        cgroup parent: one more call, once per container."""
        info = self.inspect(listed.id)
        if self.want_annotations and listed.sandbox_id:
            info = info._replace(annotations=self._pod_annotations(listed.sandbox_id))
        if info.qos or not listed.sandbox_id:
            return info
        try:
            parent = self.pod_cgroup_parent(listed.sandbox_id)
        except ContainerNotFoundError:
            return info
        return info._replace(qos=qos_from_cgroup(parent))

    def pod_annotations(self, sandbox_id: str) -> Mapping[str, Any]:
        """The pod sandbox's annotations (its status): the pod's, as the kubelet gave them."""
        raise NotImplementedError

    def _pod_annotations(self, sandbox_id: str) -> Dict[str, str]:
        known = self._annotations.get(sandbox_id)
        if known is None:
            try:
                known = kubecpu_annotations(self.pod_annotations(sandbox_id))
            except ContainerNotFoundError:
                return {}
            if len(self._annotations) >= MAX_SANDBOXES_KNOWN:
                self._annotations.clear()
            self._annotations[sandbox_id] = known
        return known

    def close(self) -> None:
        """Nothing to release by default."""
