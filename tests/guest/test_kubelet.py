"""The real kubelet beside kubecpu on the real server: kubelets 1.35.4, 1.36.3 and 1.37.2 built from their modules
(scripts/kubelet.sh; the guest stage shares them in), standalone (static pods from a manifest directory, no API
server) on containerd 2.1.9 with the systemd cgroup driver, its images local. The kubelet's configuration is what the
kubelet role's planning makes of a base configuration (``plan_change``, the core of the cpu_manager_kubelet_config
module that the role writes out). Guaranteed static pods, several running at once; the kubelet's checkpoint, and each
container's cgroup and first process, are what ``bin/kubecpu allocate`` predicts for the same node, the same order
and the same kubelet version. The kubelet runs what the planning wrote (its /configz says so), refuses what the
planning refuses in the same words, and refuses a corrupt checkpoint in the words of ``bin/kubecpu state``; after
``state --rebuild --kubelet-stopped`` it starts again and every pod keeps its CPUs.

Machine: CPUs 2n and 2n+1 are one core; NUMA node 0 = CPUs 0-3, node 1 = CPUs 4-7."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import time
import urllib.request

import pytest
import yaml
from conftest import ROOT, cpus, kubecpu, lab_module, local_copy, settle, shared_build, wait_for

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.discovery import discover_sysfs
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.kubelet_config import Desired, plan_change

KUBELETS = os.path.join(ROOT, ".cache", "kubelet")  # kubelet-1.35, -1.36, -1.37 (scripts/guest.py shares them in)
RELEASES = {"1.35": "1.35.4", "1.36": "1.36.3", "1.37": "1.37.2"}
# A node's own settings, the role's input: the role changes only the CPU manager's keys. No API server (no
# kubeconfig: standalone); its server on (a self-signed certificate, anyone allowed) for /configz only; nothing
# evicted or collected on the guest's small disk and memory.
BASE = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "cgroupDriver": "systemd",
        "failSwapOn": False, "enableServer": True, "readOnlyPort": 0,
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
        self.proc, self.offset = None, 0

    def start(self):
        with open(os.path.join(self.dir, "kubelet.log"), "ab") as log:
            self.offset = log.tell()  # this start's output begins here
            self.proc = subprocess.Popen([self.binary, "--config", self.config_path, "--root-dir", self.root,
                                          "--cert-dir", os.path.join(self.dir, "pki"), "--v=2"],
                                         stdout=log, stderr=log, start_new_session=True)

    def healthy(self):
        """Its health endpoint answers ok (the container manager, the CPU manager with it, has started)."""
        try:
            with urllib.request.urlopen("http://127.0.0.1:10248/healthz", timeout=5) as reply:
                return reply.read() == b"ok"
        except OSError:
            return False

    def up(self, minor):
        """Started and healthy (fails with its log when it exits instead)."""
        wait_for(lambda: self.proc.poll() is not None or self.healthy(), START_TIMEOUT, "kubelet %s healthy" % minor)
        assert self.proc.poll() is None, self.log()

    def refused(self, minor):
        """It exits at its start; what it logged on this start."""
        wait_for(lambda: self.proc.poll() is not None, START_TIMEOUT, "kubelet %s refusing to start" % minor)
        assert self.proc.returncode != 0
        with open(os.path.join(self.dir, "kubelet.log"), encoding="utf-8", errors="replace") as handle:
            handle.seek(self.offset)
            return handle.read()

    def configz(self):
        """The configuration it runs, as it reports it (/configz on its server, which may listen a little after its
        health endpoint answers)."""
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # its own self-signed certificate

        def ask():
            try:
                with urllib.request.urlopen("https://127.0.0.1:10250/configz", timeout=30, context=context) as reply:
                    return json.loads(reply.read())["kubeletconfig"]
            except OSError:
                return None
        reported = wait_for(lambda: ask() or self.proc.poll() is not None, START_TIMEOUT, "its /configz")
        assert reported is not True, self.log()  # it exited instead
        return reported

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

    def log(self, size=4000):
        with open(os.path.join(self.dir, "kubelet.log"), encoding="utf-8", errors="replace") as handle:
            return handle.read()[-size:]

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)


@pytest.fixture(params=sorted(RELEASES))
def kubelet_binary(request):
    return request.param, local_copy(shared_build(os.path.join(KUBELETS, "kubelet-%s" % request.param)))


def _planned(desired, minor, tmp_path, lab):
    """The kubelet's configuration as the kubelet role plans ``desired`` for this node and kubelet version."""
    change = plan_change(BASE, desired, discover_sysfs("/"), RELEASES[minor], state=None,
                         state_path=str(tmp_path / "root" / "cpu_manager_state"))
    return change, dict(change.config, containerRuntimeEndpoint=lab.endpoint)


