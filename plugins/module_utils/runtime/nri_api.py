# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The NRI API messages a CPU manager uses (containerd/nri ``pkg/api/api.proto``, package ``nri.pkg.api.v1alpha1``;
names and numbers as published, each message with only the fields kubecpu reads or writes), and NRI's pods and
containers as the container model (``runtime.ListedContainer`` and ``ContainerInfo``)."""

from __future__ import annotations

import time
from typing import Any, Optional, Tuple

from ..wire.proto_schema import cached
from .cgroup_paths import cgroupfs_path, parent_path, qos_from_cgroup
from .model import CONTAINER_NAME_LABEL, EXITED, RUNNING, UNKNOWN, ContainerInfo, ListedContainer, kubecpu_annotations

RESTART_COUNT = "io.kubernetes.container.restartCount"

DEFAULT_SOCKET = "/var/run/nri/nri.sock"
DEFAULT_NAME, DEFAULT_INDEX = "kubecpu", "10"
PACKAGE = "nri.pkg.api.v1alpha1"
PLUGIN_SERVICE = PACKAGE + ".Plugin"
RUNTIME_SERVICE = PACKAGE + ".Runtime"
_OPT_INT64 = [("value", 1, "int64")]
_OPT_UINT64 = [("value", 1, "uint64")]
MESSAGES = {
    "Empty": [],
    "RegisterPluginRequest": [("plugin_name", 1, "string"), ("plugin_idx", 2, "string")],
    "ConfigureRequest": [("config", 1, "string"), ("runtime_name", 2, "string"), ("runtime_version", 3, "string"),
                         ("registration_timeout", 4, "int64"), ("request_timeout", 5, "int64")],
    "ConfigureResponse": [("events", 2, "int32")],
    "OptionalInt64": _OPT_INT64,
    "OptionalUInt64": _OPT_UINT64,
    "LinuxCPU": [("shares", 1, "OptionalUInt64"), ("quota", 2, "OptionalInt64"), ("period", 3, "OptionalUInt64"),
                 ("cpus", 6, "string"), ("mems", 7, "string")],
    "LinuxMemory": [("limit", 1, "OptionalInt64")],
    "LinuxResources": [("memory", 1, "LinuxMemory"), ("cpu", 2, "LinuxCPU"), ("unified", 6, "map")],
    "LinuxPodSandbox": [("pod_overhead", 1, "LinuxResources"), ("pod_resources", 2, "LinuxResources"),
                        ("cgroup_parent", 3, "string"), ("cgroups_path", 4, "string")],
    "PodSandbox": [("id", 1, "string"), ("name", 2, "string"), ("uid", 3, "string"), ("namespace", 4, "string"),
                   ("labels", 5, "map"), ("annotations", 6, "map"), ("runtime_handler", 7, "string"),
                   ("linux", 8, "LinuxPodSandbox")],
    "LinuxContainer": [("resources", 3, "LinuxResources"), ("cgroups_path", 5, "string")],
    "Container": [("id", 1, "string"), ("pod_sandbox_id", 2, "string"), ("name", 3, "string"),
                  ("state", 4, "ContainerState"), ("labels", 5, "map"), ("annotations", 6, "map"),
                  ("linux", 11, "LinuxContainer"), ("pid", 12, "uint32")],
    "SynchronizeRequest": [("pods", 1, "[]PodSandbox"), ("containers", 2, "[]Container"), ("more", 3, "bool")],
    "LinuxContainerUpdate": [("resources", 1, "LinuxResources")],
    "ContainerUpdate": [("container_id", 1, "string"), ("linux", 2, "LinuxContainerUpdate"),
                        ("ignore_failure", 3, "bool")],
    "ContainerEviction": [("container_id", 1, "string"), ("reason", 2, "string")],
    "SynchronizeResponse": [("update", 1, "[]ContainerUpdate"), ("more", 2, "bool")],
    "LinuxContainerAdjustment": [("resources", 2, "LinuxResources")],
    "ContainerAdjustment": [("annotations", 2, "map"), ("linux", 6, "LinuxContainerAdjustment")],
    "CreateContainerRequest": [("pod", 1, "PodSandbox"), ("container", 2, "Container")],
    "CreateContainerResponse": [("adjust", 1, "ContainerAdjustment"), ("update", 2, "[]ContainerUpdate"),
                                ("evict", 3, "[]ContainerEviction")],
    "UpdateContainerRequest": [("pod", 1, "PodSandbox"), ("container", 2, "Container"),
                               ("linux_resources", 3, "LinuxResources")],
    "UpdateContainerResponse": [("update", 1, "[]ContainerUpdate"), ("evict", 2, "[]ContainerEviction")],
    "StopContainerRequest": [("pod", 1, "PodSandbox"), ("container", 2, "Container")],
    "StopContainerResponse": [("update", 1, "[]ContainerUpdate")],
    "StateChangeEvent": [("event", 1, "Event"), ("pod", 2, "PodSandbox"), ("container", 3, "Container")],
    "UpdateContainersRequest": [("update", 1, "[]ContainerUpdate"), ("evict", 2, "[]ContainerEviction")],
    "UpdateContainersResponse": [("failed", 1, "[]ContainerUpdate")],
}
ENUMS = {
    "Event": ["UNKNOWN", "RUN_POD_SANDBOX", "STOP_POD_SANDBOX", "REMOVE_POD_SANDBOX", "CREATE_CONTAINER",
              "POST_CREATE_CONTAINER", "START_CONTAINER", "POST_START_CONTAINER", "UPDATE_CONTAINER",
              "POST_UPDATE_CONTAINER", "STOP_CONTAINER", "REMOVE_CONTAINER", "LAST"],
    "ContainerState": ["CONTAINER_UNKNOWN", "CONTAINER_CREATED", "CONTAINER_PAUSED", "CONTAINER_RUNNING",
                       "CONTAINER_STOPPED"],
}
CREATE_CONTAINER, UPDATE_CONTAINER, STOP_CONTAINER, REMOVE_CONTAINER = 4, 8, 10, 11
_STATES = {1: RUNNING, 2: RUNNING, 3: RUNNING, 4: EXITED}  # created: about to run, planned as running


def schema() -> Any:
    return cached("kubecpu/nri_v1alpha1.proto", PACKAGE, MESSAGES, ENUMS)


def event_mask(*events: int) -> int:
    """NRI's subscription mask: bit ``event - 1`` per event (pkg/api/event.go)."""
    mask = 0
    for event in events:
        mask |= 1 << (event - 1)
    return mask


