# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Does the kubelet pin CPUs itself? The one rule every path of kubecpu follows (the OCI hook's check path and its
full path, the NRI plugin, a pass of the agent, the modules that act through a runtime): when the kubelet's
checkpoint names the ``static`` policy, kubecpu steps aside. It writes no cpuset and no pool (its pool would
overlap the kubelet's exclusive CPUs), and it refuses nothing (the kubelet places every container itself); ``force``
overrides, for an operator who knows both managers are configured apart.

The checkpoint is read on every decision, not once at start: a kubelet switched to ``static`` under a running hook
or plugin is seen at its next container. The read is small and lean (``wire.json_lean``: the OCI hook's check path
loads neither ``json`` nor the checkpoint codec); a file that cannot be read or decoded says nothing, and the
kubelet's own start-up refuses a corrupt checkpoint anyway.
"""

from __future__ import annotations

from ..wire.json_lean import loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024  # a checkpoint of a 2,048-CPU node with every CPU in its own entry: ~1 MiB
STATIC = "static"


def recorded_policy(path: str) -> Optional[str]:
    """The policy a checkpoint names (its ``policyName``, matched as Go's JSON decoder matches field names); None
    when the file is missing, oversized or says nothing readable (reading it for real then reports why)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CHECKPOINT_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_CHECKPOINT_BYTES:
        return None
    try:
        doc = loads(data)
    except ValueError:
        return None
    policy = next((v for k, v in doc.items() if k.lower() == "policyname"), None) if isinstance(doc, dict) else None
    return policy if isinstance(policy, str) else None


def kubelet_pins(path: str, force: bool = False) -> str:
    """Why kubecpu steps aside ("" when it does not): the kubelet's checkpoint at ``path`` says policy static."""
    if force or recorded_policy(path) != STATIC:
        return ""
    return ("the kubelet pins CPUs on this node itself (%s says policy static): kubecpu steps aside; use kubecpu only "
            "with cpuManagerPolicy none, or set force to override" % path)


# The options that change who holds which CPU (docs/HOUSEKEEPING.md): a kubelet that pins would not know of them.
PINNING_OPTIONS = ("exclusive_burstable", "system_partition")


def options_refused(path: str, options: object) -> str:
    """Why the options of ``options`` that change who holds which CPU are refused ("" when none is on, or the
    kubelet does not pin): the kubelet's checkpoint at ``path`` says policy static. ``force`` does not override it:
    the kubelet would still hand out the CPUs those options take."""
    asked = [name for name in PINNING_OPTIONS if getattr(options, name, False)]
    if not asked or recorded_policy(path) != STATIC:
        return ""
    return ("%s change%s who holds which CPU, and the kubelet pins CPUs on this node itself (%s says policy static): "
            "it would not know of them, so they are refused; switch %s off here, or run the kubelet with "
            "cpuManagerPolicy none" % (" and ".join(asked), "" if len(asked) > 1 else "s", path,
                                       "them" if len(asked) > 1 else "it"))
