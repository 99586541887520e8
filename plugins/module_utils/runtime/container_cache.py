# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""What a container is, by ID (it never changes for an ID), and the file that shares it between processes.

Concurrent one-shot runs and the agent read the file under the state lock, so each container is inspected once
on a node. It is a cache: whatever it cannot tell (a missing, corrupt or unwritable file) is inspected again.
"""

from __future__ import annotations

import json
import os
from typing import Callable, Dict, List, Optional, Set, Tuple

from ..atomic import atomic_write
from ..errors import ContainerNotFoundError, KubecpuError
from .model import EXITED, ContainerInfo, ListedContainer, Runtime


class ContainerCache:
    """Container facts by ID plus the cpusets last pushed; in memory, optionally mirrored in a small file."""

    def __init__(self, path: Optional[str] = None, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self.infos: Dict[str, ContainerInfo] = {}
        self.states: Dict[str, str] = {}
        self.dirty = False
        self._seen: Optional[Tuple[int, int, int]] = None  # the file's (inode, size, mtime) last read or written
        self.refresh()

    def refresh(self) -> None:
        """Take in what other processes have inspected since this cache last read or wrote its file (a stat when
        nothing changed): called under the state lock, so concurrent one-shot runs inspect each container once."""
        if not self.path:
            return
        try:
            info = os.stat(self.path)
            signature = (info.st_ino, info.st_size, info.st_mtime_ns)
            if signature == self._seen:
                return
            with open(self.path, encoding="utf-8") as handle:
                doc = json.load(handle)
            self._seen = signature
            for item in doc.get("containers", []):
                known = ContainerInfo.from_dict(item["info"])
                if known.id not in self.infos:
                    self.infos[known.id] = known
                    self.states[known.id] = str(item.get("state", ""))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, KubecpuError):
            pass  # a cache: what it cannot tell is inspected again

    def get(self, listed: ListedContainer) -> Optional[ContainerInfo]:
        """The cached facts, unless the container has since exited (its exit status is new information)."""
        info = self.infos.get(listed.id)
        if info is None or (listed.state == EXITED and self.states.get(listed.id) != EXITED):
            return None
        return info

    def facts(self, runtime: Runtime, listed: List[ListedContainer], skipped: List[Dict[str, str]],
              current: Optional[Callable[[ListedContainer, ContainerInfo], ContainerInfo]] = None,
              ) -> Tuple[List[Tuple[ListedContainer, ContainerInfo]], int]:
        """The Kubernetes containers of a list call, each with its facts: cached, else inspected (and cached).
        ``current`` brings cached facts up to date where a container can change under its ID (an in-place resize;
        freshly inspected ones are current). Containers removed before their inspection go to ``skipped``. Returns
        the pairs and the inspections made."""
        if runtime.live:  # its facts are current by construction: a lookup each
            return [(item, runtime.describe(item)) for item in listed if item.is_kubernetes], 0
        pairs = []
        inspected = 0
        for item in (c for c in listed if c.is_kubernetes):
            info = self.get(item)
            if info is not None and info.annotations is None and runtime.want_annotations:
                info = None  # learned before the annotations were asked for
            if info is not None and current is not None:
                now = current(item, info)
                if now is not info:
                    info = now
                    self.put(now, item.state)
            if info is None:
                try:
                    info = runtime.describe(item)
                except ContainerNotFoundError:
                    skipped.append({"container_id": item.id, "pod": item.pod_ref, "container": item.name,
                                    "reason": "removed between the list and its inspection"})
                    continue
                inspected += 1
                self.put(info, item.state)
            pairs.append((item, info))
        return pairs, inspected

    def put(self, info: ContainerInfo, state: str) -> None:
        self.infos[info.id] = info
        self.states[info.id] = state
        self.dirty = True

    def retain(self, ids: Set[str]) -> None:
        for gone in [cid for cid in self.infos if cid not in ids]:
            del self.infos[gone]
            self.states.pop(gone, None)
            self.dirty = True

    def save(self) -> None:
        if not self.path or not self.dirty or self.read_only:
            return
        doc = {"format": "kubecpu.container-cache/v1",
               "containers": [{"state": self.states.get(cid, ""), "info": info.to_dict()}
                              for cid, info in sorted(self.infos.items())]}
        try:
            info = atomic_write(self.path, json.dumps(doc, separators=(",", ":")).encode("utf-8"), durable=False)
        except OSError:
            return  # a cache: the next pass inspects again what it could not keep
        self._seen = (info.st_ino, info.st_size, info.st_mtime_ns)
        self.dirty = False
