"""The agent loop through its seams (clock and wait): a pass every period, back-off while the runtime is down, a clean
stop on SIGTERM after the pass in progress, metrics after every pass, and its durations."""

from __future__ import annotations

import io
import json
import os
import signal
import struct

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import KubeletPinsError, RuntimeUnavailableError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import StateError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.topology import Topology
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.plan import Plan
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.services.agent import Agent
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated_cpus
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import NodeConfig
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.factory import kubelet_housekeeping
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.checkpoints import checkpoint_file
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_sysfs import build, machine
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.proc_irq import affinity, proc_irq


class Node:
    """The manager as the agent sees it: passes that fail while ``down`` counts down, then succeed."""

    def __init__(self, down=0):
        self.down = down
        self.passes = 0
        self.closed = 0
        self.topology = Topology(generated_cpus(1, 2, 1))
        self.policy = type("P", (), {"name": "static", "reserved": CPUSet.parse("0")})()
        self.store = type("S", (), {"path": "/state"})()
        self.runtime = type("R", (), {"name": "fake"})()

    def reconcile(self, apply=True):
        self.passes += 1
        if self.down:
            self.down -= 1
            raise RuntimeUnavailableError("connection refused")
        plan = Plan(CPUState("static", CPUSet.parse("0-1")))
        plan.runtime_calls = {"list": 1}
        return plan

    def close(self):
        self.closed += 1


class Clock:
    def __init__(self):
        self.now = 100.0
        self.waits = []

    def __call__(self):
        return self.now

    def wait(self, _fds, seconds):
        self.waits.append(seconds)
        self.now += seconds


def agent(node, clock, tmp_path=None, **kwargs):
    log = io.StringIO()
    metrics = str(tmp_path / "kubecpu.prom") if tmp_path else None
    return Agent(node, 10.0, log, metrics, clock=clock, wait=clock.wait, **kwargs), log


def events(log):
    return [json.loads(line) for line in log.getvalue().splitlines()]


def test_a_pass_every_period():
    node, clock = Node(), Clock()
    loop, log = agent(node, clock, max_passes=4)
    assert loop.run() == 0
    assert node.passes == 4 and clock.waits == [10.0, 10.0, 10.0] and node.closed == 1
    assert [e["msg"] for e in events(log)][-1] == "agent stopped"


def test_back_off_doubles_up_to_the_maximum_while_the_runtime_is_down_then_resets():
    node, clock = Node(down=5), Clock()
    loop, log = agent(node, clock, max_passes=8, max_backoff=30.0)
    loop.run()
    assert clock.waits == [10.0, 20.0, 30.0, 30.0, 30.0, 10.0, 10.0]
    assert loop.failures == 5
    errors = [e for e in events(log) if e["level"] == "error"]
    assert len(errors) == 5 and errors[0]["msg"] == "container runtime unavailable: connection refused"
    assert [e["msg"] for e in events(log) if e["level"] == "warning"][:3] == [
        "retrying in 10.0s", "retrying in 20.0s", "retrying in 30.0s"]


def test_a_back_off_is_waited_out_whole_as_the_log_says_even_when_cgroups_come_and_go():
    """Issue 64: with the cgroup watch, a new container's cgroup woke the back-off, so the retries came at 0, 0, 0, 1,
    2, 4 s while the log said 10, 20, 30 s. A back-off watches only for signals: each retry comes when its line said."""
    node, clock = Node(down=3), Clock()
    watch = Watch()
    watched = []

    def wait(fds, seconds):
        watched.append(watch.fileno() in fds)
        clock.waits.append(seconds)
        clock.now += seconds
        watch.pending = True  # a container cgroup comes during every wait
        return [watch.fileno()] if watch.fileno() in fds else []

    log = io.StringIO()
    loop = Agent(node, 10.0, log, None, clock=clock, wait=wait, wakers=[watch], max_passes=4, max_backoff=30.0)
    loop.run()
    assert clock.waits == [10.0, 20.0, 30.0] and watched == [False, False, False]
    assert [e["msg"] for e in events(log) if e["level"] == "warning"] == [
        "retrying in 10.0s", "retrying in 20.0s", "retrying in 30.0s"]


def test_sigterm_stops_after_the_pass_in_progress_and_restores_the_handlers():
    node, clock = Node(), Clock()

    def wait(fd, seconds):
        clock.wait(fd, seconds)
        if len(clock.waits) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # during the second wait: the handler only records it

    before = signal.getsignal(signal.SIGTERM)
    loop = Agent(node, 10.0, io.StringIO(), None, clock=clock, wait=wait)
    assert loop.run() == 0
    assert node.passes == 2 and node.closed == 1  # no pass after the signal
    assert signal.getsignal(signal.SIGTERM) == before
    said = [e["msg"] for e in events(loop.log)]
    assert "received SIGTERM, stopped after the pass in progress" in said and said[-1] == "agent stopped"


