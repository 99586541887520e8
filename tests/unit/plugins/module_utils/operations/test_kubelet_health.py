"""The kubelet's health after a change (operations/kubelet_health.py): the health URL answering 200, then again
after the settle time with systemd's restart count unchanged; every other outcome a HealthError that says which."""

from __future__ import annotations

import pytest

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError, HealthError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.kubelet_health import (
    BODY_BYTES, MAX_SETTLE, MAX_TIMEOUT, POLL_SECONDS, check_health, probe_url, restarts)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import health_url

URL = "http://127.0.0.1:10248/healthz"


class Node:
    """A kubelet as the check sees it: the health answers in turn (the last one repeated), the NRestarts in turn,
    and a clock that moves only when the check sleeps."""

    def __init__(self, answers, counts=("0",)):
        self.answers, self.counts, self.now, self.slept, self.asked = list(answers), list(counts), 0.0, [], []

    def probe(self, url):
        self.asked.append(url)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def run(self, argv):
        assert argv == ["systemctl", "show", "--property=NRestarts", "--value", "kubelet"]
        count = self.counts.pop(0) if len(self.counts) > 1 else self.counts[0]
        return (0, count + "\n", "") if count is not None else (1, "", "Unit kubelet.service could not be found.")

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds

    def check(self, timeout=10, settle=15, url=URL, service="kubelet"):
        return check_health(url, service, timeout, settle, probe=self.probe, run=self.run, clock=lambda: self.now,
                            sleep=self.sleep)


REFUSED = (None, "[Errno 111] Connection refused")
OK = (200, "ok")


@pytest.mark.parametrize("answers,counts,waited", [
    ([OK], ("0",), 0.0),  # up at once
    ([REFUSED, REFUSED, OK], ("0",), 2 * POLL_SECONDS),  # up after two polls
    ([REFUSED, (500, "Internal Server Error"), OK], ("3",), 2 * POLL_SECONDS),  # restarts before: not counted
])
def test_a_kubelet_that_answers_and_stays_up_is_healthy(answers, counts, waited):
    node = Node(answers, counts)
    got = node.check()
    assert got == {"url": URL, "service": "kubelet", "waited": waited, "settle": 15, "restarts": int(counts[0])}
    assert node.slept[-1] == 15 and node.asked == [URL] * (len(answers) + 1)  # asked again after the settle time


@pytest.mark.parametrize("answers,counts,message", [
    ([REFUSED], ("0",), "http://127.0.0.1:10248/healthz did not answer 200 within 10 s (last: [Errno 111] "
                        "Connection refused)"),
    ([(503, "Service Unavailable")], ("0",), "did not answer 200 within 10 s (last: HTTP 503 Service Unavailable)"),
    ([OK, REFUSED], ("0",), "http://127.0.0.1:10248/healthz answered 200, then [Errno 111] Connection refused 15 s "
                            "later"),
    ([OK], ("0", "1"), "systemd restarted kubelet within 15 s of its health URL answering (NRestarts 0, then 1): it "
                       "fails after it starts"),
    ([OK], (None,), "cannot read how often systemd restarted kubelet (systemctl show --property=NRestarts, exit 1): "
                    "Unit kubelet.service could not be found."),
    ([OK], ("",), "cannot read how often systemd restarted kubelet (systemctl show --property=NRestarts, exit 0): "
                  "no output"),
])
def test_a_kubelet_that_does_not_come_up_or_does_not_stay_up_is_named(answers, counts, message):
    node = Node(answers, counts)
    with pytest.raises(HealthError) as raised:
        node.check()
    assert str(raised.value) == message or message in str(raised.value)


@pytest.mark.parametrize("args,message", [
    ({"url": "not a url"}, "url 'not a url': not an http or https URL with a host"),
    ({"url": "ftp://127.0.0.1/healthz"}, "url 'ftp://127.0.0.1/healthz': not an http or https URL with a host"),
    ({"url": "http:///healthz"}, "url 'http:///healthz': not an http or https URL with a host"),
    ({"url": "http://127.0.0.1:port/healthz"}, "url 'http://127.0.0.1:port/healthz': Port could not be cast to"),
    ({"url": "http://127.0.0.1:99999/healthz"}, "url 'http://127.0.0.1:99999/healthz': Port out of range"),
    ({"service": "-H root@elsewhere"}, "service '-H root@elsewhere': not a systemd unit name"),  # never a flag
    ({"service": "kubelet; reboot"}, "service 'kubelet; reboot': not a systemd unit name"),
    ({"service": ""}, "service '': not a systemd unit name"),
    ({"service": "k" * 256}, "not a systemd unit name"),
    ({"timeout": -1}, "timeout must be 0-%d seconds, got -1" % MAX_TIMEOUT),
    ({"timeout": MAX_TIMEOUT + 1}, "timeout must be 0-3600 seconds, got 3601"),
    ({"settle": -0.5}, "settle must be 0-%d seconds, got -0.5" % MAX_SETTLE),
    ({"settle": 10**9}, "settle must be 0-600 seconds, got 1000000000"),
])
def test_a_bad_url_service_or_time_is_refused_before_anything_is_asked(args, message):
    node = Node([OK])
    with pytest.raises(ConfigError) as raised:
        node.check(**args)
    assert message in str(raised.value)
    assert node.asked == [] and node.slept == []  # nothing asked, no wait


@pytest.mark.parametrize("service", ["kubelet", "kubelet.service", "kubelet@node-1.service", "sys-fs-cgroup.mount"])
def test_a_unit_name_systemd_allows_is_taken(service):
    node = Node([OK])
    node.run = lambda argv: (0, "0\n", "") if argv[-1] == service else (1, "", "wrong unit")
    assert node.check(service=service, settle=0)["service"] == service


def test_the_wait_polls_until_the_timeout_and_no_longer():
    node = Node([REFUSED])
    with pytest.raises(HealthError):
        node.check(timeout=9)
    assert node.slept == [POLL_SECONDS] * 5 and len(node.asked) == 6  # 0, 2, 4, 6, 8, 10 s


def test_restarts_reads_systemds_count():
    assert restarts("kubelet", run=lambda argv: (0, "7\n", "")) == 7


ANSWERS = {"/healthz": (200, b"ok"), "/big": (200, b"x" * (3 * BODY_BYTES)), "/down": (503, b"not yet")}


@pytest.fixture
def server():
    with health_url.serve(ANSWERS) as base:
        yield base


def test_probe_url_asks_a_real_server_and_reads_a_bounded_answer(server):
    assert probe_url(server + "/healthz") == (200, "ok")
    status, said = probe_url(server + "/big")
    assert status == 200 and len(said) == BODY_BYTES
    assert probe_url(server + "/down") == (503, "Service Unavailable")
    status, said = probe_url("http://127.0.0.1:1/healthz")  # nothing listens there
    assert status is None and "refused" in said
    assert probe_url("not a url") == (None, "url 'not a url': not an http or https URL with a host")
    assert probe_url("ftp://127.0.0.1/healthz")[0] is None
    assert probe_url(server.replace("http:", "https:") + "/healthz")[0] is None  # no TLS there: no answer
