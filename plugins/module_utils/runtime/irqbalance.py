# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""irqbalance, told which CPUs it must leave alone (docs/HOUSEKEEPING.md): the running daemon through its own socket,
its next start through ``IRQBALANCE_BANNED_CPULIST`` in its environment file. Never a restart.

The daemon listens on ``/run/irqbalance/irqbalance<PID>.sock`` and takes one command per connection from root (the
sender's credentials travel with the message, SCM_CREDENTIALS): ``settings cpus 4,5,6`` (or ``NULL``) replaces its
banned CPUs and makes it rescan; ``setup`` answers ``SLEEP <s> ... BANNED <mask>``.
"""

from __future__ import annotations

import os
import re
import socket
import struct
from typing import List, Optional, Tuple

from ..atomic import atomic_write
from ..errors import CPUSetError, HousekeepingError
from ..kubelet.cpuset import CPUSet
from .irq import read_bounded

SOCKET_DIR = "/run/irqbalance"
ENV_FILE = "/etc/default/irqbalance"
ENV_NAME = "IRQBALANCE_BANNED_CPULIST"
TIMEOUT = 2.0  # seconds for a connection, a send and the whole reply
MAX_REPLY_BYTES = 64 * 1024  # "setup": the sleep, the banned IRQs (a few per line) and the banned mask
MAX_ENV_FILE_BYTES = 64 * 1024
_SOCKET = re.compile(r"irqbalance(\d+)\.sock\Z")
_BANNED = re.compile(r"BANNED\s+([0-9a-fA-F,]+)")
MARK = "# kubecpu: the CPUs it holds exclusively (rewritten by kubecpu, removed when none)"


class IrqBalance:
    def __init__(self, socket_dir: str = SOCKET_DIR, env_file: str = ENV_FILE, timeout: float = TIMEOUT,
                 proc: str = "/proc") -> None:
        self.socket_dir = socket_dir
        self.env_file = env_file
        self.timeout = timeout
        self.proc = proc

    def running(self) -> Optional[Tuple[int, str]]:
        """The running daemon's PID and socket (the newest one whose process lives); None when none runs."""
        try:
            names = os.listdir(self.socket_dir)
        except OSError:
            return None
        found = [(int(m.group(1)), os.path.join(self.socket_dir, name))
                 for name, m in ((name, _SOCKET.match(name)) for name in names) if m]
        alive = [(pid, path) for pid, path in found if os.path.exists(os.path.join(self.proc, str(pid)))]
        return max(alive) if alive else None

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

    def persist(self, cpus: CPUSet, apply: bool = True) -> bool:
        """``IRQBALANCE_BANNED_CPULIST`` in the environment file for the daemon's next start (the line removed when
        ``cpus`` is empty). Only where the file exists (irqbalance is installed); True when it changes."""
        data = read_bounded(self.env_file, MAX_ENV_FILE_BYTES)
        if data is None:
            return False
        if len(data) > MAX_ENV_FILE_BYTES:
            raise HousekeepingError("%s is larger than %d bytes: left alone" % (self.env_file, MAX_ENV_FILE_BYTES))
        text = data.decode("utf-8", "replace")
        lines = [line for line in text.splitlines()
                 if line != MARK and not line.lstrip().startswith(ENV_NAME + "=")]
        if cpus:
            lines += [MARK, "%s=%s" % (ENV_NAME, cpus)]
        new = "\n".join(lines) + "\n"
        if new == text:
            return False
        if apply:
            try:
                atomic_write(self.env_file, new.encode("utf-8"), durable=True,
                             mode=os.stat(self.env_file).st_mode & 0o7777)
            except OSError as exc:
                raise HousekeepingError("cannot write %s: %s" % (self.env_file, exc.strerror)) from None
        return True
