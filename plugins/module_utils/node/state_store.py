# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The checkpoint on disk, treated like a database.

* Every read-modify-write runs under an exclusive ``flock`` on ``<file>.lock``, so the Ansible modules and
  the node agent never interleave.
* Writes are atomic and durable: a temporary file in the same directory, fsync, rename over the file,
  fsync the directory. The file is mode 0600. The previous generation stays beside it as ``<file>.prev``.
* A corrupt or mismatched file is reported (``CheckpointError`` naming the file) and left untouched.
  Recovery is explicit: ``reset()`` moves the file aside to ``<file>.reset-<UTC time>``.
* The kubelet's own file is only ever opened read-only.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import threading
import time
from typing import Iterator, List, Mapping, Optional, Set, Tuple

from ..atomic import atomic_write, fsync_directory, sweep_temporaries
from ..errors import CheckpointError, RestoreFailure, StaleCheckpointError, StoreError
from ..kubelet.checkpoint_formats import read, write
from ..kubelet.kubelet_versions import DEFAULT, KubeletVersion
from ..kubelet.state import CPUState
from .hook_view import identity, view_path, write_view
from .state_paths import DEFAULT_PATH, KUBELET_PATH

# seconds a waiter waits for the lock while nobody takes it (a holder that is stuck or dead); a waiter with
# ``hard_timeout`` (the OCI hook, the NRI plugin: the runtime waits for their answer) waits no longer in all
LOCK_TIMEOUT = 60.0
# seconds between two tries for the lock: the first wait, doubled after each try up to the second. Each try is a
# Python step; at a fixed 5 ms twenty-five waiting module runs on a starved node spent the CPU share the holder needed
LOCK_POLL = (0.005, 0.05)
LOCK_BEAT = 1.0  # seconds between two touches of the lock file by a holder that keeps it (a sign of life to waiters)
ABSENT = "absent"  # the fingerprint of a file that does not exist


def fingerprint(data: Optional[bytes]) -> str:
    """What a plan was made from (``sha256:<hex>`` of the file's bytes, ``absent``): a write of that plan goes ahead
    only while the file still has this fingerprint (``StateStore.expect``)."""
    return ABSENT if data is None else "sha256:" + hashlib.sha256(data).hexdigest()


def opened_read_only(path: str, read_only: Optional[bool] = None, *, kubelet_stopped: bool = False,
                     kubelet_path: str = KUBELET_PATH) -> bool:
    """Whether a store on ``path`` is read-only: when asked, and always for the kubelet's own checkpoint (the default
    path, or ``kubelet_path``: where the configuration says the kubelet keeps it, a kubelet with ``--root-dir``)
    unless the caller has stopped the kubelet."""
    real = os.path.realpath(os.path.abspath(path))
    is_kubelets = real in (KUBELET_PATH, os.path.realpath(os.path.abspath(kubelet_path))) and not kubelet_stopped
    return bool(read_only) or is_kubelets


