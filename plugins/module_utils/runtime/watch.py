# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Container cgroups appearing and disappearing under the pods' cgroup root, through inotify (stdlib ``ctypes``).

The agent waits on this descriptor as well as on its period: a container's cgroup directory is made when the
runtime creates it and removed when it is gone, so a pass can follow at once instead of up to a period later.
inotify is not recursive: the kubelet's levels are watched (``kubepods``, its QoS directories, each pod's), each new
directory as it appears, for cgroup v1 (the cpuset hierarchy) and v2, cgroupfs and systemd driver names alike.
Linux only; where inotify cannot be had the agent keeps its period (``open_watch`` returns None and says why).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
from typing import Dict, List, Optional, Protocol, Tuple

from .cgroups import CgroupFS


class Waker(Protocol):
    """Something the agent's wait can end on: a descriptor, and whether anything changed (reading clears it)."""

    def fileno(self) -> int: ...

    def changed(self) -> bool: ...

    def close(self) -> None: ...


IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVED_TO, IN_ISDIR, IN_Q_OVERFLOW = (
    0x100, 0x200, 0x400, 0x80, 0x40000000, 0x4000)
IN_NONBLOCK, IN_CLOEXEC = 0o4000, 0o2000000
MASK = IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_DELETE_SELF
EVENT = struct.Struct("iIII")
ROOTS = ("kubepods", "kubepods.slice")
DEPTH = 3  # kubepods / qos / pod: container directories are seen in their pod's directory


class CgroupWatch:
    """inotify watches on the kubelet's cgroup levels; ``changed()`` drains the events and says whether a container
    (or pod) directory came or went."""

    def __init__(self, cgroups: CgroupFS) -> None:
        self._libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        self.fd: int = int(self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC))
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1: " + os.strerror(ctypes.get_errno()))
        self.base = cgroups.directory("cpuset", "/")
        self.watches: Dict[int, Tuple[str, int]] = {}  # watch descriptor -> (directory, depth)
        self._add(self.base, 0)  # the hierarchy itself: for kubepods coming after the agent

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _add(self, directory: str, depth: int) -> None:
        if depth > DEPTH or not os.path.isdir(directory):
            return
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(directory), MASK)
        if wd < 0:
            return  # gone already, or the watch limit: the period still covers it
        self.watches[wd] = (directory, depth)
        try:
            children = [entry.path for entry in os.scandir(directory) if entry.is_dir(follow_symlinks=False)
                        and (depth > 0 or entry.name in ROOTS)]
        except OSError:
            return
        for child in children:
            self._add(child, depth + 1)

    def changed(self) -> bool:
        """Read every pending event; True when a directory came or went (or the queue overflowed)."""
        seen = False
        for wd, mask, name in self._events():
            if mask & IN_Q_OVERFLOW:
                seen = True
                continue
            if mask & IN_DELETE_SELF:
                self.watches.pop(wd, None)
                continue
            if not mask & IN_ISDIR or wd not in self.watches:
                continue
            directory, depth = self.watches[wd]
            if depth == 0 and name not in ROOTS:
                continue  # another tree of the hierarchy (system.slice, ...)
            seen = True
            if mask & (IN_CREATE | IN_MOVED_TO):
                self._add(os.path.join(directory, name), depth + 1)
        return seen

    def _events(self) -> List[Tuple[int, int, str]]:
        events: List[Tuple[int, int, str]] = []
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    return events
                raise
            offset = 0
            while offset + EVENT.size <= len(data):
                wd, mask, _cookie, length = EVENT.unpack_from(data, offset)
                raw = data[offset + EVENT.size:offset + EVENT.size + length]
                events.append((wd, mask, raw.split(b"\0", 1)[0].decode("utf-8", "replace")))
                offset += EVENT.size + length


def open_watch(cgroups: CgroupFS) -> Tuple[Optional[CgroupWatch], str]:
    """The watch, or None and why (no inotify here)."""
    try:
        return CgroupWatch(cgroups), ""
    except (OSError, AttributeError) as exc:
        return None, "no inotify (%s): passes every period only" % exc