def _remove_static_pods(lab):
    for item in lab.cri.list_pods():  # what the kubelet left running: removed as the kubelet would
        if item.namespace == "default":
            lab.cri.remove_pod_sandbox(item.id)


def said_in(text, log):
    """``text`` in the kubelet's log: as it is, or inside a quoted value of a structured line (err="...")."""
    return text in log or text.replace("\\", "\\\\").replace('"', '\\"') in log


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
    _change, config = _planned(Desired(policy="static", reserved_cpus=CPUSet.parse("0")), minor, tmp_path, lab21)
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
        _remove_static_pods(lab21)


RECONCILE = 5  # seconds: PLANNED's cpuManagerReconcilePeriod
PLANNED = Desired(policy="static", reserved_cpus=CPUSet.parse("0"), reconcile_period="%ds" % RECONCILE,
                  policy_options={"full-pcpus-only": "true", "distribute-cpus-across-numa": "true"},
                  topology_manager_policy="restricted", topology_manager_scope="pod")
REPORTED = ("cpuManagerPolicy", "cpuManagerPolicyOptions", "reservedSystemCPUs", "cpuManagerReconcilePeriod",
            "topologyManagerPolicy", "topologyManagerScope")


ZERO = CPUSet.parse("0")
REFUSED = (  # what the role is asked for; the same keys written straight into the kubelet's configuration
    ("the none policy with an option", Desired(policy="none", policy_options={"full-pcpus-only": "true"}),
     {"cpuManagerPolicy": "none", "cpuManagerPolicyOptions": {"full-pcpus-only": "true"}}),
    ("the static policy with nothing reserved", Desired(policy="static"), {"cpuManagerPolicy": "static"}),
    ("reserved CPUs the node does not have", Desired(policy="static", reserved_cpus=CPUSet.parse("0,9")),
     {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0,9"}),
    ("an option no kubelet knows", Desired(policy="static", reserved_cpus=ZERO, policy_options={"bogus": "true"}),
     {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0", "cpuManagerPolicyOptions": {"bogus": "true"}}),
    ("a Topology Manager policy no kubelet knows", Desired(policy="static", reserved_cpus=ZERO,
                                                           topology_manager_policy="bogus"),
     {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0", "topologyManagerPolicy": "bogus"}),
)
ROLE_ADVICE = " (set reserved_cpus or num_reserved)"  # what the role adds after the kubelet's words


def test_what_the_kubelet_refuses_the_role_refuses_first_in_its_words(kubelet_binary, lab21, tmp_path):
    """Each configuration the kubelet refuses at its start, planned by the role first: the role refuses it, and its
    reason (less the role's advice on what to set) is the kubelet's, word for word."""
    minor, binary = kubelet_binary
    for n, (what, desired, keys) in enumerate(REFUSED):
        with pytest.raises(ConfigError) as planned:
            _planned(desired, minor, tmp_path, lab21)
        reason = str(planned.value)
        reason = reason[:-len(ROLE_ADVICE)] if reason.endswith(ROLE_ADVICE) else reason
        kubelet = Kubelet(binary, str(tmp_path / str(n)), dict(BASE, containerRuntimeEndpoint=lab21.endpoint, **keys))
        kubelet.start()
        try:
            log = kubelet.refused(minor)
        finally:
            kubelet.stop()
        assert said_in(reason, log), "%s: the role says %r; kubelet %s said:\n%s" % (what, reason, minor, log[-3000:])
        print("kubelet %s, %s: %s" % (RELEASES[minor], what, reason))


def test_on_the_planned_configuration_a_corrupt_checkpoint_is_refused_as_kubecpu_says_and_a_rebuild_keeps_pods(
        kubelet_binary, lab21, tmp_path):
    """The kubelet starts on the configuration the role plans (policy, options, reservation, reconcile period, the
    Topology Manager's policy and scope): its /configz reports each as written. Two static pods of 2 CPUs run; the
    kubelet stops and its checkpoint's checksums are broken. ``bin/kubecpu state`` refuses the file in the words the
    kubelet then refuses to start with. ``state --rebuild --kubelet-stopped`` rebuilds it from what runs; the kubelet
    starts on it, and after two of its reconcile periods every pod runs the same container on the same CPUs."""
    minor, binary = kubelet_binary
    change, config = _planned(PLANNED, minor, tmp_path, lab21)
    kubelet = Kubelet(binary, str(tmp_path), config)
    (tmp_path / "topology.json").write_text(json.dumps(kubecpu("topology")))
    node = ["--topology", str(tmp_path / "topology.json"), "--state", kubelet.checkpoint, "--reserved-cpus", "0",
            "--kubelet-version", minor, "--option", "full-pcpus-only", "--option", "distribute-cpus-across-numa"]
    kubelet.start()
    try:
        kubelet.up(minor)
        running = kubelet.configz()
        assert {key: running.get(key) for key in REPORTED} == {key: change.config.get(key) for key in REPORTED}
        for gate, on in (change.config.get("featureGates") or {}).items():
            assert running["featureGates"][gate] == on
        print("kubelet %s /configz: %s" % (RELEASES[minor], {key: running.get(key) for key in REPORTED}))
        kubelet.up(minor)
        uids = [kubelet.add(name, 2, order) for order, name in enumerate(("two", "pair"))]
        running = wait_for(lambda: _all_running(lab21, uids) or kubelet.proc.poll() is not None, START_TIMEOUT,
                           "kubelet %s running its static pods" % minor)
        assert kubelet.proc.poll() is None, kubelet.log()
        kubelet.stop()
        kept = kubelet.state()
        assert set(kept["entries"]) == set(uids)
        broken = dict(kept, checksum=kept["checksum"] + 1)
        if "dataChecksum" in kept:  # 1.37's V4: its data's checksum too
            broken["dataChecksum"] = kept["dataChecksum"] + 1
        with open(kubelet.checkpoint, "w", encoding="utf-8") as handle:
            json.dump(broken, handle, separators=(",", ":"))
        said = kubecpu("state", *node, check=False)
        assert said.returncode != 0 and said.stderr.strip()
        kubelet.start()
        assert said_in(said.stderr.strip(), kubelet.refused(minor)), said.stderr
        print("kubelet %s and kubecpu refuse it: %s" % (RELEASES[minor], said.stderr.strip()))

        kubecpu("state", "--rebuild", "--kubelet-stopped", *node, "--runtime", "cri", "--runtime-endpoint",
                lab21.endpoint, "--runtime-timeout", "30")
        kubelet.start()
        kubelet.up(minor)
        began = time.monotonic()
        time.sleep(2 * RECONCILE + 1)  # the observation the test is about: two of its reconcile periods pass
        assert time.monotonic() - began > 2 * RECONCILE and kubelet.proc.poll() is None, kubelet.log()
        got = kubelet.state()
        assert (got["entries"], got["defaultCpuSet"]) == (kept["entries"], kept["defaultCpuSet"])
        assert _all_running(lab21, uids) == running  # the same containers: none restarted
        for uid in uids:
            settle(lab21, {"name": uid, "containers": {"app": running[uid]}}, cpus(kept["entries"][uid]["app"]))
    finally:
        kubelet.stop()
        _remove_static_pods(lab21)
