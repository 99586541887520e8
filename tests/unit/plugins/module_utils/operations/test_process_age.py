"""Whether a running service predates its files (operations/process_age.py): a process's start time from /proc, on
real processes started by the test and on crafted stat lines; which files changed after it; a systemd unit's main
process as ``systemctl show`` tells it (answers scripted, as systemd gives them). A run cut off between writing a
service's files and restarting it is what this sees; the roles restart the service then."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.process_age import (
    changed_since, process_started, service_age, started_from, ticks)

TICK = 1.0 / ticks()


@pytest.fixture
def sleeper():
    """A process started now: (its PID, the time before and after its start)."""
    before = time.time()
    proc = subprocess.Popen(["sleep", "30"])
    after = time.time()
    yield proc.pid, before, after
    proc.kill()
    proc.wait()


def touched(path, when):
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("x")
    os.utime(path, (when, when))
    return str(path)


def test_a_process_start_is_read_to_a_clock_tick(sleeper):
    pid, before, after = sleeper
    started = process_started(pid)
    assert before - 2 * TICK <= started <= after + 2 * TICK


def test_files_changed_after_the_start_are_named_and_the_others_not(sleeper, tmp_path):
    pid, before, after = sleeper
    started = process_started(pid)
    old = touched(tmp_path / "old", before - 60)
    new = touched(tmp_path / "new", after + 5)
    same = touched(tmp_path / "same", started)  # within a tick of the start: not later
    assert changed_since(started, [old, new, same, str(tmp_path / "missing")]) == [new]
    assert changed_since(None, [new]) == []  # no start time: nothing is said to have changed


@pytest.mark.parametrize("name", ["sleep", "a) b (c", ") 1 2 3 4", ""])
def test_the_start_field_is_found_whatever_the_process_name_holds(tmp_path, name):
    (tmp_path / "uptime").write_text("1000.00 4000.00\n")
    rest = ["S"] + ["0"] * 18 + ["50000"] + ["0"] * 30  # field 22 (the 20th after the name): 500 s after boot
    line = ("7 (%s) " % name + " ".join(rest)).encode()
    now = time.time()
    started = started_from(line, str(tmp_path))
    assert abs(started - (now - 1000.0 + 50000 / ticks())) < 1.0


@pytest.mark.parametrize("line,uptime", [(b"7 (x) S 1 2", "1000.0 0"), (b"7 (x) " + b"0 " * 30, "soon"),
                                         (b"", "1000.0 0")])
def test_a_stat_line_or_uptime_that_cannot_be_read_gives_no_time(tmp_path, line, uptime):
    (tmp_path / "uptime").write_text(uptime)
    assert started_from(line, str(tmp_path)) is None
    assert process_started(10 ** 9, str(tmp_path)) is None  # no such process


def scripted(code, answer):
    asked = []

    def run(argv):
        asked.append(list(argv))
        return code, answer, ""
    return run, asked


def test_a_units_main_process_and_the_files_changed_since_it_started(sleeper, tmp_path):
    pid, before, after = sleeper
    config = touched(tmp_path / "agent.json", after + 5)  # written after the start: a restart is due
    unit = touched(tmp_path / "kubecpu-agent.service", before - 60)
    run, asked = scripted(0, "%d\n" % pid)
    assert service_age("kubecpu-agent.service", [config, unit], run) == {
        "unit": "kubecpu-agent.service", "running": True, "changed_since_start": [config]}
    assert asked == [["systemctl", "show", "--property=MainPID", "--value", "kubecpu-agent.service"]]


@pytest.mark.parametrize("code,answer,running", [
    (0, "0\n", False),  # systemd runs no process of it: stopped, or never installed
    (1, "", None),  # systemd cannot be asked (not PID 1)
    (0, "MainPID=12\n", None),  # not what --value answers
    (0, "9" * 200, None),  # longer than a PID
])
def test_what_systemd_answers_when_the_unit_runs_nothing_or_cannot_say(tmp_path, code, answer, running):
    config = touched(tmp_path / "agent.json", time.time())
    run, _asked = scripted(code, answer)
    assert service_age("kubecpu-agent.service", [config], run) == {
        "unit": "kubecpu-agent.service", "running": running, "changed_since_start": []}


def test_a_unit_name_that_is_none_is_refused_before_systemctl_runs():
    run, asked = scripted(0, "1\n")
    with pytest.raises(ConfigError):
        service_age("--property=Id", [], run)
    assert asked == []
