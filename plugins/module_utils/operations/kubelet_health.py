# Copyright: (c) 2026, kubecpu developers
# Apache License 2.0 (see LICENSE)
"""The kubelet's health after a change (docs/KUBELET_CONFIG.md, "As failures follow healthz"): its health URL
answers 200, and after ``settle`` seconds it still does and systemd has not restarted it. A kubelet that refuses its
checkpoint exits after its health URL is up, and systemd starts it again: the restart count (``NRestarts``) read
when it first answers and again after the settle time tells it apart from one that stays up.

One call does what took four module runs (two health requests, two restart counts); each request and each
``systemctl`` has a timeout, and what is read from either is bounded.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple

from ..errors import ConfigError, HealthError
from ..kubelet.discovery import CommandRunner, run_command

if TYPE_CHECKING:
    from urllib.parse import SplitResult

REQUEST_TIMEOUT = 5.0  # seconds for one health request
BODY_BYTES = 4096  # of a health answer, read (a kubelet says "ok")
SYSTEMCTL_BYTES = 4096  # of systemctl's answer, read
POLL_SECONDS = 2.0  # between two health requests while waiting
MAX_TIMEOUT = 3600  # seconds to wait for the first 200, at most (an hour: a kubelet is up in seconds)
MAX_SETTLE = 600  # seconds to watch it then, at most (ten minutes: a unit's RestartSec is seconds)

# a unit's name as systemd allows it (kubelet, kubelet.service, name@instance), at most 255 characters, never taken
# for one of systemctl's flags
_UNIT = re.compile(r"[A-Za-z0-9:_.\\@][A-Za-z0-9:_.\\@-]{0,254}\Z")

Probe = Callable[[str], Tuple[Optional[int], str]]


def _split(url: str) -> SplitResult:
    """``url``'s parts; a ConfigError unless it is an http or https URL with a host."""
    from urllib.parse import urlsplit  # noqa: PLC0415  # here: the module imports nothing else of the network

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # a port that is not a number raises here, before anything is asked
    except ValueError as exc:
        raise ConfigError("url %r: %s" % (url, exc)) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or "\x00" in url:
        raise ConfigError("url %r: not an http or https URL with a host" % (url,))
    return parts


def probe_url(url: str) -> Tuple[Optional[int], str]:
    """One GET of ``url`` (http or https, straight to its host: a node's own health URL takes no proxy): (its HTTP
    status, what it said) or (None, why there was no answer)."""
    import http.client  # noqa: PLC0415  # here: the module imports nothing else of the network

    try:
        parts = _split(url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = kind(parts.hostname or "", parts.port, timeout=REQUEST_TIMEOUT)  # _split saw a host
        try:
            connection.request("GET", (parts.path or "/") + ("?" + parts.query if parts.query else ""))
            answer = connection.getresponse()
            said = answer.read(BODY_BYTES).decode("utf-8", "replace").strip()
            return answer.status, said if answer.status == 200 else (answer.reason or said)
        finally:
            connection.close()
    except (OSError, ValueError, ConfigError, http.client.HTTPException) as exc:
        return None, str(exc) or type(exc).__name__


def _answer(status: Optional[int], said: str) -> str:
    return said if status is None else "HTTP %d %s" % (status, said)


def restarts(service: str, run: CommandRunner = run_command) -> int:
    """systemd's ``NRestarts`` of ``service``: how often it restarted it on its own since it was last started."""
    code, out, err = run(["systemctl", "show", "--property=NRestarts", "--value", service])
    text = out[:SYSTEMCTL_BYTES].strip()
    if code != 0 or not text.isdigit():
        raise HealthError("cannot read how often systemd restarted %s (systemctl show --property=NRestarts, exit %d):"
                          " %s" % (service, code, (err[:SYSTEMCTL_BYTES].strip() or text or "no output")))
    return int(text)


def check_unit(service: str) -> None:
    """A ConfigError unless ``service`` is a systemd unit name (never one of systemctl's flags)."""
    if not isinstance(service, str) or not _UNIT.match(service):
        raise ConfigError("service %r: not a systemd unit name" % (service,))


def check_health(url: str, service: str, timeout: float, settle: float, *, probe: Probe = probe_url,
                 run: CommandRunner = run_command, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> Dict[str, Any]:
    """Wait up to ``timeout`` seconds for ``url`` to answer 200, then ``settle`` seconds: it must answer 200 again and
    ``service`` must not have been restarted meanwhile. A HealthError says which of these failed; a ConfigError, before
    anything is asked, that ``url`` is not one, ``service`` no unit name or a time is outside its bounds."""
    _split(url)
    check_unit(service)
    for name, value, most in (("timeout", timeout, MAX_TIMEOUT), ("settle", settle, MAX_SETTLE)):
        if not 0 <= value <= most:
            raise ConfigError("%s must be 0-%d seconds, got %s" % (name, most, value))
    started = clock()
    while True:
        status, said = probe(url)
        if status == 200:
            break
        if clock() - started >= timeout:
            raise HealthError("%s did not answer 200 within %d s (last: %s)" % (url, timeout, _answer(status, said)))
        sleep(POLL_SECONDS)
    waited = clock() - started
    before = restarts(service, run)
    sleep(settle)
    status, said = probe(url)
    if status != 200:
        raise HealthError("%s answered 200, then %s %d s later" % (url, _answer(status, said), settle))
    after = restarts(service, run)
    if after != before:
        raise HealthError("systemd restarted %s within %d s of its health URL answering (NRestarts %d, then %d): it "
                          "fails after it starts" % (service, settle, before, after))
    return {"url": url, "service": service, "waited": round(waited, 1), "settle": settle, "restarts": after}
