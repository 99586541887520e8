# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Kubelet cgroup paths (RUNTIME.md section 3): the systemd driver's slice names to cgroupfs paths, and a pod's QoS
class from its cgroup parent (cgroupfs and systemd driver names, cgroup v1 and v2 alike)."""

from __future__ import annotations

from ..kubelet.qos import BEST_EFFORT, BURSTABLE, GUARANTEED


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


def parent_path(parent: str) -> str:
    """A pod's cgroup parent as the kubelet gives it to the runtime, in cgroupfs form: a systemd slice name
    (``kubepods-pod1.slice``) expanded, a ``slice:prefix:name`` path converted, a cgroupfs path as it is."""
    if ":" in parent:
        return cgroupfs_path(parent)
    if parent.endswith(".slice") and "/" not in parent:
        return "/" + expand_systemd_slice(parent)
    return parent


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
