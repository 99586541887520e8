"""What a rollout needs on a node (operations/preflight.py), on real files: a fake machine's sysfs tree and its
/proc/1/comm, the stand-in crictl answering the recorded `crictl version`, real interpreters (this one, and
scripts answering as Python 3.8 and 2.7 would), state files written by the core. Every check is made whatever failed
before it, and a refused node names each of its problems."""

from __future__ import annotations

import json
import os
import stat
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint import encode
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import NodeConfig
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.preflight import (
    COMM_BYTES, MIN_PYTHON, preflight, python_version)
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import fake_crictl, fake_sysfs

POD = "0b9e6a7c-5d1f-4c53-9a0e-5f1c2d3e4a01"
FAULTS = ("not root", "init", "old python", "no runtime", "missing cpu", "held cpu", "bad option")


def interpreter(directory, name, answer, stream="stdout", code=0):
    """An executable that answers --version as an old interpreter would."""
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("#!/bin/sh\necho '%s' >&%d\nexit %d\n" % (answer, 1 if stream == "stdout" else 2, code))
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return path


def write_state(path, default, entries):
    state = CPUState("static", CPUSet.parse(default))
    for (pod, container), cpus in entries.items():
        state.set(pod, container, CPUSet.parse(cpus))
    with open(path, "wb") as handle:
        handle.write(encode(state))


class Node:
    """A 4-CPU machine (one socket, single-thread cores) below ``root``: its sysfs, PID 1's name, a stand-in
    crictl, and the agent's state file path (none written unless asked)."""

    def __init__(self, directory, init="systemd"):
        self.dir = str(directory)
        self.root = os.path.join(self.dir, "root")
        fake_sysfs.build(self.root, fake_sysfs.machine(1, 4, 1))
        if init is not None:
            os.makedirs(os.path.join(self.root, "proc", "1"), exist_ok=True)
            with open(os.path.join(self.root, "proc", "1", "comm"), "w", encoding="utf-8") as handle:
                handle.write(init + "\n")
        self.crictl = fake_crictl.make_node(os.path.join(self.dir, "runtime"))["crictl"]
        self.state = os.path.join(self.dir, "cpu_manager_state")

    def config(self, **settings):
        values = {"sysfs_root": self.root, "state_path": self.state, "crictl_path": self.crictl,
                  "num_reserved": 1}
        values.update(settings)
        return NodeConfig.from_mapping(values, read_only=True)

    def check(self, manager="agent", euid=0, python=sys.executable, **settings):
        return preflight(self.config(**settings), manager, python=python, euid=euid)


def failed(result):
    return {check["check"]: check["detail"] for check in result["checks"] if not check["ok"]}


def test_a_node_that_has_everything_passes_and_says_what_it_found(tmp_path):
    node = Node(tmp_path)
    result = node.check()
    assert result["problems"] == [] and failed(result) == {}
    assert [check["check"] for check in result["checks"]] == ["root", "systemd", "python", "runtime", "reservation"]
    assert result["runtime"] == {"name": "containerd", "version": "1.6.20~ds1", "api_version": "v1"}
    assert result["python"] == "Python %d.%d.%d" % sys.version_info[:3]
    assert result["reserved_cpus"] == "0" and result["state_found"] is False


@pytest.mark.parametrize("manager, settings, check, words", [
    ("agent", {"euid": 1000}, "root", "not root (uid 1000): the agent writes /opt/kubecpu"),
    ("kubelet", {"euid": 1000}, "root", "not root (uid 1000): the kubelet role writes the kubelet's configuration"),
    ("agent", {"init": "bash"}, "systemd", "PID 1 is bash, not systemd: kubecpu-agent.service needs systemd"),
    ("kubelet", {"init": "tini"}, "systemd", "PID 1 is tini, not systemd: the kubelet's unit"),
    ("agent", {"init": None}, "systemd", "cannot read PID 1's name"),
    ("agent", {"python": "/nonexistent/python3"}, "python", "/nonexistent/python3 does not exist"),
    ("agent", {"python": "python3"}, "python", "python3 is not an absolute path"),
    ("agent", {"python": ("old", "Python 3.8.10", "stdout", 0)}, "python",
     "is Python 3.8.10: kubecpu needs Python 3.9 or newer"),
    ("agent", {"python": ("two", "Python 2.7.18", "stderr", 0)}, "python", "is Python 2.7.18"),
    ("agent", {"python": ("broken", "Segmentation fault", "stderr", 139)}, "python", "(exit 139)"),
    ("agent", {"crictl_path": "/nonexistent/crictl"}, "runtime", "the container runtime does not answer its version"),
    ("agent", {"runtime": "cri", "runtime_endpoint": "unix:///nonexistent/containerd.sock"}, "runtime",
     "the container runtime does not answer its version"),
    ("agent", {"reserved_cpus": "7"}, "reservation",
     "the agent's settings do not fit this node: reserved CPUs lists CPU(s) 7 that are not in the topology"),
    ("agent", {"policy_options": {"full-pcpus-onyl": "true"}}, "reservation", 'unknown CPU Manager Policy option: "full-pcpus-onyl"'),
    ("agent", {"num_reserved": 0}, "reservation", "the agent's settings do not fit this node"),
    ("agent", {"held": True}, "reservation",
     "reserved CPUs 0 are not free: the agent's state file %s gives them to " + POD + "/app (0-1)"),
    ("agent", {"corrupt": True}, "reservation", "the agent's state file cannot be used"),
])
def test_each_missing_need_is_named(tmp_path, manager, settings, check, words):
    """A node missing one thing is refused for that thing alone, in words that say what and why."""
    settings = dict(settings)
    node = Node(tmp_path, init=settings.pop("init", "systemd"))
    if isinstance(settings.get("python"), tuple):
        settings["python"] = interpreter(node.dir, *settings["python"])
    if settings.pop("held", False):  # CPU 0, the one a count of 1 reserves, pinned to a container
        write_state(node.state, "2-3", {(POD, "app"): "0-1"})
    if settings.pop("corrupt", False):
        with open(node.state, "w", encoding="utf-8") as handle:
            handle.write('{"policyName":"static","defaultCpuSet":"0-3","checksum":1}')
    result = node.check(manager, **settings)
    assert list(failed(result)) == [check]
    assert (words % node.state if "%s" in words else words) in failed(result)[check]
    assert result["problems"] == [failed(result)[check]]


