# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""What a manager call would do or did: the state before and after, the actions, per-container errors."""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional

from ..kubelet.cpuset import CPUSet
from ..kubelet.state import CPUState
from ..runtime.model import ListedContainer


class Action(NamedTuple):
    action: str  # allocate | resize | update | release | quota | move | idle | burst | power
    container_id: str
    pod: str
    pod_uid: str
    container: str
    cpus: str
    reason: str
    mems: Optional[str] = None
    quota: Optional[int] = None
    period: Optional[int] = None
    cgroup: str = ""

    def to_dict(self) -> Dict[str, Any]:
        doc = {k: v for k, v in self._asdict().items() if v is not None and v != ""}
        doc.setdefault("container_id", "")
        doc.setdefault("cpus", "")
        return doc


class Plan:
    """What a call would do or did: the state before and after, actions, per-container errors."""

    def __init__(self, before: CPUState) -> None:
        self.before = before
        self.after = before
        self.actions: List[Action] = []
        self.errors: List[Dict[str, str]] = []
        self.skipped: List[Dict[str, str]] = []
        self.applied = False
        self.counts: Dict[str, int] = {}
        # containers outside a scoped pass's pods that follow the shared pool to its new value (CgroupTargets.plan)
        self.followers: List[str] = []
        self.interrupted = False  # apply() stopped: another writer saved the state while it pushed (manager._push)
        self.recommit = False  # apply() changed ``after`` (a defragmentation stopped at a failed move): save it again
        self.holding: Dict[str, CPUSet] = {}  # container ID -> the cpuset it had when planned (the apply order)
        self.runtime_calls: Dict[str, int] = {}
        self.seconds = 0.0
        self.result: Dict[str, Any] = {}
        self.housekeeping: Dict[str, Any] = {}  # the interrupts kept off the exclusive CPUs (node/housekeeping.py)
        self.power: Dict[str, Any] = {}  # the exclusive CPUs' C-state limit and governor (node/power.py)

    @property
    def changed(self) -> bool:
        return (self.before != self.after or bool(self.actions) or bool(self.housekeeping.get("updated"))
                or bool(self.power.get("updated")))

    def error(self, container: Optional[ListedContainer], message: str, kind: str = "error") -> None:
        entry = {"error": message, "kind": kind}
        if container is not None:
            entry.update(container_id=container.id, pod=container.pod_ref, container=container.name)
        self.errors.append(entry)

    def to_dict(self, states: bool = True) -> Dict[str, Any]:
        """Everything, or without the states before and after (``states=False``: what a log line and metrics need)."""
        counts = dict(self.counts)
        for action in ("allocate", "resize", "update", "release", "quota"):
            counts[action] = sum(1 for a in self.actions if a.action == action)
        for action in ("idle", "burst", "power"):  # the options' own: counted where there are some
            done = sum(1 for a in self.actions if a.action == action)
            if done:
                counts[action] = done
        counts["errors"] = len(self.errors)
        doc = {"changed": self.changed, "actions": [a.to_dict() for a in self.actions], "errors": self.errors,
               "skipped": self.skipped, "counts": counts, "runtime_calls": self.runtime_calls,
               "applied": self.applied, "duration_seconds": round(self.seconds, 6)}
        if self.housekeeping:
            doc["housekeeping"] = self.housekeeping
        if self.power:
            doc["power"] = self.power
        if states:
            doc.update(state_before=self.before.to_dict(), state_after=self.after.to_dict())
        doc.update(self.result)
        return doc
