# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The kubelet Memory Manager's checkpoint (``/var/lib/kubelet/memory_manager_state``), read for one fact: the NUMA
nodes each container's memory is pinned to. Under the Memory Manager's ``Static`` policy a Guaranteed container's
memory (and hugepages) come from the NUMA nodes its admission chose (``entries[pod][container]``, a list of blocks
``{"numaAffinity": [nodes], "type": ..., "size": ...}``); its CPUs must stay on them, or its memory is remote and the
kubelet's re-admission of running pods at its next start merges hints that no longer agree. The ``None`` policy
records nothing. Only this reader's fields are checked; the file's checksum is the kubelet's to verify.
"""

from __future__ import annotations

import json
import os
from typing import Dict, FrozenSet, Optional, Tuple

from ..errors import StateError

MAX_MEMORY_STATE_BYTES = 16 * 1024 * 1024  # like the CPU manager's checkpoint: ~1 MiB on the largest nodes
MAX_NUMA_ID = 1023
MEMORY_STATE = "memory_manager_state"  # its name, in the kubelet's root directory beside ``cpu_manager_state``

MemoryNodes = Dict[Tuple[str, str], FrozenSet[int]]


def memory_nodes(data: bytes, path: str) -> MemoryNodes:
    """(pod UID, container name) -> the NUMA nodes its memory is pinned to; StateError naming ``path`` when the
    file is not a memory manager checkpoint this reader can trust."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise StateError("%s: not a memory manager checkpoint (%s)" % (path, exc)) from None
    entries = doc.get("entries") if isinstance(doc, dict) else None
    if entries is None:
        return {}
    if not isinstance(entries, dict):
        raise StateError("%s: entries is not a mapping of pods" % path)
    found: MemoryNodes = {}
    for pod, containers in entries.items():
        if not isinstance(containers, dict):
            raise StateError("%s: entries[%s] is not a mapping of containers" % (path, pod))
        for name, blocks in containers.items():
            nodes = _nodes(blocks)
            if nodes is None:
                raise StateError("%s: entries[%s][%s] is not a list of blocks with numaAffinity" % (path, pod, name))
            if nodes:
                found[(pod, name)] = nodes
    return found


def _nodes(blocks: object) -> Optional[FrozenSet[int]]:
    if not isinstance(blocks, list):
        return None
    nodes = set()
    for block in blocks:
        affinity = block.get("numaAffinity") if isinstance(block, dict) else None
        if not isinstance(affinity, list) or not all(
                isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_NUMA_ID for n in affinity):
            return None
        nodes.update(affinity)
    return frozenset(nodes)


def read_memory_nodes(path: str) -> MemoryNodes:
    """``memory_nodes`` of the file at ``path``; {} when there is none (no Memory Manager, or its ``None`` policy)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_MEMORY_STATE_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise StateError("%s: cannot read the memory manager checkpoint: %s" % (path, exc.strerror)) from None
    if len(data) > MAX_MEMORY_STATE_BYTES:
        raise StateError("%s: larger than %d bytes" % (path, MAX_MEMORY_STATE_BYTES))
    return memory_nodes(data, path)


def beside(checkpoint_path: str) -> str:
    """The Memory Manager's checkpoint in the directory of the CPU manager's ``checkpoint_path``."""
    return os.path.join(os.path.dirname(checkpoint_path), MEMORY_STATE)
