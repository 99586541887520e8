# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The OCI hook's view of the state file: what its check path reads instead of decoding the checkpoint.

The hook runs on every container's start, and most of the time it only confirms what the NRI plugin (or an earlier
run) already put in the container's cgroup. Decoding the checkpoint means verifying its checksum in the format of the
kubelet version at hand, which needs the kubelet model; the view needs ``json`` and ``os``. It lies beside the state
file as ``<state>.hookview``, a JSON object::

    {"file": [device, inode, size, mtime_ns, ctime_ns], "policy": "static", "default": "0,3-7",
     "entries": {"<pod UID>": {"<container>": "1-2"}}}

``file`` is the identity of the state file the view was taken from, after it was verified (decoded by a reader, or
just written by kubecpu). A view is trusted only while the state file still has that identity: any other writer (the
kubelet, an editor, a corruption in place, a restore) changes the inode, the size or the times, and the hook then
reads the file the slow way, which also refuses a corrupt one. The view is written without fsync: losing it costs
one slow check, never a wrong one.

The view exists once a hook has run; from then on every state writer keeps it current (``StateStore.save``).
"""

from __future__ import annotations

import os

from ..wire.json_lean import dumps, loads

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook's check path imports this module: typing is not loaded at run time
    from typing import Dict, List, Optional

    from ..kubelet.state import CPUState

SUFFIX = ".hookview"
MAX_VIEW_BYTES = 4 * 1024 * 1024  # a state of 250 containers is about 20 KiB


def view_path(state_path: str) -> str:
    return state_path + SUFFIX


def identity(stat: os.stat_result) -> List[int]:
    """What changes whenever a file is replaced or written: device, inode, size, modification and change times."""
    return [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]


def write_view(state_path: str, file_identity: List[int], state: CPUState) -> None:
    """The view of ``state``, verified to be what the state file with ``file_identity`` holds (not durable)."""
    from ..atomic import atomic_write  # noqa: PLC0415  # only writers need it, not the hook's check path

    doc = {"file": file_identity, "policy": state.policy_name, "default": str(state.default),
           "entries": {pod: {name: str(cpus) for name, cpus in containers.items()}
                       for pod, containers in state.entries.items()}}
    atomic_write(view_path(state_path), dumps(doc).encode("utf-8"), durable=False)


def read_view(state_path: str) -> Optional[Dict[str, object]]:
    """The view while the state file is still the one it was taken from; None otherwise (missing, stale, oversized or
    malformed: the caller reads the state file itself)."""
    try:
        with open(view_path(state_path), "rb") as handle:
            data = handle.read(MAX_VIEW_BYTES + 1)
        current = identity(os.stat(state_path))  # after the view: a writer replaces the file first, then the view
    except OSError:
        return None
    if len(data) > MAX_VIEW_BYTES:
        return None
    try:
        doc = loads(data)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("file") != current or not _well_formed(doc):
        return None
    return doc


def _well_formed(doc: Dict[str, object]) -> bool:
    entries = doc.get("entries")
    return (isinstance(doc.get("policy"), str) and isinstance(doc.get("default"), str) and isinstance(entries, dict)
            and all(isinstance(containers, dict) and all(isinstance(cpus, str) for cpus in containers.values())
                    for containers in entries.values()))
