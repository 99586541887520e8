"""The real kubelet beside kubecpu on the real server: kubelets 1.35.4, 1.36.3 and 1.37.2 built from their modules
(scripts/kubelet.sh; the guest stage shares them in), standalone (static pods from a manifest directory, no API
server) on containerd 2.1.9 with the systemd cgroup driver, its images local. The kubelet's configuration is what the
kubelet role's planning makes of a base configuration (``plan_change``, the core of the cpu_manager_kubelet_config
module that the role writes out). Guaranteed static pods, several running at once; the kubelet's checkpoint, and each
container's cgroup and first process, are what ``bin/kubecpu allocate`` predicts for the same node, the same order
and the same kubelet version.

Machine: CPUs 2n and 2n+1 are one core; NUMA node 0 = CPUs 0-3, node 1 = CPUs 4-7."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest
import yaml
from conftest import ROOT, cpus, kubecpu, lab_module, local_copy, settle, shared_build, wait_for

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.discovery import discover_sysfs
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.kubelet_config import Desired, plan_change

KUBELETS = os.path.join(ROOT, ".cache", "kubelet")  # kubelet-1.35, -1.36, -1.37 (scripts/guest.py shares them in)
RELEASES = {"1.35": "1.35.4", "1.36": "1.36.3", "1.37": "1.37.2"}
# A node's own settings, the role's input: the role changes only the CPU manager's keys. No API server (no
# kubeconfig: standalone), no server of its own, nothing evicted or collected on the guest's small disk and memory.
BASE = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "cgroupDriver": "systemd",
        "failSwapOn": False, "enableServer": False, "readOnlyPort": 0,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"}, "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99, "evictionHard": {"memory.available": "1Mi"}}
STATIC_POD = {"apiVersion": "v1", "kind": "Pod",
              "spec": {"hostNetwork": True, "containers": [{
                  "name": "app", "image": lab_module.BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                  "command": ["/bin/sleep", "infinity"]}]}}
START_TIMEOUT = 300  # a kubelet's start under emulation: about 25 s idle
PODS = (("two", 2), ("one", 1), ("three", 3))  # Guaranteed static pods: name, CPUs


class Kubelet:
    """One kubelet process in ``directory`` (its root directory, manifests and log there)."""

    def __init__(self, binary, directory, config):
        self.binary, self.dir = binary, directory
        self.manifests = os.path.join(directory, "manifests")
        self.root = os.path.join(directory, "root")
        self.checkpoint = os.path.join(self.root, "cpu_manager_state")
        self.config_path = os.path.join(directory, "config.yaml")
        os.makedirs(self.manifests, exist_ok=True)
        with open(self.config_path, "w", encoding="utf-8") as handle:  # as the role writes it (to_nice_yaml)
            yaml.safe_dump(dict(config, staticPodPath=self.manifests, podLogsDir=os.path.join(directory, "logs")),
                           handle, indent=2, sort_keys=False, default_flow_style=False)
        self.proc = None

    def start(self):
        with open(os.path.join(self.dir, "kubelet.log"), "ab") as log:
            self.proc = subprocess.Popen([self.binary, "--config", self.config_path, "--root-dir", self.root,
                                          "--v=2"], stdout=log, stderr=log, start_new_session=True)

    def state(self):
        try:
            with open(self.checkpoint, encoding="utf-8") as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return {}

    def add(self, name, count, order):
        pod = json.loads(json.dumps(STATIC_POD))
        pod["metadata"] = {"name": name, "namespace": "default", "uid": "%s-uid" % name}
        quantity = {"cpu": str(count), "memory": "32Mi"}
        pod["spec"]["containers"][0]["resources"] = {"requests": quantity, "limits": quantity}
        with open(os.path.join(self.manifests, "%d-%s.yaml" % (order, name)), "w", encoding="utf-8") as handle:
            yaml.safe_dump(pod, handle)
        return pod["metadata"]["uid"]

    def log(self):
        with open(os.path.join(self.dir, "kubelet.log"), encoding="utf-8", errors="replace") as handle:
            return handle.read()[-4000:]

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)


@pytest.fixture(params=sorted(RELEASES))
def kubelet_binary(request):
    return request.param, local_copy(shared_build(os.path.join(KUBELETS, "kubelet-%s" % request.param)))


def _all_running(lab, uids):
    """Pod UID -> its running container's ID, once every pod of ``uids`` has one (else None)."""
    running = {item.pod_uid: item.id for item in lab.cri.list_containers() if item.state == "CONTAINER_RUNNING"}
    return running if all(uid in running for uid in uids) else None


