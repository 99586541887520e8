# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""System daemons confined to the reserved CPUs with systemd drop-ins (docs/HOUSEKEEPING.md section 2).

One drop-in per unit, ``<systemd_dir>/<unit>.d/50-kubecpu-housekeeping.conf``: ``AllowedCPUs=<reserved>`` where cgroup
v2 offers the cpuset controller, else ``CPUAffinity=<reserved>`` for services (a slice or a scope has no equivalent
without cpuset: its drop-in is removed if one is there). Applied with one daemon reload.

Taking them out (``present=False``) is two steps, each followed by a reload: every drop-in is first widened to every
online CPU (systemd leaves a cgroup's cpuset as it last wrote it once ``AllowedCPUs=`` is gone while kubepods.slice
keeps the controller on, and the kernel refuses an empty cpuset while the cgroup has processes), then removed.

One call does every unit (the role's per-unit file, copy and stat loops were three module runs a unit); the reload is
the caller's callable (or None), so tests and check mode run without systemd.
"""

from __future__ import annotations

import os
import re
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

from ..atomic import atomic_write
from ..errors import ConfigError
from ..kubelet.cpuset import CPUSet
from .runtime_hook import read_text

DROPIN = "50-kubecpu-housekeeping.conf"
MAX_FILE_BYTES = 64 * 1024  # a drop-in, cgroup.controllers, sysfs' online list: a few bytes each
# what systemd accepts as a unit name (systemd.unit(5)), of the three kinds that take these settings
UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\@-]+\.(service|slice|scope)$")
CONFINED = "# kubecpu (kubelet_cpu_manager_housekeeping): system daemons on the reserved CPUs only\n"
WIDENED = "# kubecpu (kubelet_cpu_manager_housekeeping): every CPU again, before this file is removed\n"


class Outcome(NamedTuple):
    key: str  # AllowedCPUs or CPUAffinity
    dropins: Dict[str, str]  # path -> content: the drop-ins wanted (present), or the widened ones (absent)
    written: List[str]  # written (or widened), or in check mode would be
    removed: List[str]
    reloads: int  # daemon reloads done (check mode: none)
    diff: List[Dict[str, str]]  # for Ansible's --diff: each file's before and after

    @property
    def changed(self) -> bool:
        return bool(self.written or self.removed)


def setting_key(controllers: str) -> str:
    """AllowedCPUs when cgroup v2's root offers the cpuset controller (``cgroup.controllers``), else CPUAffinity."""
    return "AllowedCPUs" if "cpuset" in controllers.split() else "CPUAffinity"


def dropin_text(unit: str, key: str, cpus: str, header: str = CONFINED) -> str:
    """The drop-in for ``unit``, or "" when ``key`` does not apply to its kind (CPUAffinity= is a service's only)."""
    kind = unit.rsplit(".", 1)[1]
    if key == "CPUAffinity" and kind != "service":
        return ""
    return "%s[%s]\n%s=%s\n" % (header, kind.capitalize(), key, cpus)


def dropin_path(systemd_dir: str, unit: str) -> str:
    return os.path.join(systemd_dir, unit + ".d", DROPIN)


def _online(sysfs_root: str) -> CPUSet:
    """The node's online CPUs; a ConfigError naming the directory when they cannot be read."""
    online = CPUSet.parse((read_text(os.path.join(sysfs_root, "sys/devices/system/cpu/online"), MAX_FILE_BYTES)
                           or "").strip())
    if not online:
        raise ConfigError("cannot read the online CPUs from %s" % os.path.join(sysfs_root, "sys/devices/system/cpu"))
    return online


def apply(*, present: bool, cpus: Optional[str], units: Sequence[str], cgroup_root: str, sysfs_root: str,
          systemd_dir: str, check_mode: bool, reload: Optional[Callable[[], None]]) -> Outcome:
    """Make the drop-ins what ``present`` asks for; ``reload`` (None: the caller reloads) is called after each step
    that changed a file."""
    for unit in units:
        if not UNIT_NAME.match(unit):
            raise ConfigError("unit %r: not a systemd service, slice or scope name" % unit)
    key = setting_key(read_text(os.path.join(cgroup_root, "cgroup.controllers"), MAX_FILE_BYTES) or "")
    paths = {unit: dropin_path(systemd_dir, unit) for unit in units}
    before = {unit: read_text(path, MAX_FILE_BYTES) for unit, path in paths.items()}
    written: List[str] = []
    removed: List[str] = []
    diff: List[Dict[str, str]] = []
    reloads = 0

    def write(unit: str, text: str) -> None:
        if before[unit] == text:
            return
        written.append(paths[unit])
        diff.append({"before_header": paths[unit], "after_header": paths[unit], "before": before[unit] or "",
                     "after": text})
        if not check_mode:
            _write(paths[unit], text)

    def remove(unit: str) -> None:
        removed.append(paths[unit])
        diff.append({"before_header": paths[unit], "after_header": "%s (removed)" % paths[unit],
                     "before": before[unit] or "", "after": ""})
        if not check_mode:
            _remove(paths[unit])

    def reloaded() -> int:
        if check_mode or reload is None:
            return 0
        reload()
        return 1

    if present:
        confined = CPUSet.parse(cpus or "")
        if not confined:
            raise ConfigError("no reserved CPUs to confine the system daemons to (cpus is empty)")
        online = _online(sysfs_root)
        if not confined.issubset(online):  # a mistyped or stale reservation: not CPUs the daemons can run on
            raise ConfigError("cpus %s: CPU %s not online (online: %s), the daemons cannot be confined to it"
                              % (confined, confined.difference(online), online))
        text = str(confined)
        wanted = {unit: dropin_text(unit, key, text) for unit in units}
        for unit, content in wanted.items():
            if content:
                write(unit, content)
            elif before[unit] is not None:
                remove(unit)  # a slice's or scope's drop-in from when cgroup v2 offered cpuset
        if written or removed:
            reloads += reloaded()
        return Outcome(key, {paths[u]: c for u, c in wanted.items() if c}, written, removed, reloads, diff)

    every = str(_online(sysfs_root))
    there = [unit for unit in units if before[unit] is not None]
    widened = {unit: dropin_text(unit, _key_of(before[unit] or "", key), every, WIDENED) for unit in there}
    for unit, content in widened.items():
        if content:
            write(unit, content)
    if written:
        reloads += reloaded()  # the daemons get every CPU back before the files go
    for unit in there:
        remove(unit)
    if removed:
        reloads += reloaded()
    return Outcome(key, {paths[u]: c for u, c in widened.items() if c}, written, removed, reloads, diff)


def _key_of(text: str, default: str) -> str:
    """The setting a drop-in written before holds (cgroup v2's controllers may have changed since), else ``default``."""
    for name in ("AllowedCPUs", "CPUAffinity"):
        if re.search(r"^%s=" % name, text, re.M):
            return name
    return default


def _write(path: str, text: str) -> None:
    """The drop-in replaced whole (its directory made first, 0755 as systemd's own)."""
    try:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        atomic_write(path, text.encode("utf-8"), durable=True, mode=0o644)
    except OSError as exc:
        raise ConfigError("cannot write %s: %s" % (path, exc.strerror or exc)) from None


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ConfigError("cannot remove %s: %s" % (path, exc.strerror or exc)) from None
