# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""irqbalance, told which CPUs it must leave alone (docs/HOUSEKEEPING.md): the running daemon through its own socket,
its next start through its environment file. Never a restart.

The daemon listens on ``/run/irqbalance/irqbalance<PID>.sock`` and takes one command per connection from root (the
sender's credentials travel with the message, SCM_CREDENTIALS): ``settings cpus 4,5,6`` (or ``NULL``) replaces its
banned CPUs and makes it rescan; ``setup`` answers ``SLEEP <s> ... BANNED <mask>``.

Its own bans (cputree.c) come from its environment: ``IRQBALANCE_BANNED_CPUS`` (a mask, read first), else
``IRQBALANCE_BANNED_CPULIST``, else the kernel's isolated and nohz_full CPUs. A ban sent through the socket replaces
them, so kubecpu sends its CPUs together with the daemon's own (``own_bans``). The environment file is Debian's
``/etc/default/irqbalance`` or RHEL's and SUSE's ``/etc/sysconfig/irqbalance``, whichever exists; kubecpu appends its
own marked block setting the variable the daemon reads (a later assignment wins), merged with the operator's value,
and removes the block byte for byte when it holds nothing: the operator's lines, their encoding and line ends are
never touched.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import struct
from typing import List, Optional, Sequence, Tuple

from ..atomic import atomic_write
from ..errors import CPUSetError, HousekeepingError
from ..kubelet.cpuset import CPUSet
from .irq import format_mask, read_bounded

SOCKET_DIR = "/run/irqbalance"
ENV_FILE = "/etc/default/irqbalance"
ENV_FILES = (ENV_FILE, "/etc/sysconfig/irqbalance")  # Debian; RHEL and SUSE
ENV_NAME = "IRQBALANCE_BANNED_CPULIST"
MASK_NAME = "IRQBALANCE_BANNED_CPUS"  # read before the list (deprecated, still honoured)
TIMEOUT = 2.0  # seconds for a connection, a send and the whole reply
MAX_REPLY_BYTES = 64 * 1024  # "setup": the sleep, the banned IRQs (a few per line) and the banned mask
MAX_ENV_FILE_BYTES = 64 * 1024
_SOCKET = re.compile(r"irqbalance(\d+)\.sock\Z")
_BANNED = re.compile(r"BANNED\s+([0-9a-fA-F,]+)")
MARK = "# kubecpu: the CPUs it holds exclusively (rewritten by kubecpu, removed when none)"
_MARK_BYTES = MARK.encode("ascii")
_MARK_JOINED = _MARK_BYTES + b" [and the line end before it]"  # the file had none at its end: removed with the block


class IrqBalance:
    def __init__(self, socket_dir: str = SOCKET_DIR, env_file: str = ENV_FILE, timeout: float = TIMEOUT,
                 proc: str = "/proc", *, env_files: Sequence[str] = (), cpu_dir: str = "/sys/devices/system/cpu") \
            -> None:
        """``env_file``, or the first of ``env_files`` that exists; ``cpu_dir``: where the kernel lists the isolated
        and nohz_full CPUs."""
        existing = [path for path in env_files if os.path.exists(path)]
        self.socket_dir = socket_dir
        self.env_file = existing[0] if existing else (env_files[0] if env_files else env_file)
        self.timeout = timeout
        self.proc = proc
        self.cpu_dir = cpu_dir

    def running(self) -> Optional[Tuple[int, str]]:
        """The running daemon's PID and socket: the newest socket whose process is irqbalance (a dead daemon's socket
        whose PID was reused by another program does not hide the live one), else the newest whose process lives;
        None when none runs."""
        try:
            names = os.listdir(self.socket_dir)
        except OSError:
            return None
        found = [(int(m.group(1)), os.path.join(self.socket_dir, name))
                 for name, m in ((name, _SOCKET.match(name)) for name in names) if m]
        alive = [(pid, path) for pid, path in found if os.path.isdir(os.path.join(self.proc, str(pid)))]
        named = [(pid, path) for pid, path in alive if self._comm(pid) == b"irqbalance"]
        return max(named or alive) if alive else None

    def _comm(self, pid: int) -> bytes:
        try:
            return (read_bounded(os.path.join(self.proc, str(pid), "comm"), 64) or b"").strip()
        except HousekeepingError:
            return b""

    def started_with_bans(self, pid: int) -> bool:
        """Whether the daemon's own environment (what ``settings cpus NULL`` falls back to) bans CPUs."""
        data = read_bounded(os.path.join(self.proc, str(pid), "environ"), MAX_ENV_FILE_BYTES) or b""
        names = (ENV_NAME.encode("ascii"), MASK_NAME.encode("ascii"))
        return any(name in names and value for name, _eq, value in (item.partition(b"=") for item in data.split(b"\0")))

    def own_bans(self) -> CPUSet:
        """The CPUs irqbalance bans by itself: its environment file's (the operator's lines: the mask first, else the
        list), else the kernel's isolated and nohz_full CPUs."""
        configured = _configured(_operator_lines(self._env_bytes() or b""))
        if configured is not None:
            return configured
        found = CPUSet()
        for name in ("isolated", "nohz_full"):
            data = read_bounded(os.path.join(self.cpu_dir, name), MAX_ENV_FILE_BYTES)
            with contextlib.suppress(CPUSetError, UnicodeDecodeError):
                found = found.union(CPUSet.parse(data.decode("ascii").strip()) if data and data.strip() else CPUSet())
        return found

    def _ask(self, path: str, command: str, reply: bool) -> bytes:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.settimeout(self.timeout)
            sock.connect(path)
            credentials = struct.pack("iII", os.getpid(), os.getuid(), os.getgid())
            ancillary = [(socket.SOL_SOCKET, getattr(socket, "SCM_CREDENTIALS", 2), credentials)]
            sock.sendmsg([command.encode("ascii")], ancillary)
            if not reply:
                return b""
            chunks: List[bytes] = []
            size = 0
            while True:
                chunk = sock.recv(8192)
                if not chunk:
                    return b"".join(chunks)
                size += len(chunk)
                if size > MAX_REPLY_BYTES:
                    raise HousekeepingError("irqbalance (%s) answered %r with more than %d bytes"
                                            % (path, command, MAX_REPLY_BYTES))
                chunks.append(chunk)
        except OSError as exc:
            raise HousekeepingError("cannot tell irqbalance (%s) %r: %s"
                                    % (path, command, exc.strerror or exc)) from None
        finally:
            sock.close()

    def ban(self, path: str, cpus: CPUSet) -> None:
        """The running daemon's banned CPUs become ``cpus`` (none: it may use every CPU again)."""
        self._ask(path, "settings cpus %s" % (",".join(str(c) for c in cpus) if cpus else "NULL"), reply=False)

    def banned(self, path: str) -> Optional[CPUSet]:
        """The CPUs the running daemon keeps interrupts off, as it says (None when its answer has no mask)."""
        found = _BANNED.search(self._ask(path, "setup", reply=True).decode("ascii", "replace"))
        try:
            return None if found is None else CPUSet.parse_mask(found.group(1))
        except CPUSetError:
            return None

    def _env_bytes(self) -> Optional[bytes]:
        data = read_bounded(self.env_file, MAX_ENV_FILE_BYTES)
        if data is not None and len(data) > MAX_ENV_FILE_BYTES:
            raise HousekeepingError("%s is larger than %d bytes: left alone" % (self.env_file, MAX_ENV_FILE_BYTES))
        return data

    def persist(self, cpus: CPUSet, apply: bool = True) -> bool:
        """kubecpu's block in the environment file for the daemon's next start: the variable it reads set to ``cpus``
        and the operator's own bans (none held: the block removed, the file as it was, byte for byte). Only where the
        file exists (irqbalance is installed); True when it changes."""
        data = self._env_bytes()
        if data is None:
            return False
        lines = _operator_lines(data)
        new = b"".join(lines)
        if cpus:
            ending = b"\r\n" if lines and lines[0].endswith(b"\r\n") else b"\n"
            joined = bool(new) and not new.endswith(b"\n")
            own = _configured(lines)
            merged = cpus.union(own) if own is not None else cpus
            new += ending if joined else b""
            block = [_MARK_JOINED if joined else _MARK_BYTES, ("%s=%s" % (ENV_NAME, merged)).encode("ascii")]
            if any(_assigns(line, MASK_NAME) for line in lines):  # read first: kubecpu's value must be there too
                block.append(("%s=%s" % (MASK_NAME, format_mask(merged))).encode("ascii"))
            new += b"".join(line + ending for line in block)
        if new == data:
            return False
        if apply:
            try:
                atomic_write(self.env_file, new, durable=True)  # the file keeps its owner and mode
            except OSError as exc:
                raise HousekeepingError("cannot write %s: %s" % (self.env_file, exc.strerror)) from None
        return True


def _assigns(line: bytes, name: str) -> bool:
    return line.lstrip().startswith(name.encode("ascii") + b"=")


def _operator_lines(data: bytes) -> List[bytes]:
    """The file's lines (each with its own end) without kubecpu's block: the mark and the assignments after it (and
    the line end kubecpu added before it, where the file had none)."""
    lines = data.splitlines(keepends=True)
    kept: List[bytes] = []
    in_block = False
    for line in lines:
        bare = line.rstrip(b"\r\n")
        if bare in (_MARK_BYTES, _MARK_JOINED):
            if bare == _MARK_JOINED and kept:
                kept[-1] = kept[-1].rstrip(b"\r\n")
            in_block = True
            continue
        if in_block and (_assigns(bare, ENV_NAME) or _assigns(bare, MASK_NAME)):
            continue
        in_block = False
        kept.append(line)
    return kept


def _configured(lines: List[bytes]) -> Optional[CPUSet]:
    """The operator's own bans in the environment file, as irqbalance reads them (the last assignment of each
    variable; the mask before the list); None when neither is set."""
    values = {}
    for line in lines:
        bare = line.strip()
        for name in (MASK_NAME, ENV_NAME):
            if _assigns(bare, name):
                values[name] = bare.split(b"=", 1)[1].strip().strip(b"\"'").decode("ascii", "replace")
    try:
        if values.get(MASK_NAME):
            return CPUSet.parse_mask(values[MASK_NAME])
        if values.get(ENV_NAME):
            return CPUSet.parse(values[ENV_NAME])
    except CPUSetError:
        return None
    return None
