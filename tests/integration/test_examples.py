"""Every module's EXAMPLES, run by ansible-playbook on localhost against a stand-in node: the recorded crictl 1.32
output (the examples' container and pod IDs are the recorded prod/web pod's), a fake cgroupfs, a fake sysfs with
128 CPUs on 2 NUMA nodes (isolcpus 4-63,68-127) and a NIC at 0000:3b:00.0, a kubelet configuration and a health URL.
The host paths in the examples are redirected to the stand-in's and the node options come from module_defaults; the
CRI examples talk to the stand-in through crictl (the gRPC backend has its own tests against the real containerd).
One ansible-playbook run holds every module's examples: a play each, on a stand-in node of its own (a name of its
own for localhost, so that one module's failure stops only its play)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest
import yaml

from test_modules import ROOT, collections_path

sys.path.insert(0, os.path.join(ROOT, "scripts"))
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import fake_crictl
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import fake_sysfs, health_url
import fleet
import lab

MODULES = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "plugins", "modules")) if name.endswith(".py"))
NIC = "0000:3b:00.0"


def examples(module):
    with open(os.path.join(ROOT, "plugins", "modules", module + ".py"), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    return next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and getattr(node.targets[0], "id", "") == "EXAMPLES")


def stand_in(tmp_path):
    node = fake_crictl.make_node(str(tmp_path / "runtime"), cpus="0-127")
    root = str(tmp_path / "root")
    fake_sysfs.build(root, fake_sysfs.machine(2, 32, 2), isolated="4-63,68-127")
    os.makedirs(os.path.join(root, "proc", "1"))  # systemd as the machine's PID 1 (cpu_manager_preflight reads it)
    with open(os.path.join(root, "proc", "1", "comm"), "w", encoding="utf-8") as handle:
        handle.write("systemd\n")
    device = os.path.join(root, "sys", "bus", "pci", "devices", NIC)
    os.makedirs(device)
    with open(os.path.join(device, "numa_node"), "w", encoding="utf-8") as handle:
        handle.write("1\n")
    (tmp_path / "config.yaml").write_text(fleet.KUBEADM_CONFIG)
    (tmp_path / "kubelet_state").write_bytes(fleet._state("static", "0-1,3-127", {(fleet.POD_A, "app"): "2"}))
    containerd = lab.CONFIG.format(dir=tmp_path / "containerd", pause=lab.PAUSE_IMAGE, systemd="false", base_spec="")
    (tmp_path / "containerd.toml").write_text(containerd)
    tools = tmp_path / "bin"  # a stand-in systemctl (this host has no systemd): it notes its arguments
    tools.mkdir()
    (tools / "systemctl").write_text('#!/bin/sh\necho "$*" >> %s\ncase "$*" in *NRestarts*) echo 0 ;; esac\n'
                                     % (tmp_path / "systemctl.log"))
    (tools / "systemctl").chmod(0o755)
    node.update(root=root, state=str(tmp_path / "state"), config=str(tmp_path / "config.yaml"),
                systemd=str(tmp_path / "systemd"), tools=str(tools),
                containerd_config=str(tmp_path / "containerd.toml"),
                kubelet_state=str(tmp_path / "kubelet_state"), dir=str(tmp_path), metrics=str(tmp_path / "kubecpu.prom"))
    return node


def agent(node):
    """The agent itself (``bin/kubecpu reconcile --loop``) on a stand-in node: it pins the recorded pods through the
    stand-in crictl and rewrites its metrics after every pass, as on a real node."""
    argv = [sys.executable, os.path.join(ROOT, "bin", "kubecpu"), "reconcile", "--loop", "--period", "2s",
            "--sysfs-root", node["root"], "--state", node["state"], "--runtime", "crictl", "--crictl", node["crictl"],
            "--cgroup-root", node["cgroup"], "--kubelet-state", os.path.join(node["dir"], "absent"),
            "--num-reserved", "1", "--metrics-path", node["metrics"]]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def redirected(text, node):
    """The examples with the host's paths pointing into the stand-in node, CRI through the stand-in crictl."""
    lines = [line for line in text.splitlines() if "runtime_endpoint:" not in line]
    text = "\n".join(lines).replace("runtime: cri", "runtime: crictl")
    return (text.replace("/var/lib/kubelet/config.yaml", node["config"])
            .replace("/var/lib/kubelet/cpu_manager_state", node["kubelet_state"]))


