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
from typing import FrozenSet, Iterable, Optional

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
