# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Containers whose cpuset the OCI hook wrote into cgroupfs itself, behind the runtime's back.

What they run on is right, but the runtime's own record (the container's spec, what ``crictl inspect`` shows and what
runc applies again under the systemd driver) is not: the next pass of the agent or the NRI plugin updates each of them
through the runtime once, then drops its mark. A mark is an empty file named by the container ID in
``<state>.hooked/``: the hook adds one without reading anything, a pass lists the directory (one system call).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Callable, Dict, FrozenSet, Iterable, Optional, Tuple

from ..errors import StoreError
from ..runtime.ids import check_container_id
from .state_store import StateStore

SUFFIX = ".hooked"


class HookMarks:
    def __init__(self, state_path: Optional[str]) -> None:
        """``state_path``: the state file the marks go beside (None: a read-only state, no marks)."""
        self.directory = None if state_path is None else state_path + SUFFIX

    @classmethod
    def beside(cls, store: StateStore) -> HookMarks:
        """The marks of ``store``'s state file (none for a read-only state: the kubelet's checkpoint)."""
        return cls(None if store.read_only else store.path)

    def mark(self, container_ids: Iterable[str]) -> None:
        if self.directory is None:
            return
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            for cid in container_ids:
                with open(os.path.join(self.directory, check_container_id(cid)), "a", encoding="utf-8"):
                    pass
        except OSError as exc:
            raise StoreError("cannot mark the hooked containers in %s: %s" % (self.directory, exc.strerror)) from None

    def pending(self) -> FrozenSet[str]:
        if self.directory is None:
            return frozenset()
        try:
            return frozenset(os.listdir(self.directory))
        except OSError:
            return frozenset()

    def clear(self, container_ids: Iterable[str]) -> None:
        if self.directory is None:
            return
        for cid in container_ids:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.directory, cid))


CREATING_SUFFIX = ".creating"
CREATE_GRACE = 240.0  # seconds: the kubelet's CRI request timeout (runtimeRequestTimeout, 2 minutes) twice over
MAX_MARK_BYTES = 4096  # a cgroup path
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


class CreatingMarks:
    """Entries the OCI hook allocated for containers the runtime is still creating.

    Between the hook's allocation and the end of the runtime's CreateContainer (CRI-O lists a container only once it
    is created), a pass of the agent would see an entry without a container and release it: the container would
    then start on CPUs given to the next. The hook marks each entry it allocates (a file
    ``<state>.creating/<pod UID>.<container>`` holding the container's cgroup path, its time the allocation's). A pass
    keeps a marked entry while the runtime does not list the container yet and its cgroup still exists (runc removes
    it when a creation fails or the container is removed), ``CREATE_GRACE`` at most; it drops the mark otherwise."""

    def __init__(self, state_path: Optional[str]) -> None:
        self.directory = None if state_path is None else state_path + CREATING_SUFFIX

    @classmethod
    def beside(cls, store: StateStore) -> CreatingMarks:
        return cls(None if store.read_only else store.path)

    @staticmethod
    def _name(pod_uid: str, container: str) -> Optional[str]:
        name = "%s.%s" % (pod_uid, container)
        ok = pod_uid and container and "." not in pod_uid and set(name) <= _NAME_CHARS
        return name if ok else None

    def mark(self, pod_uid: str, container: str, cgroup_path: str) -> None:
        name = self._name(pod_uid, container)
        if self.directory is None or name is None:
            return
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            with open(os.path.join(self.directory, name), "w", encoding="utf-8") as handle:
                handle.write(cgroup_path)
        except OSError as exc:
            raise StoreError("cannot mark the container being created in %s: %s" % (self.directory, exc.strerror)) \
                from None

    def fresh(self, now: Optional[float] = None) -> Dict[Tuple[str, str], str]:
        """The marks younger than ``CREATE_GRACE``: (pod UID, container) -> cgroup path; older ones are removed."""
        if self.directory is None:
            return {}
        now = time.time() if now is None else now
        found = {}
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return {}
        for entry in entries:
            uid, _dot, container = entry.name.partition(".")
            with contextlib.suppress(OSError, UnicodeDecodeError):
                if now - entry.stat(follow_symlinks=False).st_mtime > CREATE_GRACE:
                    os.unlink(entry.path)
                elif container:
                    with open(entry.path, encoding="utf-8") as handle:
                        found[(uid, container)] = handle.read(MAX_MARK_BYTES)
        return found

    def creating(self, listed: Callable[[str, str], bool], exists: Callable[[str], bool]) -> FrozenSet[Tuple[str, str]]:
        """The entries of containers still being created: marked, not ``listed`` by the runtime yet, their cgroup
        still there (``exists``). Every other mark is cleared."""
        marks = self.fresh()
        keep = frozenset(key for key, path in marks.items() if not listed(*key) and path and exists(path))
        self.clear(key for key in marks if key not in keep)
        return keep

    def clear(self, pairs: Iterable[Tuple[str, str]]) -> None:
        if self.directory is None:
            return
        for uid, container in pairs:
            name = self._name(uid, container)
            if name is not None:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.directory, name))
