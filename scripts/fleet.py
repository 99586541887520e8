"""Builds a fleet of local "nodes" for the playbooks: each its own fake sysfs tree, state file and (kubelet nodes)
KubeletConfiguration, or (agent nodes) a stand-in crictl answering with the recorded crictl 1.32 output and a fake
cgroupfs; plus an inventory with ``ansible_connection: local``. Used by the Molecule localhost scenario, the report
test and the fleet benchmark.

    python scripts/fleet.py DIR [--nodes N] [--kinds K,...]   # writes DIR/inventory.yml and DIR/nodes/<name>/

Node kinds, in turn (the desired settings, group_vars in the inventory, are static with 2 reserved CPUs for the
kubelet and 1 for the agent):
- kubelet-none: the kubelet runs policy none today (state file policy none): the switch needs a migration;
- kubelet-static: already static with reservedSystemCPUs 0,8 and two pinned containers: nothing to do;
- agent: the agent has run one pass against the stand-in runtime (prod/web main pinned on CPUs 1-2);
- kubelet-moved: static with reservedSystemCPUs 1,9 and a container pinned on 0,8: the planner's 0,8
  reservation would make the kubelet reject its state file ("not all reserved cpus ...").
Kinds a fleet under failure adds (--kinds; never in the default turn):
- agent-misspelt-option: an agent node whose policy options name one the kubelet does not know;
- agent-missing-cpu: an agent node told to reserve CPU 7 on its 4 CPUs;
- unreachable: a node reached over SSH at a port of 127.0.0.1 where nothing listens.

Each node's machine (below kubecpu_sysfs_root) has systemd as PID 1 (proc/1/comm), as the preflight reads it; an
agent node's installation, configuration, metrics, hook and containerd paths are in its own directory, so a rollout
or a removal there never touches this machine's.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import subprocess
import sys
from typing import Any, Dict, List, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

importlib.import_module("conftest")  # makes ansible_collections.kubecpu.cpu_manager importable
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import fake_crictl  # noqa: E402
from ansible_collections.kubecpu.cpu_manager.tests.unit.support import fake_sysfs  # noqa: E402
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint import encode  # noqa: E402
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet  # noqa: E402
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState  # noqa: E402

KINDS = ("kubelet-none", "kubelet-static", "agent", "kubelet-moved")
FAILING_KINDS = ("agent-misspelt-option", "agent-missing-cpu", "unreachable")
MISSPELT_OPTION = "full-pcpus-onyl"
KUBEADM_CONFIG = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
evictionHard:
  memory.available: 100Mi
rotateCertificates: true
staticPodPath: /etc/kubernetes/manifests
"""
POD_A = "0b9e6a7c-5d1f-4c53-9a0e-5f1c2d3e4a01"
POD_B = "7f3c1e2d-9a8b-4c7d-8e6f-1a2b3c4d5e02"


def _write(path: str, data: Any) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb" if isinstance(data, bytes) else "w") as handle:
        handle.write(data)


def _state(policy: str, default: str, entries: Dict[Any, str]) -> bytes:
    state = CPUState(policy, CPUSet.parse(default))
    for (pod, name), cpus in entries.items():
        state.set(pod, name, CPUSet.parse(cpus))
    return encode(state)


def _machine(base: str, sockets: int, cores: int, threads: int) -> str:
    """The node's machine below base/root: its sysfs tree, and systemd as PID 1 (the preflight reads proc/1/comm)."""
    root = os.path.join(base, "root")
    fake_sysfs.build(root, fake_sysfs.machine(sockets, cores, threads))
    _write(os.path.join(root, "proc", "1", "comm"), "systemd\n")
    return root


def kubelet_node(base: str, kind: str) -> Dict[str, Any]:
    _machine(base, 2, 4, 2)  # 16 CPUs, 2 NUMA nodes
    config = KUBEADM_CONFIG
    if kind == "kubelet-none":
        state = _state("none", "", {})
    elif kind == "kubelet-static":
        config += "cpuManagerPolicy: static\nreservedSystemCPUs: 0,8\n"
        state = _state("static", "0-3,8-11", {(POD_A, "app"): "4,12", (POD_B, "db"): "5-7,13-15"})
    else:
        config += "cpuManagerPolicy: static\nreservedSystemCPUs: 1,9\n"
        state = _state("static", "1-7,9-15", {(POD_A, "app"): "0,8"})
    _write(os.path.join(base, "kubelet", "config.yaml"), config)
    _write(os.path.join(base, "kubelet", "cpu_manager_state"), state)
    return {"kubecpu_manager": "kubelet", "kubecpu_sysfs_root": os.path.join(base, "root"),
            "kubecpu_state_path": os.path.join(base, "kubelet", "cpu_manager_state"),
            "kubelet_cpu_manager_config_path": os.path.join(base, "kubelet", "config.yaml")}


