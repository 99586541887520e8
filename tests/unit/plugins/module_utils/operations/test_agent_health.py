"""The agent's health after a change (operations/agent_health.py): its unit active, a pass finished after the check
began (the metrics file rewritten), the pinning error counter not above the count before; every other outcome a
HealthError that says which, every bad argument a ConfigError before anything is asked."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError, HealthError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.agent_health import (
    MAX_TIMEOUT, METRICS_BYTES, POLL_SECONDS, check_agent, pinning_errors, read_metrics, service_state)

START = 1_000_000.0  # the node's clock when the check begins
METRICS = ("# HELP cpu_manager_pinning_errors_total Exclusive CPU allocations that failed.\n"
           "# TYPE cpu_manager_pinning_errors_total counter\n"
           "cpu_manager_pinning_errors_total %s\n"
           "cpu_manager_pinning_requests_total 7\n")
IS_ACTIVE = {"active": (0, "active\n", ""), "activating": (3, "activating\n", ""), "failed": (3, "failed\n", ""),
             "inactive": (3, "inactive\n", ""), "gone": (4, "", "Unit kubecpu-agent.service could not be found."),
             "quiet": (0, "", "")}  # a systemctl that says nothing but exits 0: active, as its exit status says


class Node:
    """The agent as the check sees it: ``systemctl is-active`` answers in turn (the last repeated), a metrics file
    the agent rewrites at the times in ``passes`` (seconds after the start, with the counter given), and a clock
    that moves only when the check sleeps."""

    def __init__(self, tmp_path, states=("active",), passes=(), before=None):
        self.states, self.passes, self.now, self.asked = list(states), list(passes), START, []
        self.path = str(tmp_path / "kubecpu.prom")
        if before is not None:  # a file from a pass before the change, a minute old
            self._write(before, START - 60)

    def _write(self, errors, when):
        with open(self.path, "w", encoding="utf-8") as handle:
            handle.write(METRICS % errors)
        os.utime(self.path, (when, when))

    def run(self, argv):
        assert argv == ["systemctl", "is-active", "kubecpu-agent"]
        self.asked.append(self.now - START)
        return IS_ACTIVE[self.states.pop(0) if len(self.states) > 1 else self.states[0]]

    def sleep(self, seconds):
        self.now += seconds
        while self.passes and self.passes[0][0] <= self.now - START:
            at, errors = self.passes.pop(0)
            self._write(errors, START + at)

    def check(self, timeout=10, **kwargs):
        return check_agent("kubecpu-agent", self.path, timeout, run=self.run, clock=lambda: self.now - START,
                           wall=lambda: self.now, sleep=self.sleep, **kwargs)


@pytest.mark.parametrize("states, passes, before, errors_before, waited, errors", [
    (["active"], [(1, 0)], 0, 0, POLL_SECONDS, 0),  # the next pass after the change
    (["activating", "activating", "active"], [(5, 2)], 2, 2, 6.0, 2),  # started by systemd meanwhile
    (["quiet"], [(0.5, 3)], None, 3, POLL_SECONDS, 3),  # no file before the change: the first pass writes it
    (["active"], [(3, 1)], 4, None, 4.0, 1),  # not compared: only read
])
def test_an_active_agent_that_finishes_a_pass_with_no_new_errors_is_healthy(tmp_path, states, passes, before,
                                                                            errors_before, waited, errors):
    node = Node(tmp_path, states, passes, before)
    got = node.check(errors_before=errors_before)
    assert got == {"service": "kubecpu-agent", "active": True, "metrics_path": node.path, "fresh": True,
                   "waited": waited, "errors": errors}


def test_a_pass_within_a_second_before_the_start_counts_as_one_after_it(tmp_path):
    """The file system's time may lag the clock by a tick: one second is allowed, as the playbook allowed."""
    node = Node(tmp_path)
    node._write(0, START - 0.5)
    assert node.check()["waited"] == 0.0


@pytest.mark.parametrize("states, passes, before, errors_before, message", [
    (["failed"], [(1, 0)], 0, 0, "kubecpu-agent is failed, not active \\(systemctl is-active\\); see journalctl -u "
                                 "kubecpu-agent"),
    (["inactive"], [], 0, 0, "kubecpu-agent is inactive, not active"),
    (["activating"], [], 0, 0, "kubecpu-agent is activating, not active"),  # still starting at the timeout
    (["gone"], [], 0, 0, "cannot ask systemd about kubecpu-agent \\(systemctl is-active, exit 4\\): Unit "
                         "kubecpu-agent.service could not be found."),
    (["active"], [], 0, 0, "no pass of kubecpu-agent finished within 10 s: .*kubecpu.prom was not rewritten"),
    (["active"], [], None, 0, "no pass of kubecpu-agent finished within 10 s: .*kubecpu.prom does not exist"),
    (["active"], [(1, 3)], 2, 2, "cpu_manager_pinning_errors_total rose from 2 to 3 after the change; see "
                                 "journalctl -u kubecpu-agent"),
])
def test_every_other_outcome_says_what_failed(tmp_path, states, passes, before, errors_before, message):
    node = Node(tmp_path, states, passes, before)
    with pytest.raises(HealthError, match=message):
        node.check(errors_before=errors_before)
    assert node.now - START <= 10 + POLL_SECONDS  # never past the timeout by more than one poll


