# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Whether a running service predates its files: when a process started (to a clock tick) and which of the files it
reads changed after that. A run cut off (Ctrl-C, a lost connection) between writing a service's configuration, unit
or program and restarting it leaves the service running what came before; the next run sees it here and restarts it,
though the files already say what it wants."""

from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional, Sequence

from ..kubelet.discovery import CommandRunner
from .kubelet_health import check_unit

MAX_STAT_BYTES = 4096  # /proc/PID/stat: 52 numbers and the process's name; /proc/uptime: two numbers
ANSWER_BYTES = 64  # of systemctl's answer: a PID


def ticks() -> int:
    """The kernel's clock ticks per second (the unit of a process's start time)."""
    return os.sysconf("SC_CLK_TCK") if "SC_CLK_TCK" in os.sysconf_names else 100


def started_from(stat: bytes, proc_root: str = "/proc") -> Optional[float]:
    """When a process started, in seconds since the epoch, from its stat line (field 22: clock ticks after boot) and
    the system's uptime now; None when either cannot be read."""
    fields = stat.rpartition(b")")[2].split()  # its name, in parentheses, may hold anything
    try:
        with open(os.path.join(proc_root, "uptime"), "rb") as handle:
            uptime = float(handle.read(MAX_STAT_BYTES).split()[0])
        since_boot = int(fields[19])  # field 22 of the line; the fields after the name start at field 3
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - uptime + since_boot / ticks()


def process_started(pid: int, proc_root: str = "/proc") -> Optional[float]:
    """When process ``pid`` started (``started_from``); None when it is gone or cannot be read."""
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), "rb") as handle:
            return started_from(handle.read(MAX_STAT_BYTES), proc_root)
    except OSError:
        return None


def changed_since(started: Optional[float], paths: Sequence[str]) -> List[str]:
    """Of ``paths``, those that changed more than a clock tick after ``started`` (a file that is not there never
    did); none when ``started`` is unknown."""
    if started is None:
        return []
    late = []
    for path in paths:
        try:
            changed = os.stat(path).st_mtime
        except OSError:
            continue
        if changed - started > 1.0 / ticks():
            late.append(path)
    return late


def service_age(unit: str, files: Sequence[str], run: CommandRunner,
                proc_root: str = "/proc") -> Dict[str, Any]:
    """What a systemd unit's main process is, and which of ``files`` (its configuration, unit file and program)
    changed after it started: ``unit``, ``running`` (None when systemd cannot be asked) and ``changed_since_start``."""
    check_unit(unit)
    code, out, _err = run(["systemctl", "show", "--property=MainPID", "--value", unit])
    text = out.strip()
    if code != 0 or len(text) > ANSWER_BYTES or not text.isdigit():
        return {"unit": unit, "running": None, "changed_since_start": []}
    pid = int(text)
    started = process_started(pid, proc_root) if pid > 0 else None
    return {"unit": unit, "running": started is not None, "changed_since_start": changed_since(started, files)}
