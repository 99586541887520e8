"""Whether the state lock is held at each runtime call: a non-blocking ``flock`` on a descriptor of its own fails while
any holder, in this process or another, has the lock (issue 62: no runtime call under the lock)."""

from __future__ import annotations

import errno
import fcntl
import os

from .fake_runtime import FakeRuntime


class LockProbe:
    """Every runtime call asks whether the state lock is free (a non-blocking ``flock`` on a descriptor of its own:
    it fails while any holder, in this process or another, has the lock). The calls made while it was held are kept."""

    def __init__(self, state_path):
        self.lock_path = state_path + ".lock"
        self.held_at = []
        self.calls = 0

    def check(self, what):
        self.calls += 1
        if not os.path.exists(self.lock_path):
            return
        fd = os.open(self.lock_path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            self.held_at.append(what)
        finally:
            os.close(fd)


class Probed:
    """A runtime (the fake one, or the NRI view) whose every call the manager makes asks ``probe`` first."""

    probe: LockProbe

    def list_containers(self):
        self.probe.check("list")
        return super().list_containers()

    def inspect(self, container_id):
        self.probe.check("inspect")
        return super().inspect(container_id)

    def pod_cgroup_parent(self, sandbox_id):
        self.probe.check("inspect_pod")
        return super().pod_cgroup_parent(sandbox_id)

    def pod_annotations(self, sandbox_id):
        self.probe.check("inspect_pod")
        return super().pod_annotations(sandbox_id)

    def update(self, container_id, **fields):
        self.probe.check("update")
        return super().update(container_id, **fields)


class ProbedRuntime(Probed, FakeRuntime):
    """The fake runtime, each call probed."""

    def __init__(self, probe, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.probe = probe