def test_a_failed_unit_fails_at_once_not_at_the_timeout(tmp_path):
    node = Node(tmp_path, ["failed"], [(1, 0)], 0)
    with pytest.raises(HealthError):
        node.check(timeout=60)
    assert node.asked == [0.0]


def test_before_the_change_it_only_reads_the_count(tmp_path):
    """active and fresh off: no systemctl, no wait; nothing installed yet counts as no errors."""
    node = Node(tmp_path, ["gone"])
    assert node.check(active=False, fresh=False) == {"service": "kubecpu-agent", "active": None,
                                                     "metrics_path": node.path, "fresh": False, "waited": 0.0,
                                                     "errors": 0}
    node._write(5, START - 600)
    assert node.check(active=False, fresh=False)["errors"] == 5 and node.asked == []


@pytest.mark.parametrize("kwargs, message", [
    ({"service": "--now"}, "service '--now': not a systemd unit name"),
    ({"service": ""}, "not a systemd unit name"),
    ({"metrics_path": "kubecpu.prom"}, "metrics_path must be an absolute path, got 'kubecpu.prom'"),
    ({"metrics_path": "/var/lib/\x00"}, "metrics_path must be an absolute path"),
    ({"timeout": -1}, "timeout must be 0-%d seconds, got -1" % MAX_TIMEOUT),
    ({"timeout": MAX_TIMEOUT + 1}, "timeout must be 0-3600 seconds"),
    ({"timeout": True}, "timeout must be"),
    ({"errors_before": -1}, "errors_before must be a count \\(0 or more\\), got -1"),
    ({"errors_before": False}, "errors_before must be a count"),
])
def test_bad_arguments_are_refused_before_anything_is_asked(tmp_path, kwargs, message):
    node = Node(tmp_path)
    args = dict({"service": "kubecpu-agent", "metrics_path": node.path, "timeout": 10}, **kwargs)
    with pytest.raises(ConfigError, match=message):
        check_agent(args.pop("service"), args.pop("metrics_path"), args.pop("timeout"), run=node.run,
                    clock=lambda: node.now, wall=lambda: node.now, sleep=node.sleep, **args)
    assert node.asked == [] and node.now == START


@pytest.mark.parametrize("text, errors", [
    (METRICS % "0", 0),
    (METRICS % "12", 12),
    (METRICS % "3e0", 3),  # a float, as Prometheus allows
    ("cpu_manager_pinning_requests_total 7\n", 0),  # no errors counted yet
    ("# cpu_manager_pinning_errors_total 9\ncpu_manager_pinning_errors_totals 9\n", 0),  # neither is the sample
])
def test_the_counter_is_the_samples_value(text, errors):
    assert pinning_errors(text, "/m") == errors


@pytest.mark.parametrize("value", ["x", "", "-1", "NaN", "+Inf", "1e30"])
def test_a_counter_that_is_no_count_is_named(value):
    with pytest.raises(HealthError, match="cpu_manager_pinning_errors_total in /m is not a"):
        pinning_errors(METRICS % value, "/m")


@given(st.text(max_size=200))
def test_any_metrics_text_is_a_count_or_a_health_error(text):
    try:
        assert pinning_errors(text, "/m") >= 0
    except HealthError:
        pass


def test_the_metrics_file_is_read_with_a_limit(tmp_path):
    path = tmp_path / "kubecpu.prom"
    assert read_metrics(str(path)) is None
    path.write_text("#" * (METRICS_BYTES + 1))
    with pytest.raises(HealthError, match="larger than %d bytes" % METRICS_BYTES):
        read_metrics(str(path))
    (tmp_path / "dir.prom").mkdir()
    with pytest.raises(HealthError, match=r"cannot read the agent.s metrics .*dir\.prom"):
        read_metrics(str(tmp_path / "dir.prom"))


def test_service_state_reads_a_bounded_first_line():
    assert service_state("u", lambda argv: (3, "failed\nmore\n", "")) == "failed"
    assert service_state("u", lambda argv: (3, "x" * 10_000, "")) == "x" * 80
