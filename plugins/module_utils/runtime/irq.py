# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Interrupt affinity as procfs shows it (docs/HOUSEKEEPING.md): ``/proc/irq/N/smp_affinity_list``, the CPUs device
interrupt N may be delivered to (root may write it), ``effective_affinity_list``, where the kernel delivers it now (it
follows a write once the interrupt fires again), and ``/proc/irq/default_smp_affinity``, the mask new interrupts start
with (hex words of 32 bits, comma-separated, the highest first).

The kernel refuses a write for one interrupt for reasons of its own: EIO for a managed interrupt (the vectors it
spreads over a multi-queue device itself), ENOSPC when the target CPUs' vector space is full, EBUSY while an earlier
move is still pending, EINVAL when a target CPU went offline. ``set_affinity`` says so with False and keeps the
reason (``refusals``); the caller counts them and goes on with the next interrupt: they are not errors. Only a
procfs kubecpu cannot write at all (no permission, read-only) is a ``HousekeepingError``.
"""

from __future__ import annotations

import errno
import os
from typing import Dict, List, Optional

from ..errors import CPUSetError, HousekeepingError
from ..kubelet.cpuset import CPUSet

PROC_IRQ = "/proc/irq"
MAX_IRQ_FILE_BYTES = 64 * 1024  # a CPU list or mask: 8,192 CPUs, every other one listed, is about 40 KiB
MAX_ACTIONS = 64  # handler names per interrupt (a shared line has a few)
DEFAULT_AFFINITY = "default_smp_affinity"


def read_bounded(path: str, limit: int) -> Optional[bytes]:
    """A file of kubecpu's housekeeping (its record, irqbalance's environment file), at most ``limit`` + 1 bytes (the
    caller refuses more); None when it does not exist, HousekeepingError when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read(limit + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise HousekeepingError("cannot read %s: %s" % (path, exc.strerror or exc)) from None


def format_mask(cpus: CPUSet) -> str:
    """A CPU set as the kernel's bitmap text: 32-bit hex words, comma-separated, the highest first ("ff",
    "1,00000000")."""
    value = sum(1 << cpu for cpu in cpus)
    words = []
    while True:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
        if not value:
            break
    return ",".join(["%x" % words[-1]] + ["%08x" % word for word in reversed(words[:-1])])


class IrqFS:
    """One procfs's interrupt affinities (``root``: /proc/irq, or a copy of its shape in tests)."""

    def __init__(self, root: str = PROC_IRQ) -> None:
        self.root = root
        self.refusals: Dict[str, str] = {}  # interrupt (or "default") -> why the kernel refused the last write

    def actions(self, irq: int) -> Optional[str]:
        """Who the interrupt belongs to: the names of its handlers (``/proc/irq/N/<name>/`` directories, the device
        actions), sorted and comma-separated; None when it is gone. A number given to another device names other
        actions."""
        try:
            names = sorted(entry.name for entry in os.scandir(os.path.join(self.root, str(irq)))
                           if entry.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return None
        except OSError:
            return ""
        return ",".join(names[:MAX_ACTIONS])

    def exists(self, irq: int) -> bool:
        return os.path.isdir(os.path.join(self.root, str(irq)))

    def irqs(self) -> List[int]:
        """The interrupts procfs lists, ascending; none when it cannot be read."""
        try:
            return sorted(int(name) for name in os.listdir(self.root) if name.isdigit())
        except OSError:
            return []

    def _read(self, name: str) -> Optional[str]:
        try:
            with open(os.path.join(self.root, name), "rb") as handle:
                data = handle.read(MAX_IRQ_FILE_BYTES + 1)
        except OSError:
            return None
        if len(data) > MAX_IRQ_FILE_BYTES:
            return None
        return data.decode("ascii", "replace").strip()

    def _list(self, name: str) -> Optional[CPUSet]:
        text = self._read(name)
        try:
            return None if text is None else CPUSet.parse(text)
        except CPUSetError:
            return None

    def affinity(self, irq: int) -> Optional[CPUSet]:
        """What the interrupt may run on; None when it is gone or unreadable."""
        return self._list("%d/smp_affinity_list" % irq)

    def affinity_text(self, irq: int) -> Optional[str]:
        """The same as the kernel prints it (a canonical CPU list), unparsed; None when it is gone or unreadable."""
        return self._read("%d/smp_affinity_list" % irq)

    def effective(self, irq: int) -> Optional[CPUSet]:
        """Where the kernel delivers it now (None where the kernel does not say)."""
        return self._list("%d/effective_affinity_list" % irq)

    def default_affinity(self) -> Optional[CPUSet]:
        text = self._read(DEFAULT_AFFINITY)
        try:
            return None if text is None else CPUSet.parse_mask(text)
        except CPUSetError:
            return None

    def set_affinity(self, irq: int, cpus: CPUSet) -> bool:
        """Write the interrupt's affinity. False when the kernel refuses it for a managed interrupt (EIO) or the
        interrupt has gone; HousekeepingError for anything else (no permission, a read-only procfs)."""
        return self.set_affinity_text(irq, str(cpus))

    def set_affinity_text(self, irq: int, text: str) -> bool:
        """``set_affinity`` with the CPU list already as text."""
        return self._write("%d/smp_affinity_list" % irq, text)

    def set_default_affinity(self, cpus: CPUSet) -> bool:
        return self._write(DEFAULT_AFFINITY, format_mask(cpus))

    def _write(self, name: str, text: str) -> bool:
        path = os.path.join(self.root, name)
        key = name.split("/", 1)[0] if "/" in name else "default"
        self.refusals.pop(key, None)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0))  # as a shell's ">" opens it
        except FileNotFoundError:
            self.refusals[key] = "gone"
            return False
        except OSError as exc:
            if exc.errno in _SYSTEMIC:
                raise HousekeepingError("cannot write %s: %s" % (path, exc.strerror)) from None
            self.refusals[key] = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            return False
        try:
            os.write(fd, text.encode("ascii"))
        except OSError as exc:  # this interrupt's refusal (EIO, ENOSPC, EBUSY, EINVAL, ...), never the pass's end
            self.refusals[key] = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            return False
        finally:
            os.close(fd)
        return True


_SYSTEMIC = (errno.EACCES, errno.EPERM, errno.EROFS)  # kubecpu cannot write procfs at all
