# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Kubelet cgroup paths (RUNTIME.md section 3): the systemd driver's slice names to cgroupfs paths, and a pod's QoS
class from its cgroup parent (cgroupfs and systemd driver names, cgroup v1 and v2 alike)."""

from __future__ import annotations

import posixpath

from ..errors import RuntimeOutputError
from ..kubelet.qos import BEST_EFFORT, BURSTABLE, GUARANTEED


def expand_systemd_slice(slice_name: str) -> str:
    """``kubepods-burstable-pod1.slice`` -> ``kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice``.
    """
    if not slice_name.endswith(".slice") or slice_name == "-.slice":
        return slice_name
    parts = slice_name[: -len(".slice")].split("-")
    return "/".join("-".join(parts[: n + 1]) + ".slice" for n in range(len(parts)))


def cgroupfs_path(spec_path: str) -> str:
    """A runtime spec ``cgroupsPath`` in cgroupfs form: systemd ``slice:prefix:name`` paths are expanded, and the
    result is cleaned as runc cleans the cgroup path it creates (``utils.CleanPath``): rooted, ``..`` stops
    at the root, no ``.``, doubled or trailing slash. A peer's ``/kubepods/../../etc`` is the ``/etc`` cgroup runc
    made, never a directory above the cgroup mount. A NUL byte, which no cgroup's name holds, is a
    ``RuntimeOutputError``."""
    if "\x00" in spec_path:
        raise RuntimeOutputError("the cgroup path %r holds a NUL byte" % spec_path)
    if ":" in spec_path and not spec_path.startswith("/"):
        slice_name, prefix, name = (spec_path.split(":") + ["", ""])[:3]
        leaf = "%s-%s.scope" % (prefix, name) if prefix else "%s.scope" % name
        spec_path = expand_systemd_slice(slice_name) + "/" + leaf
    return posixpath.normpath("/" + spec_path.lstrip("/"))


def parent_path(parent: str) -> str:
    """A pod's cgroup parent as the kubelet gives it to the runtime, in cgroupfs form: a systemd slice name
    (``kubepods-pod1.slice``) expanded, a ``slice:prefix:name`` path converted, a cgroupfs path as it is."""
    if ":" in parent:
        return cgroupfs_path(parent)
    if parent.endswith(".slice") and "/" not in parent:
        return "/" + expand_systemd_slice(parent)
    return parent


def is_kubepods(name: str) -> bool:
    """The kubelet's top cgroup, below any ``cgroupRoot``: ``kubepods`` (cgroupfs driver), ``kubepods.slice`` or
    ``<root>-kubepods.slice`` (systemd driver, ``cgroupRoot: /<root>.slice``)."""
    return name in ("kubepods", "kubepods.slice") or name.endswith("-kubepods.slice")


def kubepods_root(path: str) -> str:
    """The kubelet's top cgroup a cgroupfs-form path lies under (``/kubelet/kubepods/pod1/c`` -> ``/kubelet/kubepods``);
    "" when it lies under none."""
    parts = path.split("/")
    for n, part in enumerate(parts):
        if is_kubepods(part):
            return "/".join(parts[: n + 1])
    return ""


def is_pod_cgroup(name: str) -> bool:
    """A kubelet pod cgroup's name: ``pod<uid>`` (cgroupfs) or ``[<root>-]kubepods[-<qos>]-pod<uid>.slice`` (systemd;
    the UID's dashes as underscores). Plain string tests: the OCI hook's check path does not load ``re``."""
    if name.startswith("pod"):
        return len(name) > 3 and all(c in _UID_CHARS for c in name[3:])
    head, sep, uid = name[: -len(".slice")].rpartition("-pod") if name.endswith(".slice") else ("", "", "")
    return (bool(sep and uid) and all(c in _UID_CHARS for c in uid)
            and (head == "kubepods" or head.endswith(("-kubepods", "kubepods-burstable", "kubepods-besteffort"))))


_UID_CHARS = frozenset("0123456789abcdefABCDEF-_")


def qos_from_cgroup(pod_path: str) -> str:
    """The QoS class from a kubelet pod cgroup (cgroupfs or systemd driver names, below any ``cgroupRoot``); "" when not
    a kubelet pod."""
    parts = [p for p in pod_path.split("/") if p]
    roots = [n for n, part in enumerate(parts) if is_kubepods(part)]
    if not roots or roots[0] + 1 >= len(parts):
        return ""
    top, first = parts[roots[0]], parts[roots[0] + 1]
    prefix = top[: -len(".slice")] + "-" if top.endswith(".slice") else ""  # kubepods- / kubelet-kubepods-
    if first in ("burstable", prefix + "burstable.slice"):
        return BURSTABLE
    if first in ("besteffort", prefix + "besteffort.slice"):
        return BEST_EFFORT
    if first.startswith(("pod", prefix + "pod")):
        return GUARANTEED
    return ""
