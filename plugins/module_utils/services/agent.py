# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The agent loop: one process, one runtime connection, a reconcile pass every period.

It survives runtime outages and whatever a runtime sends (a failed pass is a log line, a metric and a back-off up to
``max_backoff``, then a retry; never the process's end), stops cleanly on SIGTERM or
SIGINT (the pass in progress finishes, the lock is released), and writes Prometheus textfile metrics
after every pass. The signal handler only records the signal: the kernel wakes the wait through a pipe
(``signal.set_wakeup_fd``) and the loop does the logging, so a signal arriving while the log is being
written cannot re-enter the stream.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Protocol, Sequence, TextIO, Tuple

from ..errors import ContainerRuntimeError, KubecpuError, KubeletPinsError, RuntimeUnavailableError
from ..kubelet.cpuset import CPUSet
from ..kubelet.topology import Topology
from ..node.metrics import Metrics
from ..node.plan import Plan
from ..node.state_store import StateStore
from ..runtime.watch import Waker

FOLLOW = 0.02  # seconds between passes while a watched container is created but not running yet
# After a wake, passes follow for FOLLOW_WINDOW seconds, FOLLOW apart and twice as far apart each time the runtime's
# list did not move (a removed pod's cgroup goes before the runtime stops listing its container): about seven passes.
FOLLOW_WINDOW = 2.0
DEBOUNCE = 0.005  # seconds to let a burst of cgroup events settle before the pass
UNAVAILABLE = "container runtime unavailable"  # what a failed pass says when the runtime cannot be reached


class _Policy(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def reserved(self) -> CPUSet: ...


class Passes(Protocol):
    """What the loop runs: a ``NodeManager`` (the agent), or ``KubeletHousekeeping`` beside a kubelet that pins."""

    runtime: Any
    store: StateStore
    topology: Topology

    @property
    def policy(self) -> _Policy: ...

    def reconcile(self, apply: bool = True) -> Plan: ...

    def close(self) -> None: ...


class Agent:
    def __init__(self, manager: Passes, period: float, log: TextIO, metrics_path: Optional[str] = None, *,
                 max_backoff: float = 30.0, max_passes: Optional[int] = None,
                 clock: Callable[[], float] = time.monotonic,
                 wait: Optional[Callable[[List[int], float], Optional[List[int]]]] = None,
                 wakers: Sequence[Waker] = ()) -> None:
        """``max_passes`` ends the loop after that many passes; ``clock`` (the time source) and ``wait`` (the pause
        between passes: the descriptors that end it early, seconds; returns those ready) are the loop's seams to
        time. A waker saying something changed (a container cgroup came or went, the runtime streamed a container event)
        starts a pass at once (the period is the safety net); passes follow every ``FOLLOW`` seconds while
        containers are created but not yet running, and for ``FOLLOW_WINDOW`` after a wake (further apart each time
        the runtime's list stood still), so that a container that goes a moment after its cgroup is seen go."""
        self.manager = manager
        self.period = period
        self.log = log
        self.metrics_path = metrics_path
        self.metrics = Metrics()
        self.max_backoff = max(max_backoff, period)
        self.max_passes = max_passes
        self.clock = clock
        self.wait = wait or _wait
        self.wakers = list(wakers)
        self.woken = 0  # passes started by a waker
        self.created = 0  # containers the last pass saw created, not yet running
        self.listing: Optional[Tuple[int, ...]] = None  # what the last pass counted (containers, running, created)
        self.moving = False  # whether it differed from the pass before
        self.follow_until = 0.0  # the end of the last wake's window
        self.follow_delay = FOLLOW
        self.stopping: Optional[int] = None  # the signal that asked the loop to stop
        self.home: FrozenSet[int] = frozenset(os.sched_getaffinity(0))  # where the agent may run at all
        self.confined: FrozenSet[int] = self.home
        self.passes = 0
        self.failures = 0
        self.aside = ""  # why the last pass stepped aside (the kubelet pins CPUs): said once, not every pass

    def _say(self, level: str, message: str, **fields: Any) -> None:
        say(self.log, level, message, **fields)

    def _handle(self, signum: int, _frame: Any) -> None:
        self.stopping = signum

    def run(self) -> int:
        wake_read, wake_write = os.pipe()
        for fd in (wake_read, wake_write):
            os.set_blocking(fd, False)
        previous_wakeup = signal.set_wakeup_fd(wake_write)
        previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGTERM, signal.SIGINT)}
        self._say("info", "agent started", period_seconds=self.period,
                  runtime=getattr(self.manager.runtime, "name", "?"), state=self.manager.store.path,
                  policy=self.manager.policy.name, woken_by=[type(waker).__name__ for waker in self.wakers])
        backoff = 0.0
        try:
            while self.stopping is None:
                started = self.clock()
                ok = self.one_pass()
                self.passes += 1
                if self.max_passes is not None and self.passes >= self.max_passes:
                    break
                if ok:
                    backoff = 0.0
                    wait = self.period - (self.clock() - started)
                    if self.created and self.wakers:
                        wait = min(wait, FOLLOW)  # a container about to start: pin it as it does
                    elif self.clock() < self.follow_until:  # after a wake: what else is coming, or going
                        self.follow_delay = FOLLOW if self.moving else self.follow_delay * 2
                        wait = min(wait, self.follow_delay)
                else:
                    backoff = min(self.max_backoff, max(self.period, backoff * 2 if backoff else self.period))
                    wait = backoff
                    self._say("warning", "retrying in %.1fs" % wait)
                if wait > 0 and self.stopping is None:
                    self._pause(wake_read, wait, watch=ok)  # a back-off is waited out whole: what the log says
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            signal.set_wakeup_fd(previous_wakeup)
            os.close(wake_read)
            os.close(wake_write)
            self.manager.close()
        if self.stopping is not None:
            self._say("info", "received %s, stopped after the pass in progress" % signal.Signals(self.stopping).name)
        self._say("info", "agent stopped", passes=self.passes, failed_passes=self.failures)
        return 0

    def _pause(self, wake_read: int, seconds: float, watch: bool = True) -> None:
        """Wait ``seconds``, less when a signal comes or (``watch``) a container cgroup comes or goes. A back-off after
        a failed pass does not watch: the runtime is what failed, a new container does not make it answer, and the
        retry comes when the log line said it would."""
        fds = [wake_read] + ([waker.fileno() for waker in self.wakers] if watch else [])
        ready = self.wait(fds, seconds) or []
        if wake_read in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_read, 64)
        woken = [waker for waker in self.wakers if waker.fileno() in ready and waker.changed()]
        if woken:
            self.woken += 1
            self.follow_until, self.follow_delay = self.clock() + FOLLOW_WINDOW, FOLLOW / 2
            time.sleep(DEBOUNCE)  # a container's cgroups and events come one after the other
            for waker in self.wakers:
                waker.changed()

    def one_pass(self) -> bool:
        started = self.clock()
        try:
            plan = self.manager.reconcile(apply=True)
        except KubeletPinsError as exc:  # not a failure: nothing to do while the kubelet pins CPUs itself
            if self.aside != str(exc):
                self._say("warning", str(exc))
            self.aside = str(exc)
            self.metrics.observe_pass({}, self.clock() - started, True)
            self._write_metrics()
            return True
        except RuntimeUnavailableError as exc:  # said once: the runtime's own error may already say it
            text = str(exc)
            self._fail(text if text.startswith(UNAVAILABLE) else "%s: %s" % (UNAVAILABLE, text), started)
            return False
        except (ContainerRuntimeError, KubecpuError, OSError) as exc:
            self._fail(str(exc), started)
            return False
        except Exception as exc:  # pylint: disable=broad-except  # whatever a runtime sent fails this pass, never the agent
            self.metrics.inc("kubecpu_peer_errors_total", peer=getattr(self.manager.runtime, "name", "runtime"),
                             kind="pass")
            self._fail("the pass failed: %s: %s" % (type(exc).__name__, exc), started)
            return False
        if self.aside:
            self._say("info", "the kubelet no longer pins CPUs: kubecpu manages them again")
            self.aside = ""
        self._confine(plan.after.default)
        doc = plan.to_dict(states=False)
        self.created = doc["counts"].get("created", 0)
        listing = tuple(doc["counts"].get(key, 0) for key in ("containers", "running", "created"))
        self.moving, self.listing = listing != self.listing, listing
        self.metrics.record(doc, self.clock() - started, self.manager.topology, plan.after,
                            self.manager.policy.reserved)
        if doc["actions"] or doc["errors"]:
            self._say("info", "pass", actions=doc["actions"], errors=doc["errors"], runtime_calls=doc["runtime_calls"])
        self._write_metrics()
        return True

    def _confine(self, shared: CPUSet) -> None:
        """Keep the agent's own threads on the shared pool (which holds the reserved CPUs), off the CPUs it hands out
        exclusively: a pass must not preempt a pinned workload. Every thread, since affinity is per thread."""
        wanted = self.home.intersection(shared.as_frozenset()) if shared else self.home
        if not wanted or wanted == self.confined:
            return
        try:
            threads = [int(tid) for tid in os.listdir("/proc/self/task")]
        except OSError:
            threads = [0]
        for tid in threads:
            with contextlib.suppress(OSError):  # a thread that has just ended
                os.sched_setaffinity(tid, wanted)
        self.confined = wanted
        self._say("info", "the agent runs on CPUs %s (the shared pool)" % CPUSet(wanted))

    def _fail(self, message: str, started: float) -> None:
        self.failures += 1
        self.metrics.observe_pass({}, self.clock() - started, False)
        self._say("error", message)
        self._write_metrics()

    def _write_metrics(self) -> None:
        write_metrics(self.metrics, self.metrics_path, self.log)


def say(log: TextIO, level: str, message: str, **fields: Any) -> None:
    """One JSON log line (time, level, msg and the fields), flushed: the agent's and the NRI plugin's log."""
    doc: Dict[str, Any] = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "level": level, "msg": message}
    doc.update(fields)
    log.write(json.dumps(doc) + "\n")
    log.flush()


def write_metrics(metrics: Metrics, path: Optional[str], log: TextIO) -> None:
    """The textfile after a pass; a failure to write it is logged, never fatal to the loop."""
    if not path:
        return
    try:
        metrics.write(path)
    except OSError as exc:
        say(log, "error", "cannot write metrics to %s: %s" % (path, exc.strerror or exc))


def _wait(fds: List[int], seconds: float) -> List[int]:
    """Sleep ``seconds``, or until one of ``fds`` is readable; returns those that are."""
    ready, _w, _x = select.select(fds, [], [], seconds)
    return list(ready)
