# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The OCI hook's check path: the container is already where the state puts it, so it is created at once.

Most container starts need nothing from the hook: the NRI plugin placed the container, or the container is shared and
its cgroup already holds the shared pool, or the kubelet pins CPUs itself (``node.kubelet_policy``: kubecpu steps
aside). This path decides that from the hook's view of the state (``node.hook_view``), the OCI state and
``config.json``, and the container's cgroup file (for a container with exclusive CPUs, every other container cgroup's
too: whoever saved its entry may have been killed, or its reply dropped, before the others moved off its CPUs),
importing ``os``, ``select`` and small modules of the core: no part of the kubelet model, and neither ``json`` nor
``re`` (``wire.json_lean``). Whenever it cannot confirm (no view or a stale one, a Guaranteed container without an
entry, a cgroup that differs, another container on its CPUs), it answers None and ``services.hook`` decides, reading
the state file, under the lock when it writes. It never writes anything itself.

Measured on the 2-CPU host (``python3 -I -S bin/kubecpu hook`` on a recorded state, runs interleaved, p50): the
interpreter alone 15 ms, a run through this path 25 ms (40 ms with the ``json`` package), through ``services.hook``
63 ms.
"""

from __future__ import annotations

from ..kubelet.qos import BEST_EFFORT, BURSTABLE
from ..node.hook_view import read_view
from ..node.kubelet_policy import kubelet_pins
from ..node.state_paths import KUBELET_PATH
from ..runtime.cgroup_paths import kubepods_root
from ..runtime.cgroups import CgroupFS
from ..runtime.oci_hook import CONTAINER, SANDBOX, HookedContainer, container, parse_state, read_config

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, Optional, Set

_SHARED = (BURSTABLE, BEST_EFFORT)
EXCLUSIVE_ANNOTATION = "cpu-exclusive.kubecpu.io"  # runtime.model's (which this path does not load)


def quick_check(state_bytes: bytes, state_path: str, cgroup_root: str, kubelet_state_path: str = KUBELET_PATH,
                force: bool = False, *, exclusive_burstable: bool = False,
                system_partition: bool = False) -> Optional[Dict[str, object]]:
    """The hook's answer when the container needs nothing (``passed`` or ``checked``, as ``HookResult.to_dict``);
    None when only the full hook can tell. Bad input is a ``HookInputError``, as on the full path.

    With ``exclusive_burstable``, a Burstable container is confirmed here only when its spec shows that its pod has no
    ``cpu-exclusive.kubecpu.io`` (CRI-O copies every annotation of a pod into the spec; containerd only those its
    configuration lists, so on containerd the full hook asks); with ``system_partition`` a shared
    container's side of the pool depends on its pod, which the full hook reads."""
    state = parse_state(state_bytes)
    hooked = container(state, read_config(state.bundle))
    if hooked is None:
        return {"action": "passed", "container": "", "cpus": "", "moved": 0}
    aside = kubelet_pins(kubelet_state_path, force)
    if aside:
        return {"action": "passed", "container": hooked.ref, "cpus": "", "moved": 0, "note": aside}
    view = read_view(state_path)
    if view is None or view["policy"] != "static" or not hooked.cgroup_path:
        return None
    entries: Dict[str, Dict[str, str]] = view["entries"]  # type: ignore[assignment]  # checked by read_view
    target = entries.get(hooked.pod_uid, {}).get(hooked.name) if hooked.kind == CONTAINER else None
    exclusive = target is not None
    if target is None and (hooked.kind == SANDBOX or hooked.qos in _SHARED):
        if system_partition or (exclusive_burstable and hooked.kind == CONTAINER and hooked.qos == BURSTABLE
                                and not _unnamed(hooked)):
            return None
        target = view["default"]  # type: ignore[assignment]
    cgroups = CgroupFS(cgroup_root)
    if not target or cgroups.cpus_text(hooked.cgroup_path) != target:
        return None
    if exclusive and not _alone_on(cgroups, hooked.cgroup_path, target):
        return None
    return {"action": "checked", "container": hooked.ref, "cpus": target, "moved": 0}


def _unnamed(hooked: HookedContainer) -> bool:
    """Its spec shows that its pod has no ``cpu-exclusive.kubecpu.io``: CRI-O made it (every annotation of the pod is
    in the spec) and the annotation is absent. Present, the full hook reads it (and refuses one it cannot read)."""
    return hooked.by_crio and EXCLUSIVE_ANNOTATION not in hooked.annotations


def _alone_on(cgroups: CgroupFS, own: str, cpus: str) -> bool:
    """Whether no other container cgroup below the kubelet's top cgroup of ``own`` runs on any of ``cpus``."""
    held = _members(cpus)
    kubepods = kubepods_root(own)
    if held is None or not kubepods:
        return False
    for path in cgroups.container_cgroups(kubepods):
        if path != own:
            text = cgroups.cpus_text(path) or cgroups.effective_text(path)  # v2, never written: the parent's
            if text is None:
                continue  # gone meanwhile
            have = _members(text)
            if have is None or have & held:
                return False
    return True


def _members(text: str) -> Optional[Set[int]]:
    """The CPUs of a cpuset as the kernel prints it (``0-3,8``); None when it is not one (``kubelet.cpuset`` parses
    for the full path; this path does not load it)."""
    members: Set[int] = set()
    for part in filter(None, text.strip().split(",")):
        first, _dash, last = part.partition("-")
        if not first.isdigit() or not (last or first).isdigit() or int(first) > int(last or first):
            return None
        members.update(range(int(first), int(last or first) + 1))
    return members
