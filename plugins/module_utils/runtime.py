# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The container runtime as a CPU manager sees it (RUNTIME.md), independent of the backend.

* ``ListedContainer``: one row of the container list (cheap, every pass).
* ``ContainerInfo``: what a container *is*, learned once per container ID from its status (pod, QoS class
  from the pod's cgroup parent, CPU request and limit from shares, quota and period, cgroup path).
* ``Runtime``: the backend interface (crictl, CRI over gRPC, or a test fake).
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Mapping, NamedTuple, Optional

from .cpuset import CPUSet
from .errors import ContainerNotFoundError, RuntimeOutputError
from .pod import BEST_EFFORT, BURSTABLE, GUARANTEED

POD_UID_LABEL = "io.kubernetes.pod.uid"
POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"

SANDBOX_STATES = ("SANDBOX_READY", "SANDBOX_NOTREADY")
CREATED, RUNNING, EXITED, UNKNOWN = "CONTAINER_CREATED", "CONTAINER_RUNNING", "CONTAINER_EXITED", "CONTAINER_UNKNOWN"
CONTAINER_STATES = (CREATED, RUNNING, EXITED, UNKNOWN)
_CONTAINER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_container_id(value: str) -> str:
    """Container IDs go on command lines and into paths: only [A-Za-z0-9_.-], at most 128 characters."""
    if not isinstance(value, str) or not _CONTAINER_ID.match(value):
        raise RuntimeOutputError("invalid container ID %r: expected letters, digits, '_', '.' or '-'" % (value,))
    return value


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


class ListedPod(NamedTuple):
    """A pod sandbox as the pod list shows it."""

    id: str
    uid: str
    name: str
    namespace: str
    state: str


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


def milli_to_shares(milli: int) -> int:
    return min(max(milli * 1024 // 1000, 2), 262144)


def milli_to_quota(milli: int, period: int = 100000) -> int:
    if milli <= 0:
        return 0
    return max(milli * period // 1000, 1000)


# --- cgroup paths (RUNTIME.md section 3) ------------------------------------------------------------------
def expand_systemd_slice(slice_name: str) -> str:
    """``kubepods-burstable-pod1.slice`` -> ``kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice``.
    """
    if not slice_name.endswith(".slice") or slice_name == "-.slice":
        return slice_name
    parts = slice_name[: -len(".slice")].split("-")
    return "/".join("-".join(parts[: n + 1]) + ".slice" for n in range(len(parts)))


def cgroupfs_path(spec_path: str) -> str:
    """A runtime spec ``cgroupsPath`` in cgroupfs form: systemd ``slice:prefix:name`` paths are expanded."""
    if ":" in spec_path and not spec_path.startswith("/"):
        slice_name, prefix, name = (spec_path.split(":") + ["", ""])[:3]
        leaf = "%s-%s.scope" % (prefix, name) if prefix else "%s.scope" % name
        return "/" + expand_systemd_slice(slice_name) + "/" + leaf
    return spec_path if spec_path.startswith("/") else "/" + spec_path


def qos_from_cgroup(pod_path: str) -> str:
    """The QoS class from a kubelet pod cgroup (cgroupfs or systemd driver names); "" when not a kubelet pod."""
    parts = [p for p in pod_path.split("/") if p]
    roots = [n for n, part in enumerate(parts) if part in ("kubepods", "kubepods.slice")]
    if not roots or roots[0] + 1 >= len(parts):
        return ""
    first = parts[roots[0] + 1]
    if first in ("burstable", "kubepods-burstable.slice"):
        return BURSTABLE
    if first in ("besteffort", "kubepods-besteffort.slice"):
        return BEST_EFFORT
    if first.startswith(("pod", "kubepods-pod")):
        return GUARANTEED
    return ""


# --- decoding helpers shared by the backends ---------------------------------------------------------------
def as_int(value: Any, what: str) -> int:
    """CRI int64 fields: JSON strings in crictl output, numbers in the runtime's own JSON."""
    if value is None or value == "":
        return 0
    if isinstance(value, bool):
        raise RuntimeOutputError("%s: expected a number, got %r" % (what, value))
    try:
        return int(value)
    except (TypeError, ValueError):
        raise RuntimeOutputError("%s: expected a number, got %r" % (what, value)) from None


def as_dict(value: Any, what: str) -> Dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RuntimeOutputError("%s: expected an object, got %s" % (what, type(value).__name__))
    return value


def as_str(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RuntimeOutputError("%s: expected a string, got %r" % (what, value))
    return value


def listed_container(item: Any, state: str, created_at: int) -> ListedContainer:
    """A list row from the CRI field names (crictl's JSON and the gRPC message agree on them)."""
    doc = as_dict(item, "container")
    cid = check_container_id(as_str(doc.get("id"), "container id"))
    meta = as_dict(doc.get("metadata"), "container %s metadata" % cid)
    labels = as_dict(doc.get("labels"), "container %s labels" % cid)
    return ListedContainer(
        id=cid, sandbox_id=as_str(doc.get("podSandboxId"), "podSandboxId"),
        pod_uid=as_str(labels.get(POD_UID_LABEL), "pod uid label"),
        pod_name=as_str(labels.get(POD_NAME_LABEL), "pod name label"),
        pod_namespace=as_str(labels.get(POD_NAMESPACE_LABEL), "pod namespace label"),
        name=as_str(labels.get(CONTAINER_NAME_LABEL), "container name label") or as_str(meta.get("name"), "name"),
        attempt=as_int(meta.get("attempt"), "attempt"), state=state, created_at=created_at)


def listed_pod(item: Any) -> ListedPod:
    """A pod list row (crictl's ``pods -o json`` items and the gRPC PodSandbox share the field names)."""
    doc = as_dict(item, "pod sandbox")
    sid = check_container_id(as_str(doc.get("id"), "pod sandbox id"))
    meta = as_dict(doc.get("metadata"), "pod sandbox %s metadata" % sid)
    state = doc.get("state")
    if state not in SANDBOX_STATES:
        raise RuntimeOutputError("pod sandbox %s: unknown state %r" % (sid, state))
    return ListedPod(sid, as_str(meta.get("uid"), "uid"), as_str(meta.get("name"), "name"),
                     as_str(meta.get("namespace"), "namespace"), str(state))


def sandbox_cgroup_parent(info: Mapping[str, Any], what: str) -> str:
    """The pod's cgroup parent from a verbose sandbox status: the stored config (containerd's
    ``info.config.linux.cgroup_parent``), else the parent of the sandbox container's own cgroup."""
    config = as_dict(as_dict(info.get("config"), what + " config").get("linux"), what + " config.linux")
    parent = as_str(config.get("cgroup_parent"), what + " cgroup_parent")
    if parent:
        return cgroupfs_path(parent) if ":" in parent else parent
    spec = as_dict(as_dict(info.get("runtimeSpec"), what + " runtimeSpec").get("linux"), what + " spec linux")
    path = as_str(spec.get("cgroupsPath"), what + " cgroupsPath")
    return cgroupfs_path(path).rsplit("/", 1)[0] if path else ""


def pid_cgroup(info: Mapping[str, Any]) -> Optional[str]:
    """The cgroup of a container's process (``/proc/<pid>/cgroup``), for runtimes whose info has no OCI spec."""
    pid = info.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    try:
        with open("/proc/%d/cgroup" % pid, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _num, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "" or "cpuset" in controllers.split(","):
            return path or None
    return None


def container_info(status: Mapping[str, Any], info: Mapping[str, Any], listed: Optional[ListedContainer] = None,
                   pid_cgroup: Optional[str] = None) -> ContainerInfo:
    """ContainerInfo from a verbose container status: ``status`` (CRI fields) and ``info`` (runtime JSON).

    The resources come from the create-time config in the runtime's info when it has one (containerd:
    ``info.config.linux.resources``), else from ``status.resources.linux``; the cgroup path from the OCI
    spec (``info.runtimeSpec.linux.cgroupsPath``), else from ``pid_cgroup`` (``/proc/<pid>/cgroup``).
    """
    cid = check_container_id(as_str(status.get("id"), "container status id"))
    labels = as_dict(status.get("labels"), "container %s labels" % cid)
    meta = as_dict(status.get("metadata"), "container %s metadata" % cid)
    config = as_dict(as_dict(info.get("config"), "info.config").get("linux"), "info.config.linux")
    created = as_dict(config.get("resources"), "info.config.linux.resources")
    current = as_dict(as_dict(status.get("resources"), "status.resources").get("linux"), "status.resources.linux")

    def resource(snake: str, camel: str) -> int:
        if snake in created:
            return as_int(created.get(snake), "container %s %s" % (cid, snake))
        return as_int(current.get(camel), "container %s %s" % (cid, camel))

    spec = as_dict(as_dict(info.get("runtimeSpec"), "info.runtimeSpec").get("linux"), "info.runtimeSpec.linux")
    spec_path = as_str(spec.get("cgroupsPath"), "cgroupsPath") or (pid_cgroup or "")
    path = cgroupfs_path(spec_path) if spec_path else ""
    name = as_str(labels.get(CONTAINER_NAME_LABEL), "container name label") or as_str(meta.get("name"), "name")
    return ContainerInfo(
        id=cid, pod_uid=as_str(labels.get(POD_UID_LABEL), "pod uid label"),
        pod_name=as_str(labels.get(POD_NAME_LABEL), "pod name label"),
        pod_namespace=as_str(labels.get(POD_NAMESPACE_LABEL), "pod namespace label"), name=name,
        attempt=as_int(meta.get("attempt"), "attempt") if listed is None else listed.attempt,
        qos=qos_from_cgroup(path.rsplit("/", 1)[0]) if path else "", cgroup_path=path,
        cpu_shares=resource("cpu_shares", "cpuShares"), cpu_quota=resource("cpu_quota", "cpuQuota"),
        cpu_period=resource("cpu_period", "cpuPeriod"),
        memory_limit=resource("memory_limit_in_bytes", "memoryLimitInBytes"),
        exit_code=as_int(status.get("exitCode"), "exitCode"), reason=as_str(status.get("reason"), "reason"))


def parse_info_json(info: Mapping[str, Any], what: str) -> Dict[str, Any]:
    """The verbose ``info`` map of the CRI status call holds one key ``info`` with JSON text."""
    raw = info.get("info")
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise RuntimeOutputError("%s: the runtime's verbose info is not JSON: %s" % (what, exc)) from None
    return as_dict(doc, what + " info")


class Runtime:
    """The backend interface. Every method raises a ``ContainerRuntimeError`` subclass on failure."""

    name = "runtime"

    def __init__(self) -> None:
        self.calls: Dict[str, int] = {}

    def count(self, operation: str) -> None:
        self.calls[operation] = self.calls.get(operation, 0) + 1

    def version(self) -> Dict[str, str]:
        raise NotImplementedError

    def list_containers(self) -> List[ListedContainer]:
        """Every container the runtime knows, in any state (one call)."""
        raise NotImplementedError

    def inspect(self, container_id: str) -> ContainerInfo:
        raise NotImplementedError

    def list_pods(self) -> List[ListedPod]:
        """Every pod sandbox the runtime knows (one call)."""
        raise NotImplementedError

    def pod_cgroup_parent(self, sandbox_id: str) -> str:
        """The cgroup parent the kubelet gave the pod (the sandbox's verbose status)."""
        raise NotImplementedError

    def describe(self, listed: ListedContainer) -> ContainerInfo:
        """``inspect``; when the container's status names no kubelet pod cgroup (a runtime whose verbose info
        has no OCI spec), the QoS class comes from its pod sandbox's cgroup parent: one more call, once."""
        info = self.inspect(listed.id)
        if info.qos or not listed.sandbox_id:
            return info
        try:
            parent = self.pod_cgroup_parent(listed.sandbox_id)
        except ContainerNotFoundError:
            return info
        return info._replace(qos=qos_from_cgroup(parent))

    def update(self, container_id: str, cpuset_cpus: Optional[CPUSet] = None, cpuset_mems: Optional[CPUSet] = None,
               cpu_quota: Optional[int] = None, cpu_period: Optional[int] = None) -> None:
        """UpdateContainerResources with only the given fields (zero fields are left alone by runtimes)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the connection (gRPC channel)."""
