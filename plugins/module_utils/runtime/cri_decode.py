# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""CRI documents to the container model: the list rows and verbose statuses that crictl prints as JSON and the CRI
messages carry under the same field names (RUNTIME.md sections 2, 5). Anything not of the documented shape is a
``RuntimeOutputError`` naming the field."""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional

from ..errors import RuntimeOutputError
from .cgroup_paths import cgroupfs_path, parent_path, qos_from_cgroup
from .ids import check_container_id
from .model import (CONTAINER_NAME_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL, ContainerInfo,
                    ListedContainer)


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


def sandbox_cgroup_parent(info: Mapping[str, Any], what: str) -> str:
    """The pod's cgroup parent from a verbose sandbox status: the stored config (containerd's
    ``info.config.linux.cgroup_parent``), else the parent of the sandbox container's own cgroup."""
    config = as_dict(as_dict(info.get("config"), what + " config").get("linux"), what + " config.linux")
    parent = as_str(config.get("cgroup_parent"), what + " cgroup_parent")
    if parent:
        return parent_path(parent)
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