def cpu_resources(resources: Any) -> Tuple[int, int, int]:
    """(shares, quota, period) of an NRI LinuxResources; 0 where unset."""
    cpu = resources.cpu
    return (cpu.shares.value if cpu.HasField("shares") else 0, cpu.quota.value if cpu.HasField("quota") else 0,
            cpu.period.value if cpu.HasField("period") else 0)


def container_model(pod: Any, container: Any, created_at: int, *, state: Optional[str] = None,
                    resources: Any = None, finished_at: int = 0) -> Tuple[ListedContainer, ContainerInfo]:
    """An NRI container of an NRI pod as the manager's list row and facts. ``state`` overrides NRI's (a container
    being created is planned as running: it will be, with what the plugin answers); ``resources`` overrides the
    container's (an in-place resize)."""
    shares, quota, period = cpu_resources(resources if resources is not None else container.linux.resources)
    path = cgroupfs_path(container.linux.cgroups_path) if container.linux.cgroups_path else ""
    qos = qos_from_cgroup(path.rsplit("/", 1)[0]) if path else ""
    qos = qos or qos_from_cgroup(parent_path(pod.linux.cgroup_parent))
    name = container.labels.get(CONTAINER_NAME_LABEL) or container.name
    status = state or _STATES.get(container.state, UNKNOWN)
    memory = resources if resources is not None else container.linux.resources
    limit = memory.memory.limit.value if memory.memory.HasField("limit") else 0
    restarts = container.annotations.get(RESTART_COUNT, "0")
    attempt = int(restarts) if restarts.isdigit() else 0
    listed = ListedContainer(container.id, container.pod_sandbox_id, pod.uid, pod.name, pod.namespace, name, attempt,
                             status, created_at)
    info = ContainerInfo(container.id, pod.uid, pod.name, pod.namespace, name, attempt, qos, path, shares, quota,
                         period, limit, 0, finished_at, annotations=kubecpu_annotations(pod.annotations))
    return listed, info


def now_ns() -> int:
    return time.time_ns()
