# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The one way kubecpu replaces a file: a temporary file beside it, then a rename over it.

A reader sees the old file or the new one, never a half-written one. A file that is replaced keeps its owner, group
and mode: kubecpu rewrites files that are the operator's (containerd's configuration can hold registry credentials and
is kept 0600; the kubelet writes its checkpoint 0600), and a rewrite must not change who may read them. ``durable``
adds the fsyncs that make the new file survive a crash (the file before the rename, the directory after): the
checkpoint needs them, the container cache and the metrics file (both rebuilt by the next pass) do not. Whatever
fails, the temporary file is removed: a full disk must not fill up with them. A writer killed with SIGKILL cannot
remove its own; the next one sweeps them (``sweep_temporaries``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from typing import Callable, List, Optional, Tuple

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_temporary(directory: str, name: str) -> Tuple[int, str]:
    """A new file ``.<name>.tmp-<random>`` in ``directory``, opened for writing, mode 0600 (tempfile.mkstemp's
    contract without the module: tempfile loads shutil, bz2 and lzma, 10 ms of the OCI hook's start-up)."""
    while True:
        tmp = os.path.join(directory, ".%s.tmp-%s" % (name, os.urandom(6).hex()))
        try:
            return os.open(tmp, _CREATE, 0o600), tmp
        except FileExistsError:
            continue


STALE_AFTER = 60.0  # seconds: a temporary file this old was left by a writer that was killed (a write takes ms)


def sweep_temporaries(directory: str, name: str, now: Optional[float] = None) -> List[str]:
    """Remove the temporary files that writers of ``name`` and the files named after it (``name.*``) left in
    ``directory`` when they were killed between creating and renaming them (SIGKILL runs no clean-up): those older
    than ``STALE_AFTER``, so that a write in progress is never touched. Returns the names removed."""
    now = time.time() if now is None else now
    removed: List[str] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        if not ((entry.name.startswith("." + name) and ".tmp-" in entry.name)
                or entry.name.startswith(name + ".prev-tmp-")):
            continue
        try:
            if entry.is_file(follow_symlinks=False) and now - entry.stat(follow_symlinks=False).st_mtime > STALE_AFTER:
                os.unlink(entry.path)
                removed.append(entry.name)
        except OSError:  # gone already, or not ours to remove
            continue
    return removed


def atomic_write(path: str, data: bytes, *, durable: bool, mode: int = 0o600,
                 before_rename: Optional[Callable[[], None]] = None) -> os.stat_result:
    """Replace ``path`` with ``data``; returns the new file's stat. Raises OSError, the temporary file removed.

    A file that is there keeps its owner, group and mode (permission bits with setuid, setgid and sticky): the
    temporary file gets them before the rename, and when they cannot be given (a writer that is not root replacing
    another user's file) nothing is replaced. ``mode`` is a new file's.
    ``before_rename`` runs once the data is written, just before the rename (the store keeps the previous
    generation there).
    """
    directory = os.path.dirname(os.path.abspath(path))
    try:
        current: Optional[os.stat_result] = os.stat(path)
    except FileNotFoundError:
        current = None
    fd, tmp = create_temporary(directory, os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as handle:
            _take_owner_and_mode(handle.fileno(), current, mode)
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
            written = os.fstat(handle.fileno())
        if before_rename is not None:
            before_rename()
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_directory(directory)
    return written


def _take_owner_and_mode(fd: int, current: Optional[os.stat_result], mode: int) -> None:
    """The temporary file as the file it replaces: its owner and group first (a change of owner clears setuid and
    setgid), then its mode; ``mode`` when there is no file."""
    if current is None:
        os.fchmod(fd, mode)
        return
    mine = os.fstat(fd)
    if (mine.st_uid, mine.st_gid) != (current.st_uid, current.st_gid):
        os.fchown(fd, current.st_uid, current.st_gid)
    os.fchmod(fd, stat.S_IMODE(current.st_mode))
