# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""What the kernel applies to a container: cpusets, memory nodes, CFS quota and throttling (RUNTIME.md 3).

cgroup v1 (one hierarchy per controller, ``cpu`` possibly mounted as ``cpu,cpuacct``) and v2 (unified).
Paths are cgroupfs-form container cgroups (``/kubepods/pod<uid>/<id>``) relative to the mount point.
"""

from __future__ import annotations

import os

from ..errors import CPUSetError, StoreError
from .cgroup_paths import is_pod_cgroup

TYPE_CHECKING = False
if TYPE_CHECKING:  # the OCI hook's check path reads a cpuset through this module: no typing, no CPUSet at run time
    from typing import Dict, Iterator, List, Optional, Tuple

    from ..kubelet.cpuset import CPUSet

DEFAULT_ROOT = "/sys/fs/cgroup"


class CgroupFS:
    def __init__(self, root: str = DEFAULT_ROOT) -> None:
        self.root = root
        self.v2 = os.path.exists(os.path.join(root, "cgroup.controllers"))

    def directory(self, controller: str, path: str) -> str:
        if self.v2:
            return os.path.join(self.root, path.lstrip("/"))
        return os.path.join(self.root, controller, path.lstrip("/"))

    def _read(self, controller: str, path: str, name: str) -> Optional[str]:
        if not path:
            return None
        try:
            with open(os.path.join(self.directory(controller, path), name), encoding="utf-8") as handle:
                return handle.read().strip()
        except OSError:
            return None

    def _set(self, path: str, name: str) -> Optional[CPUSet]:
        from ..kubelet.cpuset import CPUSet  # noqa: PLC0415  # (see TYPE_CHECKING above)

        text = self._read("cpuset", path, name)
        if text is None:
            return None
        try:
            return CPUSet.parse(text)
        except CPUSetError:
            return None

    def cpus_text(self, path: str) -> Optional[str]:
        """The container's configured cpuset as the kernel prints it (``cpuset.cpus``: canonical ranges, "" when never
        written); None when unreadable."""
        return self._read("cpuset", path, "cpuset.cpus")

    def effective_text(self, path: str) -> Optional[str]:
        """v2: the CPUs the kernel lets the container use (``cpuset.cpus.effective``), as it prints them; None on v1
        (where ``cpuset.cpus`` is always written) or when unreadable."""
        return self._read("cpuset", path, "cpuset.cpus.effective") if self.v2 else None

    def cpus(self, path: str, configured: bool = False) -> Optional[CPUSet]:
        """The container's cpuset (v1 ``cpuset.cpus``, v2 ``cpuset.cpus.effective``, or with ``configured`` what was
        written: ``cpuset.cpus``, empty when never written); None when unreadable."""
        return self._set(path, "cpuset.cpus.effective" if self.v2 and not configured else "cpuset.cpus")

    def set_cpus(self, path: str, cpus: CPUSet) -> None:
        """Write a container's ``cpuset.cpus`` (the OCI hook, before the container's process runs)."""
        self._write(self.directory("cpuset", path), "cpuset.cpus", str(cpus))

    def container_cgroups(self, kubepods: str) -> Iterator[str]:
        """Every container's (and sandbox's) cgroup below the kubelet's top cgroup ``kubepods`` (``kubepods_root`` of a
        container's path: any ``cgroupRoot``, either driver): each directory whose parent is a pod cgroup, however
        deep its own cgroups go (systemd or Docker in a container), under any name the runtime gives it
        (``<id>``, ``cri-containerd-<id>.scope``, ``crio-<id>.scope``, CRI-O's ``crio-conmon-<id>.scope``); paths
        relative to the mount point."""
        top = self.directory("cpuset", "/")
        stack = [self.directory("cpuset", kubepods)]
        while stack:
            path = stack.pop()
            try:
                children = [entry.path for entry in os.scandir(path) if entry.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            if is_pod_cgroup(os.path.basename(path)):
                yield from ("/" + os.path.relpath(child, top) for child in sorted(children))
            else:
                stack.extend(children)  # the QoS cgroups and the pods in them

    def move_cpus(self, path: str, cpus: CPUSet) -> None:
        """A running container's ``cpuset.cpus`` to ``cpus``, its own cgroups first where they would stop it (v1: a
        child's cpuset must stay within its parent's, the kernel refuses the parent's write with EBUSY; v2: the
        children's effective sets follow their parent by themselves)."""
        if not self.v2:
            directory = self.directory("cpuset", path)
            nested: List[str] = []
            for parent, folders, _files in os.walk(directory):
                nested.extend(os.path.join(parent, folder) for folder in folders)
            for child in sorted(nested, key=lambda name: name.count(os.sep), reverse=True):  # the deepest first
                have = self._set("/" + os.path.relpath(child, self.directory("cpuset", "/")), "cpuset.cpus")
                if have is not None and not have.issubset(cpus):
                    self._write(child, "cpuset.cpus", str(cpus))
        self.set_cpus(path, cpus)

    def mems(self, path: str) -> Optional[CPUSet]:
        return self._set(path, "cpuset.mems.effective" if self.v2 else "cpuset.mems")

    def quota(self, path: str) -> Optional[Tuple[int, int]]:
        """(quota µs, period µs), quota -1 for none; None when unreadable."""
        if self.v2:
            text = self._read("cpu", path, "cpu.max")
            if text is None:
                return None
            fields = text.split()
            try:
                period = int(fields[1]) if len(fields) > 1 else 100000
                return (-1 if fields[0] == "max" else int(fields[0])), period
            except (ValueError, IndexError):
                return None
        quota_text = self._read("cpu", path, "cpu.cfs_quota_us")
        period_text = self._read("cpu", path, "cpu.cfs_period_us")
        try:
            return (int(quota_text), int(period_text)) if quota_text is not None and period_text is not None else None
        except ValueError:
            return None

    def set_quota(self, path: str, quota: int, period: int) -> None:
        """Write a CFS quota (-1: none) into a cgroup the kubelet owns (the pod level)."""
        if self.v2:
            target, value = "cpu.max", "%s %d" % ("max" if quota < 0 else str(quota), period)
        else:
            target, value = "cpu.cfs_quota_us", str(quota)
        self._write(self.directory("cpu", path), target, value)

    @staticmethod
    def _write(directory: str, target: str, value: str) -> None:
        name = os.path.join(directory, target)
        try:
            with open(name, "w", encoding="utf-8") as handle:
                handle.write(value)
        except OSError as exc:
            raise StoreError("cannot write %s to %s: %s" % (value, name, exc.strerror or exc)) from None

    def idle(self, path: str) -> Optional[str]:
        """``cpu.idle`` (cgroup v2, kernel 5.15 or newer: "1" when the cgroup only takes what nobody else wants); None
        where there is none."""
        return self._read("cpu", path, "cpu.idle") if self.v2 else None

    def set_idle(self, path: str, value: int = 1) -> None:
        self._write(self.directory("cpu", path), "cpu.idle", str(value))

    def burst(self, path: str) -> Optional[int]:
        """``cpu.max.burst`` in µs (cgroup v2, kernel 5.14 or newer); None where there is none."""
        text = self._read("cpu", path, "cpu.max.burst") if self.v2 else None
        return int(text) if text is not None and text.isdigit() else None

    def set_burst(self, path: str, microseconds: int) -> None:
        self._write(self.directory("cpu", path), "cpu.max.burst", str(microseconds))

    def cpu_stat(self, path: str) -> Dict[str, int]:
        """CFS throttling counters: nr_periods, nr_throttled, throttled_usec (v1 ns converted)."""
        text = self._read("cpuacct" if not self.v2 and not self._has("cpu", path) else "cpu", path, "cpu.stat")
        stats: Dict[str, int] = {}
        for line in (text or "").splitlines():
            key, _sep, value = line.partition(" ")
            try:
                stats[key] = int(value)
            except ValueError:
                continue
        if "throttled_time" in stats and "throttled_usec" not in stats:
            stats["throttled_usec"] = stats.pop("throttled_time") // 1000
        return stats

    def _has(self, controller: str, path: str) -> bool:
        return os.path.isdir(self.directory(controller, path))