def test_the_kubelet_pins_static_pods_where_kubecpu_predicts(kubelet_binary, lab21, tmp_path):
    """Static policy, reserved CPU 0 (the role's reserved_cpus), no options: static pods of 2, 1 and 3 CPUs put into
    its manifest directory one after the other, each once the one before is admitted. Its checkpoint is kubecpu's
    state after the same allocations in the same order, field for field (its format and checksums are this kubelet
    version's), and each container runs on its CPUs."""
    minor, binary = kubelet_binary
    topology = discover_sysfs("/")
    change = plan_change(BASE, Desired(policy="static", reserved_cpus=CPUSet.parse("0")), topology, RELEASES[minor],
                         state=None, state_path=str(tmp_path / "root" / "cpu_manager_state"))
    config = dict(change.config, containerRuntimeEndpoint=lab21.endpoint)
    assert config["cpuManagerPolicy"] == "static" and config["reservedSystemCPUs"] == "0"
    kubelet = Kubelet(binary, str(tmp_path), config)
    predicted = str(tmp_path / "kubecpu-state")
    with open(str(tmp_path / "topology.json"), "w", encoding="utf-8") as handle:
        handle.write(json.dumps(kubecpu("topology")))
    uids = {}
    kubelet.start()
    try:
        wait_for(lambda: kubelet.state().get("policyName") == "static" or kubelet.proc.poll() is not None,
                 START_TIMEOUT, "kubelet %s writing its checkpoint" % minor)
        assert kubelet.proc.poll() is None, kubelet.log()
        # one at a time: each admitted (its CPUs in the checkpoint) before the next comes; with several in the
        # directory at its start the kubelet's order of admission is its own (1.35 took them by name)
        for order, (name, count) in enumerate(PODS):
            uids[name] = kubelet.add(name, count, order)
            pod = {"uid": uids[name], "name": name, "namespace": "default",
                   "containers": [{"name": "app", "cpu_request": str(count), "cpu_limit": str(count),
                                   "memory_request": "32Mi", "memory_limit": "32Mi"}]}
            (tmp_path / "pod.json").write_text(json.dumps(pod))
            kubecpu("allocate", "--topology", str(tmp_path / "topology.json"), "--state", predicted,
                    "--reserved-cpus", "0", "--kubelet-version", minor, "--pod", str(tmp_path / "pod.json"),
                    "--container", "app")
            wait_for(lambda uid=uids[name]: uid in kubelet.state().get("entries", {}) or kubelet.proc.poll(),
                     START_TIMEOUT, "kubelet %s admitting %s" % (minor, name))
        with open(predicted, encoding="utf-8") as handle:
            want = json.load(handle)
        running = wait_for(lambda: _all_running(lab21, uids.values()) or kubelet.proc.poll() is not None,
                           START_TIMEOUT, "kubelet %s running its %d static pods" % (minor, len(PODS)))
        assert kubelet.proc.poll() is None, kubelet.log()
        got = kubelet.state()
        assert got["entries"] == want["entries"], (got, want)
        assert got == want  # the whole file, its checksums included: kubecpu writes what this kubelet writes
        for name, count in PODS:
            settle(lab21, {"name": name, "containers": {"app": running[uids[name]]}},
                   cpus(got["entries"][uids[name]]["app"]))
            print("kubelet %s: %s (%d CPUs) on %s, kubecpu predicted %s" % (
                RELEASES[minor], name, count, got["entries"][uids[name]]["app"],
                want["entries"][uids[name]]["app"]))
    finally:
        kubelet.stop()
        for item in lab21.cri.list_pods():  # what the kubelet left running: removed as the kubelet would
            if item.namespace == "default":
                lab21.cri.remove_pod_sandbox(item.id)
