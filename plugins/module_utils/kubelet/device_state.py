# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The kubelet Device Manager's checkpoint (``/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint``), read for
one fact: the NUMA nodes of the devices allocated to each container. Since kubelet 1.20 each entry of
``Data.PodDeviceEntries`` keys its device IDs by NUMA node (``DeviceIDs: {"0": [...]}``; ``-1``: a device without NUMA
affinity). When the kubelet restarts, its device manager regenerates a container's hints from the devices it holds
(once their plugin has registered again) and the Topology Manager merges them with the CPU and memory hints. An
older entry (a plain list of IDs) says no NUMA node and gives no hint here. Only this reader's fields are checked;
the file's checksum is the kubelet's to verify.
"""

from __future__ import annotations

import json
import os
from typing import Dict, FrozenSet, Optional, Tuple

from ..errors import StateError

MAX_DEVICE_STATE_BYTES = 16 * 1024 * 1024  # one entry per container and resource: far less on the largest nodes
MAX_NUMA_ID = 1023
DEVICE_STATE = os.path.join("device-plugins", "kubelet_internal_checkpoint")  # below the kubelet's root directory

# (pod UID, container name) -> resource -> the NUMA nodes of the devices it holds (those with NUMA affinity)
DeviceNodes = Dict[Tuple[str, str], Dict[str, FrozenSet[int]]]


def device_nodes(data: bytes, path: str) -> DeviceNodes:
    """Per container and resource, the NUMA nodes of its devices; StateError naming ``path`` when the file is not a
    device manager checkpoint this reader can trust."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise StateError("%s: not a device manager checkpoint (%s)" % (path, exc)) from None
    body = doc.get("Data") if isinstance(doc, dict) else None
    entries = body.get("PodDeviceEntries") if isinstance(body, dict) else None
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise StateError("%s: Data.PodDeviceEntries is not a list" % path)
    found: DeviceNodes = {}
    for index, entry in enumerate(entries):
        fields = _entry(entry)
        if fields is None:
            raise StateError("%s: Data.PodDeviceEntries[%d] is not an entry with PodUID, ContainerName, ResourceName "
                             "and DeviceIDs" % (path, index))
        pod, name, resource, nodes = fields
        if nodes:
            held = found.setdefault((pod, name), {})
            held[resource] = held.get(resource, frozenset()) | nodes
    return found


def _entry(entry: object) -> Optional[Tuple[str, str, str, FrozenSet[int]]]:
    if not isinstance(entry, dict):
        return None
    pod, name, resource, ids = (entry.get(key) for key in ("PodUID", "ContainerName", "ResourceName", "DeviceIDs"))
    if not all(isinstance(value, str) and value for value in (pod, name, resource)):
        return None
    if isinstance(ids, list):  # before 1.20: no NUMA node
        return (str(pod), str(name), str(resource), frozenset()) if all(isinstance(i, str) for i in ids) else None
    if not isinstance(ids, dict):
        return None
    nodes = set()
    for key, devices in ids.items():
        try:
            node = int(key)
        except ValueError:
            return None
        if not -1 <= node <= MAX_NUMA_ID or not isinstance(devices, list) \
                or not all(isinstance(device, str) for device in devices):
            return None
        if node >= 0 and devices:
            nodes.add(node)
    return str(pod), str(name), str(resource), frozenset(nodes)


def devices_beside(checkpoint_path: str) -> str:
    """The Device Manager's checkpoint below the directory of the CPU manager's ``checkpoint_path``."""
    return os.path.join(os.path.dirname(checkpoint_path), DEVICE_STATE)


def read_device_nodes(path: str) -> DeviceNodes:
    """``device_nodes`` of the file at ``path``; {} when there is none (no device plugin ever ran)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_DEVICE_STATE_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise StateError("%s: cannot read the device manager checkpoint: %s" % (path, exc.strerror)) from None
    if len(data) > MAX_DEVICE_STATE_BYTES:
        raise StateError("%s: larger than %d bytes" % (path, MAX_DEVICE_STATE_BYTES))
    return device_nodes(data, path)