def test_metrics_after_every_pass_and_every_failure(tmp_path):
    node, clock = Node(down=1), Clock()
    loop, _log = agent(node, clock, tmp_path, max_passes=2)
    loop.run()
    text = (tmp_path / "kubecpu.prom").read_text()
    assert 'kubecpu_reconcile_passes_total{result="failure"} 1' in text
    assert 'kubecpu_reconcile_passes_total{result="success"} 1' in text
    assert 'kubecpu_runtime_calls_total{call="list"} 1' in text


def test_other_failures_are_logged_and_retried_too():
    node, clock = Node(), Clock()
    calls = []

    def broken(apply=True):
        calls.append(apply)
        raise StateError("default cpuset cannot be empty")

    node.reconcile = broken
    loop, log = agent(node, clock, max_passes=2)
    loop.run()
    assert calls == [True, True] and [e["msg"] for e in events(log) if e["level"] == "error"] == [
        "default cpuset cannot be empty"] * 2


def test_sigterm_during_a_pass_lets_it_finish_and_waits_no_more():
    node, clock = Node(), Clock()
    real = node.reconcile

    def reconcile(apply=True):
        plan = real(apply)
        if node.passes == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return plan

    node.reconcile = reconcile
    loop, log = agent(node, clock)
    assert loop.run() == 0
    assert node.passes == 2 and clock.waits == [10.0] and loop.passes == 2
    assert events(log)[-1] == dict(events(log)[-1], msg="agent stopped", passes=2, failed_passes=0)


class Watch:
    """A watch whose descriptor is a pipe the test writes to."""

    def __init__(self):
        self.read_fd, self.write_fd = os.pipe()
        self.pending = False

    def fileno(self):
        return self.read_fd

    def changed(self):
        found, self.pending = self.pending, False
        return found


def test_a_cgroup_event_starts_a_pass_at_once_and_created_containers_are_followed():
    node, clock = Node(), Clock()
    watch = Watch()
    created = iter([0, 1, 1] + [0] * 9)
    real = node.reconcile

    def reconcile(apply=True):
        plan = real(apply)
        plan.counts["created"] = next(created)
        return plan

    node.reconcile = reconcile

    def wait(fds, seconds):
        clock.waits.append(seconds)
        if len(clock.waits) == 1:  # a container cgroup appears during the first wait
            watch.pending = True
            return [watch.fileno()]
        clock.now += seconds
        return []

    loop = Agent(node, 10.0, io.StringIO(), None, clock=clock, wait=wait, wakers=[watch], max_passes=12)
    loop.run()
    # woken at once; followed every 20 ms while it was created and as it started (the list moved), then twice as far
    # apart each pass the list stays still, until FOLLOW_WINDOW (2 s) after the wake; then the period
    assert clock.waits == pytest.approx([10.0, 0.02, 0.02, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 10.0])
    assert loop.woken == 1 and node.passes == 12


def test_a_removal_is_followed_until_the_runtime_lists_the_container_no_more():
    """Issue 24: a removed pod's cgroup goes (a wake) while the runtime still lists its container, stopped; the list
    moves once more when the container goes from it, and the pass that sees that releases the CPUs. Passes follow a
    moving list after a wake (FOLLOW_WINDOW), so that pass comes at once, not a period later."""
    node, clock = Node(), Clock()
    watch = Watch()
    listings = iter([(1, 1), (1, 1), (1, 0)] + [(0, 0)] * 8)  # (containers, running): still listed, stopped, gone
    real = node.reconcile

    def reconcile(apply=True):
        plan = real(apply)
        plan.counts["containers"], plan.counts["running"] = next(listings)
        return plan

    node.reconcile = reconcile

    def wait(fds, seconds):
        clock.waits.append(seconds)
        if len(clock.waits) == 1:  # the pod's cgroup goes during the first wait
            watch.pending = True
            return [watch.fileno()]
        clock.now += seconds
        return []

    loop = Agent(node, 10.0, io.StringIO(), None, clock=clock, wait=wait, wakers=[watch], max_passes=11)
    loop.run()
    # the woken pass sees it still running (the list did not move); the next ones see it stop, then go: each a moving
    # list, followed at once; then, the list still, further and further apart until the window ends
    assert clock.waits == pytest.approx([10.0, 0.02, 0.02, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28])