def agent_node(base: str, kind: str = "agent") -> Dict[str, Any]:
    runtime = fake_crictl.make_node(os.path.join(base, "runtime"))
    _machine(base, 1, 4, 1)  # 4 CPUs, like the stand-in
    state = os.path.join(base, "kubecpu", "cpu_manager_state")
    os.makedirs(os.path.dirname(state), exist_ok=True)
    subprocess.run([os.path.join(ROOT, "bin", "kubecpu"), "reconcile", "--state", state, "--num-reserved", "1",
                    "--sysfs-root", os.path.join(base, "root"), "--crictl", runtime["crictl"],
                    "--cgroup-root", runtime["cgroup"], "--kubelet-state", os.path.join(base, "kubelet", "absent")],
                   check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, KUBECPU_PYTHON=sys.executable))
    node = {"kubecpu_manager": "agent", "kubecpu_sysfs_root": os.path.join(base, "root"), "kubecpu_state_path": state,
            "cpu_manager_agent_crictl_path": runtime["crictl"], "cpu_manager_agent_cgroup_root": runtime["cgroup"],
            "cpu_manager_agent_kubelet_config_path": os.path.join(base, "kubelet", "config.yaml"),
            "cpu_manager_agent_kubelet_state_path": os.path.join(base, "kubelet", "cpu_manager_state"),
            "cpu_manager_agent_config_path": os.path.join(base, "etc", "agent.json"),
            "cpu_manager_agent_install_dir": os.path.join(base, "opt"),
            "cpu_manager_agent_metrics_path": os.path.join(base, "kubecpu", "metrics", "kubecpu.prom"),
            "cpu_manager_agent_hook_spec_path": os.path.join(base, "etc", "base-runtime-spec.json"),
            "cpu_manager_agent_containerd_config": os.path.join(base, "containerd", "config.toml"),
            "cpu_manager_agent_crio_hooks_dir": os.path.join(base, "crio", "hooks.d"),
            "cpu_manager_agent_containerd_service": ""}
    if kind == "agent-misspelt-option":
        node["cpu_manager_agent_policy_options"] = {MISSPELT_OPTION: "true"}
    elif kind == "agent-missing-cpu":
        node["cpu_manager_agent_reserved_cpus"] = "7"
    return node


def unreachable_node() -> Dict[str, Any]:
    """A node at a port of 127.0.0.1 where nothing listens (one the kernel just gave out, closed again)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return {"kubecpu_manager": "agent", "ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": port,
            "ansible_user": "root",
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                                       "-o ConnectTimeout=5 -o BatchMode=yes"}


def build(directory: str, nodes: int, python: str, kinds: Sequence[str] = KINDS) -> Dict[str, Any]:
    hosts: Dict[str, Dict[str, Any]] = {}
    for index in range(nodes):
        kind = kinds[index % len(kinds)]
        name = "node%03d-%s" % (index, kind)
        base = os.path.join(directory, "nodes", name)
        if kind == "unreachable":
            hosts[name] = unreachable_node()
        elif kind.startswith("agent"):
            hosts[name] = agent_node(base, kind)
        else:
            hosts[name] = kubelet_node(base, kind)
    inventory = {"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": python,
                 "kubelet_cpu_manager_policy": "static", "kubelet_cpu_manager_num_reserved": 2,
                 "kubelet_cpu_manager_kubelet_version": "Kubernetes v1.33.2",
                 "cpu_manager_agent_num_reserved": 1},
        "hosts": hosts}}
    path = os.path.join(directory, "inventory.yml")
    _write(path, json.dumps(inventory, indent=1) + "\n")  # JSON is YAML
    return inventory


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--python", default=sys.executable, help="ansible_python_interpreter of the nodes")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="node kinds, taken in turn (default: the first four; the failing ones on request)")
    args = parser.parse_args(argv)
    kinds = args.kinds.split(",")
    if not kinds or set(kinds) - set(KINDS + FAILING_KINDS):
        parser.error("--kinds: choose from %s" % ", ".join(KINDS + FAILING_KINDS))
    build(os.path.abspath(args.directory), args.nodes, args.python, kinds)
    print(os.path.join(os.path.abspath(args.directory), "inventory.yml"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
