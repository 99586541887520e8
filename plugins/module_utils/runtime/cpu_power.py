# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""A CPU's power settings as sysfs shows them (docs/HOUSEKEEPING.md, section 5), below ``/sys/devices/system/cpu``:

* ``cpuN/power/pm_qos_resume_latency_us``: the longest wake-up the CPU may take, which bounds the C-states cpuidle
  picks. The kernel shows ``0`` for no limit (every state) and ``n/a`` for a limit of 0 (no state but polling), and
  takes the same words back, or a number of microseconds (drivers/base/power/sysfs.c).
* ``cpuN/cpufreq``: a link to the CPU's frequency policy, ``cpufreq/policyK``, whose ``scaling_governor`` is the
  governor of every CPU in its ``affected_cpus``, chosen from its ``scaling_available_governors``. A CPU without a
  cpufreq driver (most virtual machines) has no link.

Files are named by their path below the CPU directory (``cpu3/power/pm_qos_resume_latency_us``,
``cpufreq/policy3/scaling_governor``), so two CPUs that share a policy share one name. A value is written as the
kernel shows it, with its newline, through an existing file only (no creation); a write the kernel refuses raises
``OSError`` for the caller to report with the file's name.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Optional, Tuple

from ..errors import CPUSetError
from ..kubelet.cpuset import CPUSet

CPU_DIR = "/sys/devices/system/cpu"
LATENCY = "pm_qos_resume_latency_us"
GOVERNOR = "scaling_governor"
MAX_VALUE_BYTES = 4096  # a sysfs attribute is one page at most; a governor list is under 100 bytes


class Policy(NamedTuple):
    """A CPU's cpufreq policy: its governor file's name, the CPUs it governs, the governors it offers."""

    governor_file: str
    cpus: CPUSet
    available: Tuple[str, ...]


class CpuPowerFS:
    """The power files of one machine's CPUs (``cpu_dir``: /sys/devices/system/cpu, or a tree of its shape)."""

    def __init__(self, cpu_dir: str = CPU_DIR) -> None:
        self.cpu_dir = cpu_dir

    @staticmethod
    def latency_file(cpu: int) -> str:
        return "cpu%d/power/%s" % (cpu, LATENCY)

    def exists(self, name: str) -> bool:
        return os.path.isfile(os.path.join(self.cpu_dir, name))

    def read(self, name: str) -> Optional[str]:
        """The file's text as the kernel shows it (newline included); None when it is not there or cannot be read."""
        try:
            with open(os.path.join(self.cpu_dir, name), "rb") as handle:
                data = handle.read(MAX_VALUE_BYTES + 1)
        except OSError:
            return None
        if len(data) > MAX_VALUE_BYTES:
            return None
        return data.decode("ascii", "replace")

    def policy(self, cpu: int) -> Tuple[Optional[Policy], str]:
        """The CPU's cpufreq policy, or None and why not (no cpufreq, an unreadable policy)."""
        link = os.path.join(self.cpu_dir, "cpu%d" % cpu, "cpufreq")
        if not os.path.isdir(link):
            return None, "cpu%d has no cpufreq (no %s: no frequency driver)" % (cpu, link)
        real, base = os.path.realpath(link), os.path.realpath(self.cpu_dir)
        name = os.path.relpath(real, base) if real.startswith(base + os.sep) else "cpu%d/cpufreq" % cpu
        governor = os.path.join(name, GOVERNOR)
        available = self.read(os.path.join(name, "scaling_available_governors"))
        if available is None or self.read(governor) is None:
            return None, "cpu%d's cpufreq policy (%s) shows no governor" % (cpu, real)
        affected = self.read(os.path.join(name, "affected_cpus"))
        try:
            cpus = CPUSet(int(word) for word in affected.split()) if affected is not None else CPUSet([cpu])
        except ValueError:
            cpus = CPUSet([cpu])
        return Policy(governor, cpus.union(CPUSet([cpu])), tuple(available.split())), ""

    def write(self, name: str, text: str) -> None:
        """``text`` into an existing file, as a shell's ``>`` writes it (no creation: sysfs makes no files)."""
        fd = os.open(os.path.join(self.cpu_dir, name), os.O_WRONLY | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0))
        try:
            os.write(fd, text.encode("ascii"))
        finally:
            os.close(fd)


def parse_cpus(text: str) -> CPUSet:
    """A record's CPU list; an empty set when it is not one."""
    try:
        return CPUSet.parse(text)
    except CPUSetError:
        return CPUSet()
