# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The agent's health after a change (the fleet rollout's gate): its service is active, a pass finished after the
check began (the agent rewrites its metrics file after every pass), and its pinning error counter has not risen.

One call does what took four module runs (``systemctl is-active``, the node's time, a wait on the metrics file,
reading it); ``systemctl`` has a timeout, and what is read from it and from the metrics file is bounded.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, Optional, Tuple

from ..errors import ConfigError, HealthError
from ..kubelet.discovery import CommandRunner, run_command
from ..paths import is_absolute_path
from .kubelet_health import POLL_SECONDS, SYSTEMCTL_BYTES, check_unit

MAX_TIMEOUT = 3600  # seconds to wait for a pass, at most (the agent's period is seconds to minutes)
METRICS_BYTES = 1024 * 1024  # of the metrics file, read (it holds a few hundred lines)
ERRORS = "cpu_manager_pinning_errors_total"  # the counter the gate compares (node/metrics.py)
# a unit systemd is still bringing up or reloading: asked again until the timeout
_COMING = ("activating", "reloading", "deactivating")


def service_state(service: str, run: CommandRunner = run_command) -> str:
    """What ``systemctl is-active`` says of ``service``: active (its exit status 0 says so, whatever it prints),
    activating, inactive, failed, ..."""
    code, out, err = run(["systemctl", "is-active", service])
    text = out[:SYSTEMCTL_BYTES].strip()
    if code == 0:
        return "active"
    if not text:
        raise HealthError("cannot ask systemd about %s (systemctl is-active, exit %d): %s"
                          % (service, code, err[:SYSTEMCTL_BYTES].strip() or "no output"))
    return text.splitlines()[0][:80]


def read_metrics(path: str) -> Optional[Tuple[float, str]]:
    """(its modification time, its text) of the agent's metrics file; None when there is none yet."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(METRICS_BYTES + 1)
            mtime = os.fstat(handle.fileno()).st_mtime
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise HealthError("cannot read the agent's metrics %s: %s" % (path, exc.strerror or exc)) from None
    if len(data) > METRICS_BYTES:
        raise HealthError("the agent's metrics %s are larger than %d bytes" % (path, METRICS_BYTES))
    return mtime, data.decode("utf-8", "replace")


def pinning_errors(text: str, path: str) -> int:
    """The ``cpu_manager_pinning_errors_total`` sample of a metrics file's text (0 when it has none)."""
    for line in text.splitlines():
        name, _sep, value = line.partition(" ")
        if name == ERRORS:
            try:
                number = float(value.strip())
            except ValueError:
                raise HealthError("%s in %s is not a number: %r" % (ERRORS, path, value[:40])) from None
            if not 0 <= number < 2 ** 63:
                raise HealthError("%s in %s is not a count: %r" % (ERRORS, path, value[:40]))
            return int(number)
    return 0


def check_agent(service: str, metrics_path: str, timeout: float, *, active: bool = True, fresh: bool = True,
                errors_before: Optional[int] = None, run: CommandRunner = run_command,
                clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                sleep: Callable[[float], None] = time.sleep) -> Dict[str, Any]:
    """With ``active``, ``service`` must be active (asked again, up to ``timeout`` seconds, while systemd is still
    starting it); with ``fresh``, a pass must finish after this call began (the metrics file's modification time, on
    the ``wall`` clock, rewritten, up to ``timeout`` seconds on ``clock``, which a change of the node's time does not
    move; one second of file system granularity allowed); with ``errors_before``, the pinning error counter must not
    be above it. A HealthError says which of these failed; a ConfigError, before anything is asked, that an argument
    is not one."""
    check_unit(service)
    if not is_absolute_path(metrics_path):
        raise ConfigError("metrics_path must be an absolute path, got %r" % (metrics_path,))
    if isinstance(timeout, bool) or not 0 <= timeout <= MAX_TIMEOUT:
        raise ConfigError("timeout must be 0-%d seconds, got %s" % (MAX_TIMEOUT, timeout))
    if errors_before is not None and (isinstance(errors_before, bool) or errors_before < 0):
        raise ConfigError("errors_before must be a count (0 or more), got %r" % (errors_before,))
    started, since = clock(), wall()
    while active:
        state = service_state(service, run)
        if state == "active":
            break
        if state not in _COMING or clock() - started >= timeout:
            raise HealthError("%s is %s, not active (systemctl is-active); see journalctl -u %s"
                              % (service, state, service))
        sleep(POLL_SECONDS)
    metrics = read_metrics(metrics_path)
    while fresh and (metrics is None or metrics[0] < since - 1):
        if clock() - started >= timeout:
            raise HealthError("no pass of %s finished within %d s: %s %s" % (
                service, timeout, metrics_path, "does not exist" if metrics is None else "was not rewritten"))
        sleep(POLL_SECONDS)
        metrics = read_metrics(metrics_path)
    errors = 0 if metrics is None else pinning_errors(metrics[1], metrics_path)
    if errors_before is not None and errors > errors_before:
        raise HealthError("%s rose from %d to %d after the change; see journalctl -u %s"
                          % (ERRORS, errors_before, errors, service))
    return {"service": service, "active": True if active else None, "metrics_path": metrics_path,
            "fresh": fresh, "waited": round(clock() - started, 1), "errors": errors}