def play(module, node, health):
    """The play of ``module``'s EXAMPLES on the stand-in ``node``, and its tasks as written."""
    tasks = yaml.safe_load(redirected(examples(module), node))
    node_defaults = {"sysfs_root": node["root"]}
    managed = dict(node_defaults, state_path=node["state"], crictl_path=node["crictl"],
                   cgroup_root=node["cgroup"], kubelet_state_path=os.path.join(node["dir"], "absent"))
    return {"name": "EXAMPLES of " + module, "hosts": module, "gather_facts": False,
            "environment": {"PATH": node["tools"] + os.pathsep + os.environ["PATH"]},  # its stand-in systemctl
            "module_defaults": {"group/kubecpu.cpu_manager.cpu_manager": managed,
                                "kubecpu.cpu_manager.cpu_topology_facts": node_defaults,
                                "kubecpu.cpu_manager.cpu_manager_preflight": managed,
                                "kubecpu.cpu_manager.cpu_manager_reservation": node_defaults,
                                "kubecpu.cpu_manager.cpu_manager_kubelet_config": dict(
                                    node_defaults, state_path=node["kubelet_state"]),
                                "kubecpu.cpu_manager.cpu_manager_daemons": {  # drop-ins in the stand-in's directory
                                    "systemd_dir": node["systemd"], "cgroup_root": node["cgroup"],
                                    "sysfs_root": node["root"]},
                                "kubecpu.cpu_manager.cpu_manager_kubelet_health": {  # a stand-in health URL
                                    "url": health, "settle": 0},
                                "kubecpu.cpu_manager.cpu_manager_agent_health": {  # the agent below, on the stand-in
                                    "metrics_path": node["metrics"]},
                                "kubecpu.cpu_manager.cpu_manager_runtime_hook": {  # this machine's containerd 1.6
                                    "containerd_config": node["containerd_config"], "python": sys.executable,
                                    "spec_path": os.path.join(node["dir"], "kubecpu", "base-runtime-spec.json"),
                                    "kubecpu": os.path.join(ROOT, "bin", "kubecpu")}},
            "tasks": tasks}, tasks


@pytest.fixture(scope="module")
def examples_run(tmp_path_factory):
    """Every module's examples in one ansible-playbook run: module -> (its stand-in, its tasks, its play's result,
    its host's stats), and the run itself."""
    nodes = {module: stand_in(tmp_path_factory.mktemp(module)) for module in MODULES}
    running = agent(nodes["cpu_manager_agent_health"])  # the agent the health check gates, for the whole run
    try:
        with health_url.serve() as base:  # the stand-in kubelet's health URL, for the whole run
            return _examples_run(nodes, base + "/healthz", tmp_path_factory)
    finally:
        running.terminate()
        running.wait(timeout=60)


def _examples_run(nodes, health, tmp_path_factory):
    plays = {module: play(module, node, health) for module, node in nodes.items()}
    work = tmp_path_factory.mktemp("examples")
    (work / "inventory.ini").write_text("".join(
        "%s ansible_connection=local ansible_python_interpreter=%s\n" % (module, sys.executable) for module in MODULES))
    with open(work / "examples.yml", "w", encoding="utf-8") as handle:
        yaml.safe_dump([plays[module][0] for module in MODULES], handle, sort_keys=False)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="json")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                           str(work / "inventory.ini"), str(work / "examples.yml")],
                          capture_output=True, text=True, env=env, timeout=900, check=False)
    result = json.loads(proc.stdout) if proc.stdout.startswith("{") else {}
    played = {item["play"]["name"]: item for item in result.get("plays", [])}
    return {module: (nodes[module], plays[module][1], played.get("EXAMPLES of " + module),
                     result.get("stats", {}).get(module)) for module in MODULES}, proc


@pytest.mark.parametrize("module", MODULES)
def test_the_examples_run(examples_run, module):
    ran, proc = examples_run
    node, tasks, played, stats = ran[module]
    assert tasks and all(isinstance(task, dict) and task.get("name") for task in tasks)
    assert played is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    failed = [(task["task"]["name"], task["hosts"][module].get("msg")) for task in played["tasks"]
              if task["hosts"].get(module, {}).get("failed")]
    assert not failed and stats is not None, failed or proc.stderr[-3000:]
    assert [task["task"]["name"] for task in played["tasks"]] == [task["name"] for task in tasks]  # none skipped
    assert stats["failures"] == 0 and stats["skipped"] == 0 and stats["unreachable"] == 0, stats
    if module == "cpu_manager_agent_health":  # the count read first, then a pass of the agent waited for
        before, gate = (task["hosts"][module] for task in played["tasks"][:2])
        assert before["active"] is None and not before["fresh"] and gate["active"] and gate["fresh"], (before, gate)
        assert gate["errors"] == 0 and os.path.exists(node["state"])  # the agent pinned the recorded pods
    if module == "cpu_manager_daemons":  # confined, then given back: reloaded each time, no drop-in left
        with open(os.path.join(node["dir"], "systemctl.log"), encoding="utf-8") as handle:
            assert handle.read().split("\n")[:-1] == ["daemon-reload"] * 3
        assert not [files for _top, _dirs, files in os.walk(node["systemd"]) if files]
