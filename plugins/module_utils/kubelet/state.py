# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The CPU manager state: the shared (default) set and the exclusive assignments by pod and container."""

from __future__ import annotations

from typing import Dict, Iterator, Optional, Tuple

from .cpuset import EMPTY, CPUSet

Entries = Dict[str, Dict[str, CPUSet]]


class CPUState:
    """``policy_name``, ``default`` (the shared pool) and ``entries`` {pod UID: {container: set}}.

    From kubelet 1.36 a checkpoint may also hold ``pod_entries`` (pod-level exclusive CPUs, {pod UID: set}) and from
    1.37 ``baselines`` (in-place resize baselines, {pod UID: {container: CPU list}}, kept as read). kubecpu keeps both
    through every read-modify-write; ``pod_level`` says whether the kubelet counts the pod entries (its
    ``PodLevelResourceManagers`` gate), which validation then does too.
    """

    def __init__(self, policy_name: str, default: CPUSet = EMPTY, entries: Optional[Entries] = None, *,
                 pod_entries: Optional[Dict[str, CPUSet]] = None,
                 baselines: Optional[Dict[str, Dict[str, str]]] = None, pod_level: bool = False) -> None:
        self.policy_name = policy_name
        self.default = default
        self.entries: Entries = {pod: dict(containers) for pod, containers in (entries or {}).items()}
        self.pod_entries: Dict[str, CPUSet] = dict(pod_entries or {})
        self.baselines: Dict[str, Dict[str, str]] = {pod: dict(items) for pod, items in (baselines or {}).items()}
        self.pod_level = pod_level

    def copy(self) -> CPUState:
        return CPUState(self.policy_name, self.default, self.entries, pod_entries=self.pod_entries,
                        baselines=self.baselines, pod_level=self.pod_level)

    def pod_assigned(self) -> CPUSet:
        """Union of the pod-level exclusive CPUs."""
        return CPUSet().union(*self.pod_entries.values())

    def get(self, pod_uid: str, container: str) -> Optional[CPUSet]:
        return self.entries.get(pod_uid, {}).get(container)

    def set(self, pod_uid: str, container: str, cpus: CPUSet) -> None:
        self.entries.setdefault(pod_uid, {})[container] = cpus

    def delete(self, pod_uid: str, container: str) -> None:
        containers = self.entries.get(pod_uid)
        if containers is None or container not in containers:
            return
        del containers[container]
        if not containers:
            del self.entries[pod_uid]

    def assignments(self) -> Iterator[Tuple[str, str, CPUSet]]:
        """(pod UID, container, set) in sorted order."""
        for pod in sorted(self.entries):
            for container in sorted(self.entries[pod]):
                yield pod, container, self.entries[pod][container]

    def assigned(self) -> CPUSet:
        """Union of all exclusive assignments."""
        return CPUSet().union(*(cpus for _pod, _name, cpus in self.assignments()))

    __hash__ = None  # type: ignore[assignment]  # mutable: not hashable

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CPUState):
            return NotImplemented
        return ((self.policy_name, self.default, self.entries, self.pod_entries, self.baselines)
                == (other.policy_name, other.default, other.entries, other.pod_entries, other.baselines))

    def to_dict(self) -> Dict[str, object]:
        """The user-facing view: ``{"policyName", "defaultCpuSet", "entries"}``, and ``podEntries`` and
        ``baselines`` when the checkpoint has them."""
        doc: Dict[str, object] = {
            "policyName": self.policy_name, "defaultCpuSet": str(self.default),
            "entries": {pod: {name: str(cpus) for name, cpus in sorted(containers.items())}
                        for pod, containers in sorted(self.entries.items())}}
        if self.pod_entries:
            doc["podEntries"] = {pod: str(cpus) for pod, cpus in sorted(self.pod_entries.items())}
        if self.baselines:
            doc["baselines"] = {pod: dict(sorted(items.items())) for pod, items in sorted(self.baselines.items())}
        return doc
