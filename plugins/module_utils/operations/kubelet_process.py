# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""Which process is the running kubelet, and its command line: the one its systemd unit runs (its cgroup), as root,
from the kubelet's binary; never the lowest PID a process named ``kubelet`` has (any user can name one so). Every
read from /proc is bounded and a vanished process is no kubelet (docs/SECURITY.md, a local user)."""

from __future__ import annotations

import os
from typing import List, NamedTuple, Optional, Tuple

from ..errors import ConfigError
from .kubelet_health import check_unit


KUBELET_UNIT = "kubelet.service"  # the unit the kubelet runs in, unless the module is told another
MAX_COMM_BYTES = 64  # a process's name: the kernel keeps 15 bytes and a newline
MAX_CGROUP_BYTES = 64 * 1024  # /proc/PID/cgroup: one line per v1 hierarchy (about a dozen), a path each
MAX_STATUS_BYTES = 64 * 1024  # /proc/PID/status: about 1.5 KiB, more with a long Groups line
MAX_CMDLINE_BYTES = 1 << 20  # a process's command line (the kernel caps what it shows at the argument space)
_DELETED = " (deleted)"  # what the kernel appends to /proc/PID/exe once the binary was replaced (an upgrade)
_UNIT_TYPES = (".service", ".scope")  # the units a process runs in


class KubeletProcess(NamedTuple):
    pid: int
    args: List[str]  # its command-line arguments, without the program


class KubeletSearch(NamedTuple):
    """What /proc shows of the kubelet of ``unit``: the process chosen (None when none passes the checks), every
    process that passes, and each process named kubelet that does not, with the first check it fails."""

    unit: str
    chosen: Optional[KubeletProcess]
    passed: List[int]
    refused: List[Tuple[int, str]]

    def notes(self) -> List[str]:
        said = ["PID %d is named kubelet but is not the kubelet of %s (%s): its command line is not read"
                % (pid, self.unit, why) for pid, why in self.refused]
        if self.chosen is not None and len(self.passed) > 1:
            said.append("PIDs %s all pass as the kubelet of %s with the same command line: PID %d (the lowest) is "
                        "read" % (", ".join(map(str, self.passed)), self.unit, self.chosen.pid))
        return said


class _TooLarge(Exception):
    pass


def kubelet_unit(service: str) -> str:
    """The kubelet's unit as its processes' cgroup names it: ``kubelet`` is ``kubelet.service`` (as systemctl reads
    it); a ConfigError unless it is a systemd unit name."""
    try:
        check_unit(service)
    except ConfigError:
        raise ConfigError("kubelet_service %r: not a systemd unit name" % (service,)) from None
    return service if service.endswith(_UNIT_TYPES) else service + ".service"


def _read(dir_fd: int, name: str, limit: int) -> bytes:
    """``name`` in a process's directory, at most ``limit`` bytes (_TooLarge beyond); OSError when it is gone."""
    fd = os.open(name, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0), dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise _TooLarge("its %s is larger than %d bytes" % (name, limit))
    return data


def _shown(text: str, most: int = 200) -> str:
    """A peer's text in a note: at most ``most`` characters, anything unprintable as ``?``."""
    cut = "".join(char if char.isprintable() else "?" for char in text[:most])
    return cut + "..." if len(text) > most else cut


def _in_unit(path: str, unit: str) -> bool:
    """Whether a cgroup path is the system manager's cgroup of ``unit``: slices, then the unit, nothing below it (a
    user's own manager runs its units below ``user@UID.service``, which is no slice)."""
    parts = path.split("/")
    return (len(parts) >= 2 and parts[0] == "" and parts[-1] == unit
            and all(part.endswith(".slice") and part != ".slice" for part in parts[1:-1]))


def _cgroup_refusal(data: bytes, unit: str) -> Optional[str]:
    """None when every systemd hierarchy (v2's ``0::`` line, v1's ``name=systemd``) puts the process in ``unit``."""
    paths = []
    for line in data.decode("utf-8", "replace").splitlines():
        hierarchy, _sep, rest = line.partition(":")
        controllers, sep, path = rest.partition(":")
        if sep and ((hierarchy == "0" and controllers == "") or "name=systemd" in controllers.split(",")):
            paths.append(path)
    if not paths:
        return "its cgroup file names no systemd hierarchy"
    wrong = [path for path in paths if not _in_unit(path, unit)]
    return "its cgroup is %s, not %s" % (_shown(wrong[0]), unit) if wrong else None


def _owner_refusal(data: bytes) -> Optional[str]:
    """None when the status file's Uid line says root, real and effective."""
    for line in data.decode("ascii", "replace").splitlines():
        if line.startswith("Uid:"):
            ids = line[4:].split()
            if len(ids) != 4 or not all(uid.isdigit() for uid in ids):
                return "its status has no readable Uid line"
            if ids[0] == ids[1] == "0":
                return None
            return "it runs as uid %s (effective %s), not root" % (ids[0], ids[1])
    return "its status has no Uid line"


