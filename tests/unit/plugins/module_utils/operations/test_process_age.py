"""Whether a running service predates its files (operations/process_age.py): what systemd says of a unit's main
process (``systemctl show --timestamp=unix``, its answers scripted as systemd 252 gives them: these hosts have no
systemd as PID 1), which files changed after systemd started it, and everything systemd may answer that is not that,
refused as "cannot say". A run cut off between writing a service's files and restarting it is what this sees; the
roles restart the service then."""

from __future__ import annotations

import os
import time

import pytest

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.process_age import (
    STAMP_SLACK, changed_since, service_age)

UNIT = "kubecpu-agent.service"


def touched(path, when):
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("x")
    os.utime(path, (when, when))
    return str(path)


def systemd(pid, started=None, reload="no", code=0):
    """A runner answering ``systemctl show`` as systemd does for a unit whose main process is ``pid``, started at
    ``started`` (seconds since the epoch; systemd shows ``@<whole seconds>``, or nothing for a unit never started)."""
    asked = []

    def run(argv):
        asked.append(list(argv))
        stamp = "@%d" % started if started is not None else ""
        return code, "MainPID=%s\nExecMainStartTimestamp=%s\nNeedDaemonReload=%s\n" % (pid, stamp, reload), ""
    run.asked = asked
    return run


def test_the_files_changed_after_systemd_started_the_unit_are_named(tmp_path):
    started = int(time.time()) - 100  # systemd shows whole seconds
    config = touched(tmp_path / "agent.json", started + 50)  # written after the start: a restart is due
    unit = touched(tmp_path / "kubecpu-agent.service", started - 60)
    same = touched(tmp_path / "kubecpu-agent.tar", started + STAMP_SLACK / 2)  # within the stamp's second: not later
    run = systemd(4242, started)
    assert service_age(UNIT, [config, unit, same, str(tmp_path / "missing")], run) == {
        "unit": UNIT, "running": True, "changed_since_start": [config], "needs_reload": False}
    assert run.asked == [["systemctl", "show", "--timestamp=unix", "--property=MainPID",
                          "--property=ExecMainStartTimestamp", "--property=NeedDaemonReload", UNIT]]


def test_a_unit_file_newer_than_what_systemd_loaded_asks_for_a_reload_even_with_the_unit_stopped(tmp_path):
    assert service_age(UNIT, [], systemd(0, reload="yes")) == {
        "unit": UNIT, "running": False, "changed_since_start": [], "needs_reload": True}


@pytest.mark.parametrize("answer,running", [
    ("MainPID=0\nExecMainStartTimestamp=\nNeedDaemonReload=no\n", False),  # stopped, or never installed
    ("MainPID=\u00b2\nExecMainStartTimestamp=@1\n", None),  # a superscript two: str.isdigit, not a PID
    ("MainPID=\u0661\nExecMainStartTimestamp=@1\n", None),  # an Arabic-Indic one
    ("MainPID=\uff11\nExecMainStartTimestamp=@1\n", None),  # a fullwidth one
    ("MainPID=12345678901\n", None),  # longer than any PID
    ("12\n", None),  # not a property line
    ("MainPID=12\n" * 200, None),  # longer than the answer it can be
    ("", None),
])
def test_what_is_not_a_main_pid_is_cannot_say_never_a_guess(tmp_path, answer, running):
    config = touched(tmp_path / "agent.json", time.time())
    assert service_age(UNIT, [config], lambda argv: (0, answer, "")) == {
        "unit": UNIT, "running": running, "changed_since_start": [], "needs_reload": False}


def test_systemd_that_cannot_be_asked_says_nothing(tmp_path):
    config = touched(tmp_path / "agent.json", time.time())
    assert service_age(UNIT, [config], systemd(12, time.time() - 100, code=1))["running"] is None


@pytest.mark.parametrize("stamp", [None, "soon", "@12.5", "@" + "9" * 13])
def test_a_running_unit_whose_start_systemd_does_not_show_names_no_file(tmp_path, stamp):
    config = touched(tmp_path / "agent.json", time.time())
    answer = "MainPID=12\nExecMainStartTimestamp=%s\n" % (stamp or "")
    assert service_age(UNIT, [config], lambda argv: (0, answer, "")) == {
        "unit": UNIT, "running": True, "changed_since_start": [], "needs_reload": False}


def test_a_start_after_now_is_no_start_time(tmp_path):
    """The clock moved back since systemd started the unit: every file would look older than it."""
    config = touched(tmp_path / "agent.json", time.time() + 3600)
    assert service_age(UNIT, [config], systemd(12, time.time() + 7200))["changed_since_start"] == []
    assert changed_since(None, [config]) == []


def test_a_unit_name_that_is_none_is_refused_before_systemctl_runs():
    run = systemd(1, time.time())
    with pytest.raises(ConfigError):
        service_age("--property=Id", [], run)
    assert run.asked == []