def _touch(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.utime(fd)


class _Beat:
    """One thread per process that touches the lock file of every lock the process holds every ``LOCK_BEAT`` seconds:
    their waiters see the holder alive. A thread started and joined for each hold made ``locked()`` 463 us instead of
    19 (the agent takes the lock every pass); with this one it is 12 us (measured 2026-12-02, 5,000 holds)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.lock = threading.Lock()
        self.held: Set[int] = set()
        self.thread: Optional[threading.Thread] = None

    def hold(self, fd: int) -> None:
        with self.lock:
            self.held.add(fd)
            if self.thread is None or not self.thread.is_alive():  # the first hold (or the first after a fork)
                self.thread = threading.Thread(target=self._run, name="kubecpu-lock-beat", daemon=True)
                self.thread.start()

    def release(self, fd: int) -> None:
        with self.lock:  # before the descriptor is closed: a number reused later is never touched
            self.held.discard(fd)

    def _run(self) -> None:
        while True:
            time.sleep(LOCK_BEAT)
            with self.lock:
                for fd in self.held:
                    _touch(fd)


_BEAT = _Beat()
os.register_at_fork(after_in_child=_BEAT.reset)  # a child holds nothing yet, and no thread of the parent's lock


class StateStore:
    """One checkpoint file for one configured policy."""

    def __init__(self, path: str = DEFAULT_PATH, policy_name: str = "static", read_only: Optional[bool] = None,
                 lock_timeout: float = LOCK_TIMEOUT,
                 initial_containers: Optional[Mapping[str, Tuple[str, str]]] = None, *,
                 kubelet_stopped: bool = False, kubelet: KubeletVersion = DEFAULT, hard_timeout: bool = False,
                 kubelet_path: str = KUBELET_PATH) -> None:
        """``kubelet_stopped``: the caller has stopped the kubelet, so its own checkpoint may be written (a rewrite,
        a rebuild, a reset); otherwise that file is only ever read. ``hard_timeout``: ``lock_timeout`` bounds the
        whole wait for the lock, not only a wait in which nobody took it (see ``locked``)."""
        self.path = os.path.abspath(path)
        self.policy_name = policy_name
        self.kubelet = kubelet  # whose format is read and written
        self.read_only = opened_read_only(path, read_only, kubelet_stopped=kubelet_stopped, kubelet_path=kubelet_path)
        self.lock_timeout = lock_timeout
        self.hard_timeout = hard_timeout
        self.initial_containers = initial_containers
        self.directory = os.path.dirname(self.path)
        # The bytes last read or written and their state: a process that reads the file it wrote (the
        # agent, every pass) compares bytes instead of decoding them again.
        self._known: Optional[Tuple[bytes, CPUState]] = None
        self._depth = 0  # how deeply this process holds the lock (locked() is reentrant)
        self.identity: Optional[List[int]] = None  # of the file last read or written (node.hook_view)
        self.last_read: Optional[bytes] = None  # the bytes the last read found (None: no file), for ``fingerprint``
        self._swept = False

    @property
    def previous_path(self) -> str:
        return self.path + ".prev"

    # --- locking -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive lock for a read-modify-write (shared for a read-only store, no lock file created). Reentrant: a
        holder's nested ``locked()`` (the OCI hook allocates, then writes cgroups, under one lock) does not wait for
        itself.

        A holder touches the lock file's mtime when it gets the lock and every ``LOCK_BEAT`` seconds while it keeps
        it, so a waiter tells a busy lock from one whose holder is stuck: it gives up after ``lock_timeout`` seconds
        without a touch (with ``hard_timeout``, after ``lock_timeout`` seconds in all). A dead holder releases the lock
        with its descriptor; a live one is bounded by the timeout of each call it makes. Before, the whole wait was
        bounded: on a starved node (two CPUs behind four busier processes, 2026-12-02) module runs waiting beside the
        agent failed after 60 s while one run inspected a hundred new containers through a stand-in crictl under the
        lock, and, the tries not being fair, while the lock went from one waiter to the next.

        A hold that created the lock file and ends in an error removes it, still holding it: a failed command leaves
        nothing behind. A waiter that then gets the lock of a removed file sees that it is no longer the lock file
        and waits on the one there now (every taker checks, so two never hold the lock at once)."""
        if self.read_only or self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        fd, created = self._open_lock()
        try:
            deadline = time.monotonic() + self.lock_timeout
            taken = None  # the lock file's mtime when last looked at: a new one is a new holder
            pause = LOCK_POLL[0]
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise StoreError("cannot lock %s.lock: %s" % (self.path, exc.strerror)) from None
                    now = time.monotonic()
                    if not self.hard_timeout:
                        stamp = os.fstat(fd).st_mtime_ns
                        if stamp != taken:
                            taken, deadline = stamp, now + self.lock_timeout
                    if now > deadline:
                        how = "" if self.hard_timeout else " with no sign of life"
                        raise StoreError("timed out after %.0fs waiting for the lock on %s (another kubecpu process "
                                         "holds it%s)" % (self.lock_timeout, self.path, how)) from None
                    time.sleep(pause)
                    pause = min(2 * pause, LOCK_POLL[1])
                    continue
                if self._is_the_lock_file(fd):
                    break
                os.close(fd)  # its holder removed it: the lock is the file there now
                fd = -1
                fd, created = self._open_lock()
            _touch(fd)  # taken: a waiter sees the lock change hands
            if not self.hard_timeout:  # a hard holder (the hook, the NRI plugin) keeps it only briefly
                _BEAT.hold(fd)
            self._depth = 1
            try:
                yield
            except BaseException:
                if created:  # nothing of this failed hold stays behind (a waiter moves to the next file)
                    with contextlib.suppress(OSError):
                        os.unlink(self.path + ".lock")
                raise
            finally:
                self._depth = 0
                _BEAT.release(fd)
        finally:
            if fd >= 0:
                os.close(fd)  # closing the descriptor releases the lock

    def _open_lock(self) -> Tuple[int, bool]:
        """The lock file's descriptor and whether this open created the file; the state directory is created when
        it is missing."""
        lock = self.path + ".lock"
        directory_made = False
        while True:
            try:
                return os.open(lock, os.O_RDWR), False
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StoreError("cannot open lock file %s: %s" % (lock, exc.strerror)) from None
            try:
                return os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600), True
            except FileExistsError:  # another process made it between the two opens: open that one
                continue
            except FileNotFoundError:
                if directory_made:
                    raise StoreError("cannot open lock file %s: its directory vanished" % lock) from None
                self._ensure_directory()
                directory_made = True
            except OSError as exc:
                raise StoreError("cannot open lock file %s: %s" % (lock, exc.strerror)) from None

    def _is_the_lock_file(self, fd: int) -> bool:
        """Whether ``fd`` is still the file at the lock's path (its holder removes a lock file it made and failed)."""
        try:
            there = os.stat(self.path + ".lock")
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (there.st_dev, there.st_ino) == (held.st_dev, held.st_ino)

    def _ensure_directory(self) -> None:
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise StoreError("cannot create state directory %s: %s" % (self.directory, exc.strerror)) from None

    # --- reading -------------------------------------------------------------------------------
    def read_bytes(self) -> Optional[bytes]:
        try:
            with open(self.path, "rb") as handle:
                self.identity = identity(os.fstat(handle.fileno()))
                self.last_read = handle.read()
                return self.last_read
        except FileNotFoundError:
            self.identity = self.last_read = None
            return None
        except OSError as exc:
            raise StoreError("cannot read state file %s: %s" % (self.path, exc.strerror)) from None

    def load(self) -> Optional[CPUState]:
        """The restored state, None when the file does not exist; CheckpointError when it is unusable."""
        data = self.read_bytes()
        if data is None:
            return None
        if self._known is not None and self._known[0] == data:
            return self._known[1].copy()
        try:
            state = read(data, self.policy_name, self.kubelet, self.initial_containers).state
        except RestoreFailure as exc:
            raise CheckpointError(self.path, str(exc)) from None
        self._known = (data, state.copy())
        return state

    def generation(self) -> Optional[List[int]]:
        """The file's identity now (a stat, no read; None: no file). Every save is a rename, so another writer's save
        changes it: a pass that pushes outside the lock asks whether the state it pushes is still the file's."""
        try:
            return identity(os.stat(self.path))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError("cannot stat state file %s: %s" % (self.path, exc.strerror)) from None

    def load_or_new(self) -> CPUState:
        """As the kubelet restores: a missing file means a fresh state for the configured policy."""
        state = self.load()
        return state if state is not None else CPUState(self.policy_name)

    def expect(self, planned_from: Optional[str]) -> Optional[bytes]:
        """The file's bytes (None: no file); StaleCheckpointError when ``planned_from`` is given and the file's
        fingerprint is another. Under the lock, right before the write it guards."""
        data = self.read_bytes()
        if planned_from is not None and fingerprint(data) != planned_from:
            raise StaleCheckpointError(self.path, planned_from, fingerprint(data))
        return data

    # --- writing -------------------------------------------------------------------------------
    def save(self, state: CPUState) -> bool:
        """Write ``state`` atomically and durably; False when the file already holds exactly that."""
        if self.read_only:
            raise StoreError("state file %s is read-only (the kubelet's own checkpoint is never written by "
                             "kubecpu)" % self.path)
        data = write(state, self.kubelet)
        current = self.read_bytes()
        if current == data:
            return False
        if current is None:
            self._ensure_directory()
        if not self._swept:  # what writers killed before their rename left here (once per process)
            self._swept = True
            sweep_temporaries(self.directory, os.path.basename(self.path))
        try:
            atomic_write(self.path, data, durable=True, before_rename=None if current is None else self._keep_previous)
        except OSError as exc:
            raise StoreError("cannot write state file %s: %s" % (self.path, exc.strerror or exc)) from None
        self._known = (data, state.copy())
        self.identity = identity(os.stat(self.path))  # after the rename, which changes the inode's ctime
        if os.path.exists(view_path(self.path)):  # an OCI hook reads this state: its view follows every write
            # The state is saved: a view that cannot follow is a cache miss, not a failed save (its readers ignore a
            # view naming another file; the hook reports its own failed write).
            with contextlib.suppress(StoreError):
                self.write_hook_view(state)
        return True

    def write_hook_view(self, state: CPUState) -> None:
        """The OCI hook's view (``node.hook_view``) of ``state``, which the file last read or written holds."""
        if self.read_only or self.identity is None:
            return
        try:
            write_view(self.path, self.identity, state)
        except OSError as exc:
            raise StoreError("cannot write %s: %s" % (view_path(self.path), exc.strerror or exc)) from None

    def _keep_previous(self) -> None:
        """Hard-link the current generation to <file>.prev (files are never modified in place)."""
        link = "%s.prev-tmp-%d" % (self.path, os.getpid())
        try:
            os.link(self.path, link)
        except FileExistsError:  # left by a writer with this process id that died here
            os.unlink(link)
            os.link(self.path, link)
        os.replace(link, self.previous_path)
        with contextlib.suppress(FileNotFoundError):  # still there when .prev already was this generation
            os.unlink(link)

    def reset(self, label: str = "reset", keep: bool = False) -> Optional[str]:
        """Explicit recovery: move the current file aside to ``<file>.<label>-<UTC time>`` (kept, never deleted;
        with ``keep`` a hard link, the file staying until it is replaced); returns where it went."""
        if self.read_only:
            raise StoreError("state file %s is read-only; reset the kubelet's checkpoint with the kubelet's "
                             "documented procedure (or stop the kubelet first)" % self.path)
        if not os.path.exists(self.path):
            return None
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        aside = "%s.%s-%s" % (self.path, label, stamp)
        counter = 1
        while os.path.exists(aside):
            aside = "%s.%s-%s.%d" % (self.path, label, stamp, counter)
            counter += 1
        try:
            (os.link if keep else os.rename)(self.path, aside)
            fsync_directory(self.directory)
        except OSError as exc:
            raise StoreError("cannot move %s aside: %s" % (self.path, exc.strerror)) from None
        return aside
