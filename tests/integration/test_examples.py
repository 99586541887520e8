"""Every module's EXAMPLES, run by ansible-playbook on localhost against a stand-in node: the recorded crictl 1.32
output (the examples' container and pod IDs are the recorded prod/web pod's), a fake cgroupfs, a fake sysfs with
128 CPUs on 2 NUMA nodes (isolcpus 4-63,68-127) and a NIC at 0000:3b:00.0, and a kubelet configuration. The host paths in the examples
are redirected to the stand-in's and the node options come from module_defaults; the CRI examples talk to the
stand-in through crictl (the gRPC backend has its own tests against the real containerd)."""

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
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import fake_sysfs
import fleet
import lab

MODULES = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "plugins", "modules")) if name.endswith(".py"))
NIC = "0000:3b:00.0"


def examples(module):
    with open(os.path.join(ROOT, "plugins", "modules", module + ".py"), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    return next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and getattr(node.targets[0], "id", "") == "EXAMPLES")


@pytest.fixture()
def stand_in(tmp_path):
    node = fake_crictl.make_node(str(tmp_path / "runtime"), cpus="0-127")
    root = str(tmp_path / "root")
    fake_sysfs.build(root, fake_sysfs.machine(2, 32, 2), isolated="4-63,68-127")
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
    (tools / "systemctl").write_text('#!/bin/sh\necho "$*" >> %s\n' % (tmp_path / "systemctl.log"))
    (tools / "systemctl").chmod(0o755)
    node.update(root=root, state=str(tmp_path / "state"), config=str(tmp_path / "config.yaml"),
                systemd=str(tmp_path / "systemd"), tools=str(tools),
                containerd_config=str(tmp_path / "containerd.toml"),
                kubelet_state=str(tmp_path / "kubelet_state"), dir=str(tmp_path))
    return node


def redirected(text, node):
    """The examples with the host's paths pointing into the stand-in node, CRI through the stand-in crictl."""
    lines = [line for line in text.splitlines() if "runtime_endpoint:" not in line]
    text = "\n".join(lines).replace("runtime: cri", "runtime: crictl")
    return (text.replace("/var/lib/kubelet/config.yaml", node["config"])
            .replace("/var/lib/kubelet/cpu_manager_state", node["kubelet_state"]))


@pytest.mark.parametrize("module", MODULES)
def test_the_examples_run(stand_in, module):
    tasks = yaml.safe_load(redirected(examples(module), stand_in))
    assert tasks and all(isinstance(task, dict) and task.get("name") for task in tasks)
    node_defaults = {"sysfs_root": stand_in["root"]}
    managed = dict(node_defaults, state_path=stand_in["state"], crictl_path=stand_in["crictl"],
                   cgroup_root=stand_in["cgroup"], kubelet_state_path=os.path.join(stand_in["dir"], "absent"))
    play = [{"name": "EXAMPLES of " + module, "hosts": "localhost", "gather_facts": False,
             "module_defaults": {"group/kubecpu.cpu_manager.cpu_manager": managed,
                                 "kubecpu.cpu_manager.cpu_topology_facts": node_defaults,
                                 "kubecpu.cpu_manager.cpu_manager_reservation": node_defaults,
                                 "kubecpu.cpu_manager.cpu_manager_kubelet_config": dict(
                                     node_defaults, state_path=stand_in["kubelet_state"]),
                                 "kubecpu.cpu_manager.cpu_manager_daemons": {  # drop-ins in the stand-in's directory
                                     "systemd_dir": stand_in["systemd"], "cgroup_root": stand_in["cgroup"],
                                     "sysfs_root": stand_in["root"]},
                                 "kubecpu.cpu_manager.cpu_manager_runtime_hook": {  # this machine's containerd 1.6
                                     "containerd_config": stand_in["containerd_config"], "python": sys.executable,
                                     "spec_path": os.path.join(stand_in["dir"], "kubecpu", "base-runtime-spec.json"),
                                     "kubecpu": os.path.join(ROOT, "bin", "kubecpu")}},
             "tasks": tasks}]
    playbook = os.path.join(stand_in["dir"], "examples.yml")
    with open(playbook, "w", encoding="utf-8") as handle:
        yaml.safe_dump(play, handle, sort_keys=False)
    env = dict(os.environ, PATH=stand_in["tools"] + os.pathsep + os.environ["PATH"],
               ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               ANSIBLE_STDOUT_CALLBACK="json")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable, playbook],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    result = json.loads(proc.stdout) if proc.stdout.startswith("{") else {}
    failed = [(task["task"]["name"], host.get("msg")) for play in result.get("plays", []) for task in play["tasks"]
              for host in task["hosts"].values() if host.get("failed")]
    assert proc.returncode == 0, failed or proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = [task["task"]["name"] for task in result["plays"][0]["tasks"]]
    assert ran == [task["name"] for task in tasks]  # every example ran, none skipped
    stats = result["stats"]["localhost"]
    assert stats["failures"] == 0 and stats["skipped"] == 0, stats
    if module == "cpu_manager_daemons":  # confined, then given back: reloaded each time, no drop-in left
        with open(os.path.join(stand_in["dir"], "systemctl.log"), encoding="utf-8") as handle:
            assert handle.read().split("\n")[:-1] == ["daemon-reload"] * 3
        assert not [files for _top, _dirs, files in os.walk(stand_in["systemd"]) if files]
