# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Whether a running service predates its files: when systemd started a unit's main process and which of the files it
reads changed after that. A run cut off (Ctrl-C, a lost connection) between writing a service's configuration, unit
or program and restarting it leaves the service running what came before; the next run sees it here and restarts it,
though the files already say what it wants.

The start time is systemd's own (``ExecMainStartTimestamp``, as seconds since the epoch): a process's start time
from /proc is counted from the host's boot, which a container's virtualised /proc/uptime (lxcfs) does not show.
systemd's answer is a peer's output, parsed strictly; what it cannot say is None, never a guess."""

from __future__ import annotations

import os
import re
import time
from typing import Any, Dict, List, Optional, Sequence

from ..kubelet.discovery import CommandRunner
from .kubelet_health import check_unit

ANSWER_BYTES = 1024  # of systemctl's answer: three short properties
STAMP_SLACK = 1.0  # seconds: systemd's timestamps here are whole seconds; a file written within one is not later
_PROPERTY = re.compile(r"([A-Za-z]+)=(.*)\Z")
_PID = re.compile(r"[0-9]{1,10}\Z")
_STAMP = re.compile(r"@([0-9]{1,12})\Z")


def changed_since(started: Optional[float], paths: Sequence[str]) -> List[str]:
    """Of ``paths``, those that changed more than STAMP_SLACK after ``started`` (a file that is not there never did);
    none when ``started`` is unknown."""
    if started is None:
        return []
    late = []
    for path in paths:
        try:
            changed = os.stat(path).st_mtime
        except OSError:
            continue
        if changed - started > STAMP_SLACK:
            late.append(path)
    return late


def _properties(out: str) -> Optional[Dict[str, str]]:
    """systemctl show's ``Name=value`` lines; None for anything else."""
    if len(out) > ANSWER_BYTES:
        return None
    found = {}
    for line in out.splitlines():
        match = _PROPERTY.match(line)
        if match is None:
            return None
        found[match.group(1)] = match.group(2)
    return found


def service_age(unit: str, files: Sequence[str], run: CommandRunner) -> Dict[str, Any]:
    """What systemd says of ``unit``'s main process, and which of ``files`` (its configuration, unit file and
    program) changed after systemd started it: ``unit``, ``running`` (None when systemd cannot be asked),
    ``changed_since_start``, and ``needs_reload`` (its unit file changed since systemd loaded it)."""
    check_unit(unit)
    code, out, _err = run(["systemctl", "show", "--timestamp=unix", "--property=MainPID",
                           "--property=ExecMainStartTimestamp", "--property=NeedDaemonReload", unit])
    shown = _properties(out) if code == 0 else None
    unknown: Dict[str, Any] = {"unit": unit, "running": None, "changed_since_start": [], "needs_reload": False}
    if shown is None or not _PID.match(shown.get("MainPID", "")):
        return unknown
    needs_reload = shown.get("NeedDaemonReload") == "yes"
    if int(shown["MainPID"]) == 0:
        return dict(unknown, running=False, needs_reload=needs_reload)
    stamp = _STAMP.match(shown.get("ExecMainStartTimestamp", ""))
    started = float(stamp.group(1)) if stamp else None
    if started is not None and started > time.time() + STAMP_SLACK:
        started = None  # a start after now: the clock moved back since; nothing is said to have changed
    return {"unit": unit, "running": True, "changed_since_start": changed_since(started, files),
            "needs_reload": needs_reload}
