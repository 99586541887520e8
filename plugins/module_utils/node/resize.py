# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""In-place resize of running containers (InPlacePodVerticalScaling, GA since 1.35; exclusive CPUs under KEP-5554).

A container whose CPU request changed, same container ID, is decided again:

* exclusive N -> M > N: a superset, the M-N more chosen as a fresh allocation would, its own NUMA nodes first;
* exclusive N -> M < N: a subset that keeps its baseline (the CPUs it was first given); below the baseline the
  kubelet refuses, and so does kubecpu (an error, nothing changed);
* integral -> fractional: back to the shared pool; fractional -> integral (Guaranteed): a fresh allocation (the
  manager's usual step for a container without an entry);
* not enough free CPUs: it keeps its CPUs, the pass reports ``resize infeasible`` and the next pass tries again.

Baselines live beside the state file (``<state>.baselines.json``), never in it: the checkpoint stays the kubelet's
format. They are written with the state, under its lock.
"""

from __future__ import annotations

import json
import os
from typing import Dict, Optional, Tuple

from ..atomic import atomic_write
from ..errors import AllocationError, CPUSetError, StateError, StoreError
from ..kubelet.cpuset import CPUSet
from ..kubelet.policy import Policy
from ..kubelet.qos import BURSTABLE
from ..kubelet.state import CPUState
from ..runtime.model import RUNNING
from .plan import Action, Plan
from .pod_views import PodView

FORMAT = "kubecpu.baselines/v1"
Baselines = Dict[str, Dict[str, CPUSet]]


class BaselineFile:
    """The baselines of the exclusive assignments, by pod UID and container; a corrupt file is refused and kept."""

    def __init__(self, path: Optional[str]) -> None:
        self.path = path
        self._written: Optional[bytes] = None
        self._known: Optional[Tuple[Tuple[int, int, int], Baselines]] = None  # the file's stat and what it held
        self.deferred = False  # saves wait for flush() (the NRI plugin writes them once its reply is sent)
        self._unsaved: Optional[Baselines] = None

    def load(self) -> Baselines:
        """The baselines on disk (or saved and not yet flushed); a file unchanged since this process last read or
        wrote it costs one stat."""
        if self._unsaved is not None:
            return {uid: dict(containers) for uid, containers in self._unsaved.items()}
        if not self.path:
            return {}
        try:
            info = os.stat(self.path)
            signature = (info.st_ino, info.st_size, info.st_mtime_ns)
            if self._known is not None and self._known[0] == signature:
                return {uid: dict(containers) for uid, containers in self._known[1].items()}
            with open(self.path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StoreError("cannot read %s: %s" % (self.path, exc.strerror or exc)) from None
        try:
            doc = json.loads(data)
            if doc.get("format") != FORMAT:
                raise ValueError("format is not %s" % FORMAT)
            baselines = {uid: {name: CPUSet.parse(cpus) for name, cpus in containers.items()}
                         for uid, containers in doc["baselines"].items()}
        except (ValueError, KeyError, TypeError, AttributeError, CPUSetError) as exc:
            raise StoreError("resize baselines %s are unreadable (%s): kept as they are; move the file aside to "
                             "start from the current assignments" % (self.path, exc)) from None
        self._written = data
        self._known = (signature, baselines)
        return {uid: dict(containers) for uid, containers in baselines.items()}

    def save(self, baselines: Baselines) -> None:
        if self.deferred:
            self._unsaved = baselines
            return
        self._write(baselines)

    @property
    def pending(self) -> bool:
        return self._unsaved is not None

    def flush(self) -> None:
        """Write what was saved while ``deferred``."""
        if self._unsaved is not None:
            baselines, self._unsaved = self._unsaved, None
            self._write(baselines)

    def _write(self, baselines: Baselines) -> None:
        if not self.path or (not baselines and self._written is None and not os.path.exists(self.path)):
            return  # nothing pinned, no file: none to write
        doc = {"format": FORMAT, "baselines": {uid: {name: str(cpus) for name, cpus in sorted(containers.items())}
                                               for uid, containers in sorted(baselines.items()) if containers}}
        data = (json.dumps(doc, separators=(",", ":")) + "\n").encode("utf-8")
        if data == self._written:
            return
        try:  # atomic, not durable: a baseline lost in a crash is taken again from what the container holds
            info = atomic_write(self.path, data, durable=False)
        except OSError as exc:
            raise StoreError("cannot write %s: %s" % (self.path, exc.strerror or exc)) from None
        self._written = data
        self._known = ((info.st_ino, info.st_size, info.st_mtime_ns), baselines)


def baselines_path(state_path: str) -> str:
    return os.path.abspath(state_path) + ".baselines.json"


def resize_running(policy: Policy, plan: Plan, state: CPUState, views: Dict[str, PodView],
                   baselines: Baselines) -> None:
    """Decide again every running container whose request no longer matches the exclusive CPUs it holds."""
    for view in views.values():
        for listed, _info in view.latest.values():
            held = state.get(view.uid, listed.name)
            if held is None or listed.state != RUNNING:
                continue
            want = view.model.guaranteed_cpus(listed.name)
            if want == len(held):
                continue
            if want == 0:
                policy.remove_container(state, view.uid, listed.name)
                plan.actions.append(Action("release", listed.id, listed.pod_ref, view.uid, listed.name, str(held),
                                           _released_why(view)))
                continue
            baseline = baselines.get(view.uid, {}).get(listed.name, held)
            try:
                cpus = policy.resize(state, view.uid, listed.name, want, baseline)
            except (AllocationError, StateError) as exc:
                what = "resize infeasible" if isinstance(exc, AllocationError) else "resize refused"
                plan.error(listed, "%s: container %s/%s asks for %d CPUs and keeps %s: %s"
                           % (what, listed.pod_ref, listed.name, want, held, exc), "resize")
                continue
            plan.actions.append(Action("resize", listed.id, listed.pod_ref, view.uid, listed.name, str(cpus),
                                       "resized from %d to %d CPUs (was %s)" % (len(held), want, held)))


def _released_why(view: PodView) -> str:
    """Why a running container's exclusive CPUs go back: its request, or (a Burstable pod's) its mark is gone."""
    if view.model.qos_class() == BURSTABLE:
        return ("a Burstable pod's container no longer marked by cpu-exclusive.kubecpu.io (exclusive_burstable off, "
                "or its request no longer whole CPUs): back to the shared pool")
    return "resized to a request without exclusive CPUs: back to the shared pool"


def sync_baselines(baselines: Baselines, state: CPUState) -> Baselines:
    """The baselines of the assignments there are: a new assignment's is what it holds now; gone ones go."""
    synced: Baselines = {}
    for uid, name, cpus in state.assignments():
        synced.setdefault(uid, {})[name] = baselines.get(uid, {}).get(name, cpus)
    return synced