def test_any_failure_of_a_pass_is_a_log_line_and_a_metric_never_the_agents_end(tmp_path):
    """A runtime's bytes can make any exception (issue 23: ``ValueError`` from a grpc-status of "²" ended the agent):
    the pass fails, the agent logs it with its type, counts it, backs off and goes on."""
    node, clock = Node(), Clock()
    raised = [ValueError("invalid literal for int() with base 10: '²'"), UnicodeDecodeError("utf-8", b"\xff", 0, 1, "x"),
              struct.error("unpack requires a buffer of 4 bytes")]
    real = node.reconcile

    def hostile(apply=True):
        if raised:
            raise raised.pop(0)
        return real(apply)

    node.reconcile = hostile
    loop, log = agent(node, clock, tmp_path, max_passes=4)
    assert loop.run() == 0 and loop.failures == 3 and loop.passes == 4
    errors = [e["msg"] for e in events(log) if e["level"] == "error"]
    assert errors[0] == "the pass failed: ValueError: invalid literal for int() with base 10: '²'"
    assert errors[1].startswith("the pass failed: UnicodeDecodeError") and errors[2].startswith("the pass failed: error")
    text = (tmp_path / "kubecpu.prom").read_text()
    assert 'kubecpu_peer_errors_total{kind="pass",peer="fake"} 3' in text
    assert 'kubecpu_reconcile_passes_total{result="success"} 1' in text


def test_while_the_kubelet_pins_cpus_the_agent_steps_aside_and_says_so_once(tmp_path):
    """Passes that find the kubelet pinning (``KubeletPinsError``) are not failures: no back-off, one warning, and a
    line when kubecpu manages the CPUs again."""
    node, clock = Node(), Clock()
    real, aside = node.reconcile, [2]

    def pinned(apply=True):
        if aside[0]:
            aside[0] -= 1
            raise KubeletPinsError("the kubelet pins CPUs on this node itself (/k says policy static)")
        return real(apply)

    node.reconcile = pinned
    loop, log = agent(node, clock, tmp_path, max_passes=3)
    assert loop.run() == 0 and loop.failures == 0
    said = [(e["level"], e["msg"]) for e in events(log) if "kubelet" in e["msg"]]
    assert said == [("warning", "the kubelet pins CPUs on this node itself (/k says policy static)"),
                    ("info", "the kubelet no longer pins CPUs: kubecpu manages them again")]
    assert clock.waits[:2] == [10.0, 10.0]  # the period, not a back-off
    assert 'kubecpu_reconcile_passes_total{result="success"} 3' in (tmp_path / "kubecpu.prom").read_text()


def test_the_loop_runs_the_housekeeper_beside_a_kubelet_that_pins(tmp_path):
    """The same loop, metrics and confinement around ``KubeletHousekeeping``: the kubelet's checkpoint read each pass."""
    root = build(str(tmp_path / "machine"), machine(2, 2, 2))
    irq = proc_irq(os.path.join(root, "proc", "irq"), {24: "0-7"})
    (tmp_path / "kubelet").write_bytes(checkpoint_file("0-5", {"pod-a": {"app": "6-7"}}))
    config = NodeConfig.from_mapping({"sysfs_root": root, "kubelet_state_path": str(tmp_path / "kubelet"),
                                      "state_path": str(tmp_path / "own"), "irq_isolation": "exclusive"})
    loop, log = agent(kubelet_housekeeping(config), Clock(), tmp_path, max_passes=2)
    assert loop.run() == 0
    assert affinity(irq, 24) == "0-5"
    started = events(log)[0]
    assert started["policy"] == "static" and started["runtime"] == "?"
    with open(tmp_path / "kubecpu.prom", encoding="utf-8") as handle:
        text = handle.read()
    assert "kubecpu_irq_affinity_updates_total 2\n" in text and "kubecpu_irq_affinity_refused 0\n" in text
    assert 'kubecpu_reconcile_passes_total{result="success"} 2\n' in text


def _unavailable_errors():
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cri_grpc import status_error
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.crictl import classify

    return [RuntimeUnavailableError("connection refused"),
            status_error("UNAVAILABLE", "connection error: unix:///run/x.sock: no such file or directory", "list", "",
                         "unix:///run/x.sock"),
            classify("list", "", "validate service connection: connection refused")]


@pytest.mark.parametrize("error", _unavailable_errors(), ids=["bare", "cri", "crictl"])
def test_every_runtime_error_says_container_runtime_unavailable_once(error):
    """Issue 64: every failed pass logged ``container runtime unavailable: container runtime unavailable: ...`` (the
    CRI and crictl backends' errors already say it, the agent said it again). Said once, whichever said it."""
    node, clock = Node(down=1), Clock()

    def reconcile(apply=True):
        raise error

    node.reconcile = reconcile
    loop, log = agent(node, clock, max_passes=1)
    loop.run()
    message = next(e["msg"] for e in events(log) if e["level"] == "error")
    assert message.startswith("container runtime unavailable: ") and message.count("runtime unavailable") == 1
