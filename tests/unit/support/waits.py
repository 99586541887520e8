"""Waiting for a condition on a node in the integration tests: never a log line, never a fixed time."""

from __future__ import annotations

import time

# Seconds within which an agent pass woken by an event (a container's cgroup, the CRI event stream) must have pinned
# what came, under any load the suite brings (idle: well under one; beside the whole suite on 2 CPUs a release took
# 1.34 s on 2026-12-07). The tests that use it give the agent a 60 s period, so that a pass within it was no period's.
EVENT_PASS_WITHIN = 5.0
EVENT_TEST_PERIOD = "60s"


def metric(path, prefix):
    """The sum of the samples whose line starts with ``prefix`` in a Prometheus textfile (0 while there is none)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return sum(float(line.split()[-1]) for line in handle if line.startswith(prefix))
    except OSError:
        return 0


def until(condition, what, timeout=20, step=0.05):
    """Wait for a condition on the node (never a log line, never a fixed time), failing after ``timeout``; the
    condition's true value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("not within %d s: %s" % (timeout, what))
        time.sleep(step)
