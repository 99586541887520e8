# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""irqbalance, told which CPUs it must leave alone (docs/HOUSEKEEPING.md): the running daemon through its own socket,
its next start through its environment file. Never a restart.

The daemon listens on ``/run/irqbalance/irqbalance<PID>.sock`` and takes one command per connection from root (the
sender's credentials travel with the message, SCM_CREDENTIALS): ``settings cpus 4,5,6`` (or ``NULL``) replaces its
banned CPUs and makes it rescan; ``setup`` answers ``SLEEP <s> ... BANNED <mask>``.

Its own bans (cputree.c) come from its environment: ``IRQBALANCE_BANNED_CPUS`` (a mask, read first), else
``IRQBALANCE_BANNED_CPULIST``, else the kernel's isolated and nohz_full CPUs. A ban sent through the socket replaces
them, so kubecpu sends its CPUs together with the daemon's own (``own_bans``). The environment file is the one the
distribution's irqbalance service reads (``env_files``): Debian's ``/etc/default/irqbalance``, RHEL's and SUSE's
``/etc/sysconfig/irqbalance``. kubecpu appends its own marked block setting the variable the daemon reads (a later
assignment wins), merged with the operator's value, and removes the block byte for byte when it holds nothing: the
operator's lines, their encoding and line ends are never touched.

The file is rewritten in place (``rewrite_in_place``), not replaced by a rename: the agent's unit makes only this
file writable (systemd's ``ReadWritePaths=`` binds it onto itself; a temporary file beside it cannot be created
and nothing can be renamed over it), and the file keeps its inode, so its owner, mode, SELinux label and links.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
import stat
import struct
from typing import List, Optional, Sequence, Tuple

from ..errors import CPUSetError, HousekeepingError
from ..kubelet.cpuset import CPUSet
from .irq import format_mask, read_bounded

SOCKET_DIR = "/run/irqbalance"
ENV_FILE = "/etc/default/irqbalance"  # Debian's family
SYSCONFIG_FILE = "/etc/sysconfig/irqbalance"  # RHEL's and SUSE's
ENV_FILES = (ENV_FILE, SYSCONFIG_FILE)
DEBIAN_MARK = "/etc/debian_version"  # every dpkg-based distribution ships it (base-files)
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
        new, kept = with_block(data, cpus)
        if new == data:
            return False
        if apply:
            rewrite_in_place(self.env_file, data, new, kept)
        return True


def with_block(data: bytes, cpus: CPUSet) -> Tuple[bytes, int]:
    """The environment file ``data`` with kubecpu's block for ``cpus`` (none: without it), and how many bytes at its
    start are the operator's (its lines, kubecpu's block taken out; the block follows them)."""
    lines = _operator_lines(data)
    new = b"".join(lines)
    kept = len(new)
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
    return new, kept


def env_files(root: str = "/") -> List[str]:
    """The environment files the distribution's irqbalance service reads, below ``root``, in the order to look for
    them (``IrqBalance`` writes the first that exists): on Debian's family (Debian, Ubuntu and the others that ship
    ``/etc/debian_version``) ``/etc/default/irqbalance`` only; elsewhere RHEL's and SUSE's
    ``/etc/sysconfig/irqbalance``, then Debian's. The agent role makes the same choice from ``ansible_os_family``
    for the files its unit lets the agent write."""
    below = [os.path.join(root, path.lstrip("/")) for path in (ENV_FILE, SYSCONFIG_FILE, DEBIAN_MARK)]
    return below[:1] if os.path.exists(below[2]) else [below[1], below[0]]


def rewrite_in_place(path: str, old: bytes, new: bytes, kept: int) -> None:
    """``path``, which held ``old``, holds ``new`` (written through, fsync'd): rewritten in its own inode, from the
    first byte that changes. ``kept``: the operator's part, the first ``kept`` bytes of ``new``.

    A writer stopped between two steps (killed, the machine down) leaves every line of the operator's whole
    (``in_place_steps``). The file is read again through the handle that writes it: one changed meanwhile is left
    alone (its offsets are no longer ``old``'s); the next pass reads it again.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        hint = _READ_ONLY_HINT if exc.errno == errno.EROFS else ""
        raise HousekeepingError("cannot write %s: %s%s" % (path, exc.strerror or exc, hint)) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise HousekeepingError("cannot write %s: not a regular file" % path)
        if _read_all(fd, MAX_ENV_FILE_BYTES + 1) != old:
            raise HousekeepingError("%s changed while kubecpu was rewriting it: left alone, the next pass rewrites it"
                                    % path)
        for offset, data in in_place_steps(old, new, kept):
            if data is None:
                os.ftruncate(fd, offset)
            else:
                _write_all(fd, data, offset)
        os.fsync(fd)
    except OSError as exc:
        raise HousekeepingError("cannot write %s: %s" % (path, exc.strerror or exc)) from None
    finally:
        os.close(fd)


# EROFS: the agent's unit binds the file as it was when the agent started; one installed or replaced since is not
_READ_ONLY_HINT = (" (the agent's unit lets it write the file that was there when it started: restart the agent once "
                   "irqbalance's file is installed or replaced)")


def in_place_steps(old: bytes, new: bytes, kept: int) -> List[Tuple[int, Optional[bytes]]]:
    """How ``old`` becomes ``new`` in place, in order: ``(offset, data)`` writes and ``(size, None)`` truncations.
    ``kept``: the operator's part, the first ``kept`` bytes of ``new`` (kubecpu's block follows it).

    - ``new`` extends ``old`` (a block added): one write at the end; ``old`` cut to ``new`` (the block removed): one
      truncation.
    - Only kubecpu's lines change (its block is last, as kubecpu leaves it): the file is first cut back to the start
      of the first line that changes, then the rest is written. Stopped in between, the file is the operator's lines
      with kubecpu's block missing or cut at a line end, which the next pass writes again.
    - The operator's lines after kubecpu's old block move up (someone added lines below it): the new content is
      written first, then the file is cut to its length. Stopped in between, every line of ``new`` is there, and
      when the block got shorter the last bytes of ``old`` follow it (a copy of the end of the operator's lines,
      left for the operator: kubecpu never removes what is not its block).

    A write is one system call of the changed lines (a few hundred bytes), which a crash during it may tear.
    """
    same = 0
    for a, b in zip(old, new):
        if a != b:
            break
        same += 1
    if same == len(old):
        return [(same, new[same:])]
    if same == len(new):
        return [(same, None)]
    start = old.rfind(b"\n", 0, same) + 1
    if start >= kept:
        return [(start, None), (start, new[start:])]
    return [(same, new[same:])] + ([(len(new), None)] if len(new) < len(old) else [])


def _read_all(fd: int, limit: int) -> bytes:
    chunks: List[bytes] = []
    size = 0
    while size < limit:
        chunk = os.pread(fd, limit - size, size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done


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