def test_the_kubelet_role_needs_no_runtime_and_no_agent_settings(tmp_path):
    """Beside a kubelet only root, systemd and the modules' Python are asked: a node without crictl and without a
    reservation the agent could use passes."""
    node = Node(tmp_path)
    result = node.check("kubelet", crictl_path="/nonexistent/crictl", reserved_cpus="7")
    assert result["problems"] == [] and [c["check"] for c in result["checks"]] == ["root", "systemd", "python"]
    assert result["runtime"] is None and result["reserved_cpus"] is None and result["state_found"] is None


def test_mode_nri_does_not_ask_the_cri_runtime(tmp_path):
    node = Node(tmp_path)
    result = preflight(node.config(crictl_path="/nonexistent/crictl"), "agent", python=sys.executable, euid=0,
                       check_runtime=False)
    assert result["problems"] == [] and "runtime" not in [c["check"] for c in result["checks"]]


def test_a_state_file_the_agent_wrote_with_free_reserved_cpus_passes(tmp_path):
    node = Node(tmp_path)
    write_state(node.state, "0,3", {(POD, "app"): "1-2"})
    result = node.check()
    assert result["problems"] == [] and result["reserved_cpus"] == "0" and result["state_found"] is True


def test_an_unknown_manager_is_a_configuration_error(tmp_path):
    with pytest.raises(ConfigError, match="manager must be one of agent, kubelet, got 'both'"):
        preflight(Node(tmp_path).config(), "both")


def test_pid_1s_name_is_read_bounded(tmp_path):
    node = Node(tmp_path, init="x" * (COMM_BYTES * 4))
    assert "PID 1 is %s, not systemd" % ("x" * COMM_BYTES) in failed(node.check())["systemd"]


@pytest.mark.parametrize("answer, version", [
    ("Python 3.11.2", (3, 11, 2)), ("Python 3.9", (3, 9, 0)), ("Python 3.13.0rc1", (3, 13, 0)),
])
def test_python_version_reads_what_interpreters_answer(tmp_path, answer, version):
    path = interpreter(str(tmp_path), "python", answer)
    assert python_version(path) == (version, answer.split("rc")[0])
    assert version >= MIN_PYTHON


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(faults=st.sets(st.sampled_from(FAULTS)))
def test_every_check_is_made_whatever_failed_before_it(tmp_path_factory, faults):
    """Any set of faults on one node: one problem per failed check, none for the others; the reservation's three
    faults are one check (the first it meets is named)."""
    node = Node(tmp_path_factory.mktemp("node"), init="bash" if "init" in faults else "systemd")
    settings = {"euid": 1000 if "not root" in faults else 0}
    if "old python" in faults:
        settings["python"] = interpreter(node.dir, "old", "Python 3.8.10")
    if "no runtime" in faults:
        settings["crictl_path"] = "/nonexistent/crictl"
    if "missing cpu" in faults:
        settings["reserved_cpus"] = "9"
    if "bad option" in faults:
        settings["policy_options"] = {"no-such-option": "true"}
    if "held cpu" in faults:
        write_state(node.state, "2-3", {(POD, "app"): "0-1"})
    result = node.check(**settings)
    want = {name for name, fault in (("root", "not root"), ("systemd", "init"), ("python", "old python"),
                                     ("runtime", "no runtime")) if fault in faults}
    if faults & {"missing cpu", "held cpu", "bad option"}:
        want.add("reservation")
    assert set(failed(result)) == want
    assert len(result["problems"]) == len(want) and len(result["checks"]) == 5
    json.dumps(result)  # a module result as it is


def test_with_the_agents_unit_it_says_which_files_changed_after_the_agent_started(tmp_path):
    """A run cut off between writing the agent's configuration and its restart: the preflight names the file, and the
    agent role restarts the agent onto it. Without a unit, nothing is said."""
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.discovery import run_command

    node = Node(tmp_path)
    started = int(time.time()) - 100
    config = tmp_path / "agent.json"
    config.write_text("{}\n")
    os.utime(config, (started + 50, started + 50))

    def systemd(argv):  # systemd as PID 1 answers for the unit; the rest runs for real
        if argv[0] == "systemctl":
            return 0, "MainPID=4242\nExecMainStartTimestamp=@%d\nNeedDaemonReload=no\n" % started, ""
        return run_command(argv)
    result = preflight(node.config(), "agent", python=sys.executable, euid=0, run=systemd,
                       service="kubecpu-agent.service", service_files=[str(config)])
    assert result["problems"] == [] and result["service"] == {
        "unit": "kubecpu-agent.service", "running": True, "changed_since_start": [str(config)], "needs_reload": False}
    assert node.check()["service"] is None