def _exe_refusal(dir_fd: int, binaries: Tuple[str, ...], told: str) -> Optional[str]:
    """None when the process runs ``told`` (one of ``binaries``: as given and resolved), or ran it before an upgrade
    replaced it."""
    if not binaries:
        return "kubelet_binary %r is no path found on this node: its executable cannot be checked" % told
    exe = os.readlink("exe", dir_fd=dir_fd)
    running = exe[:-len(_DELETED)] if exe.endswith(_DELETED) else exe
    return None if running in binaries else "its executable is %s, not %s" % (_shown(exe), told)


def _examine(proc_root: str, pid: int, unit: str, binary: Optional[str],
             binaries: Tuple[str, ...]) -> Tuple[Optional[List[str]], Optional[str]]:
    """(its arguments, None) for the kubelet, (None, why) for a process named kubelet that is not it, (None, None)
    for any other process or one gone meanwhile. Every read goes through one handle on the process's directory, so
    a PID reused meanwhile reads as gone, never as another process."""
    try:
        dir_fd = os.open(os.path.join(proc_root, str(pid)), os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None, None
    try:
        try:
            if _read(dir_fd, "comm", MAX_COMM_BYTES).strip() != b"kubelet":
                return None, None
        except _TooLarge:
            return None, None  # no name the kernel keeps: not one named kubelet
        why = (_cgroup_refusal(_read(dir_fd, "cgroup", MAX_CGROUP_BYTES), unit)
               or _owner_refusal(_read(dir_fd, "status", MAX_STATUS_BYTES))
               or (_exe_refusal(dir_fd, binaries, binary) if binary is not None else None))
        if why is not None:
            return None, why
        try:
            data = _read(dir_fd, "cmdline", MAX_CMDLINE_BYTES)
        except _TooLarge:
            raise ConfigError("the kubelet of %s (PID %d) has a command line of more than %d bytes: give "
                              "kubelet_args" % (unit, pid, MAX_CMDLINE_BYTES)) from None
    except _TooLarge as exc:
        return None, str(exc)
    except (FileNotFoundError, ProcessLookupError):
        return None, None  # gone meanwhile
    except OSError as exc:
        return None, "it cannot be read: %s" % (exc.strerror or exc)
    finally:
        os.close(dir_fd)
    return [arg.decode("utf-8", "replace") for arg in data.split(b"\0")[1:] if arg], None


def find_kubelet(proc_root: str = "/proc", *, unit: str = KUBELET_UNIT,
                 binary: Optional[str] = None) -> KubeletSearch:
    """The running kubelet as its unit identifies it: a process named ``kubelet`` that systemd runs in ``unit``'s
    cgroup (v2's ``0::`` line and v1's ``name=systemd``), as root (real and effective uid 0), running ``binary`` when
    one is given (an absolute path, compared as given and with its links resolved). Any user can name a process
    kubelet; only root can put one in a system unit. Several that pass with one command line: the lowest PID; with
    different ones, a ConfigError (which one the kubelet is cannot be told)."""
    binaries: Tuple[str, ...] = ()
    if binary is not None and os.path.isabs(binary):
        binaries = tuple(sorted({os.path.normpath(binary), os.path.realpath(binary)}))
    try:
        pids = sorted(int(name) for name in os.listdir(proc_root) if name.isdigit())
    except OSError:
        return KubeletSearch(unit, None, [], [])
    found: List[KubeletProcess] = []
    refused: List[Tuple[int, str]] = []
    for pid in pids:
        args, why = _examine(proc_root, pid, unit, binary, binaries)
        if args is not None:
            found.append(KubeletProcess(pid, args))
        elif why is not None:
            refused.append((pid, why))
    if len({tuple(process.args) for process in found}) > 1:
        raise ConfigError("PIDs %s all pass as the kubelet of %s (root, in its cgroup%s) with different command "
                          "lines: which one's --feature-gates count cannot be told; give kubelet_args"
                          % (", ".join(str(process.pid) for process in found), unit,
                             ", running %s" % binary if binary is not None else ""))
    return KubeletSearch(unit, found[0] if found else None, [process.pid for process in found], refused)


def running_kubelet_args(proc_root: str = "/proc", *, unit: str = KUBELET_UNIT,
                         binary: Optional[str] = None) -> List[str]:
    """The command-line arguments of the running kubelet (``find_kubelet``; [] when none passes its checks, as when
    none runs): where its ``--feature-gates`` are."""
    chosen = find_kubelet(proc_root, unit=unit, binary=binary).chosen
    return chosen.args if chosen is not None else []
