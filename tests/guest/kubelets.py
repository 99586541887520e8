"""The real kubelet as the guest tests run it: kubelets 1.35.4, 1.36.3 and 1.37.2 built from their modules
(scripts/kubelet.sh; the guest stage shares them in, conftest's ``kubelet_binary`` gives one), standalone (static pods
from a manifest directory, no API server) on containerd with the systemd cgroup driver, its images local, its
configuration what the kubelet role's planning (``plan_change``) makes of a node's own settings."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.request

import yaml
from conftest import kubecpu, lab_module, wait_for
from kubelet_files import BASE, RELEASES, SLEEP, static_pod

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.discovery import discover_sysfs
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.kubelet_config import plan_change

START_TIMEOUT = 300  # a kubelet's start under emulation: about 25 s idle
# How often a test looks at a kubelet: each look is a request to it (its /pods over TLS), a CRI list or a read of its
# checkpoint, and what is waited for takes seconds here; looking 20 times a second kept the kubelet and containerd
# busy on the guest's CPUs that the things waited for need
STEP = 0.5
# The serving certificate and key the first kubelet made (its --cert-dir holds none, so it makes a self-signed pair:
# two RSA 2048 keys), given to every later kubelet's --cert-dir, where a kubelet takes the pair it finds. One such key
# took 0.7-6.9 s in the guest beside the suite (2026-12-03), and the tests start some 30 kubelets in directories of
# their own; what they check does not depend on the serving certificate.
SERVING_PAIR = "/var/tmp/kubecpu-kubelet-pki"
SERVING_FILES = ("kubelet.crt", "kubelet.key")


def wait_on(condition, timeout, what):
    """``wait_for`` at the kubelet's pace (STEP)."""
    return wait_for(condition, timeout, what, step=STEP)


RECONCILE = 5  # seconds: the cpuManagerReconcilePeriod of the tests that watch a kubelet keep its pods
REPORTED = ("cpuManagerPolicy", "cpuManagerPolicyOptions", "reservedSystemCPUs", "cpuManagerReconcilePeriod",
            "topologyManagerPolicy", "topologyManagerScope")  # what the role sets, as /configz reports it


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
        self.pki = os.path.join(directory, "pki")

    def start(self):
        if not os.path.exists(self.pki) and os.path.isdir(SERVING_PAIR):
            shutil.copytree(SERVING_PAIR, self.pki)
        with open(os.path.join(self.dir, "kubelet.log"), "ab") as log:
            self.offset = log.tell()  # this start's output begins here
            self.proc = subprocess.Popen([self.binary, "--config", self.config_path, "--root-dir", self.root,
                                          "--cert-dir", self.pki, "--v=2"],
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
        wait_on(lambda: self.proc.poll() is not None or self.healthy(), START_TIMEOUT, "kubelet %s healthy" % minor)
        assert self.proc.poll() is None, self.log()

    def refused(self, minor):
        """It exits at its start; what it logged on this start."""
        wait_on(lambda: self.proc.poll() is not None, START_TIMEOUT, "kubelet %s refusing to start" % minor)
        assert self.proc.returncode != 0
        with open(os.path.join(self.dir, "kubelet.log"), encoding="utf-8", errors="replace") as handle:
            handle.seek(self.offset)
            return handle.read()

    def server(self, path):
        """GET ``path`` on its server (its own self-signed certificate, anyone allowed): the JSON, or None while it
        does not answer."""
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        try:
            with urllib.request.urlopen("https://127.0.0.1:10250" + path, timeout=30, context=context) as reply:
                return json.loads(reply.read())
        except OSError:
            return None

    def configz(self):
        """The configuration it runs, as it reports it (/configz on its server, which may listen a little after its
        health endpoint answers)."""
        reported = wait_on(lambda: self.server("/configz") or self.proc.poll() is not None, START_TIMEOUT,
                           "its /configz")
        assert reported is not True, self.log()  # it exited instead
        return reported["kubeletconfig"]

    def runs(self, config):
        """It reports (/configz) each CPU-manager and Topology-Manager key that ``config`` sets, and each feature
        gate, as ``config`` has them (a key left out takes the kubelet's default); those keys as it reports them."""
        running = self.configz()
        reported = {key: running.get(key) for key in REPORTED}
        assert {key: reported[key] for key in REPORTED if key in config} == {
            key: config[key] for key in REPORTED if key in config}, (reported, config)
        for gate, on in (config.get("featureGates") or {}).items():
            assert running["featureGates"][gate] == on, (gate, running["featureGates"])
        return reported

    def rejected(self, uid, minor):
        """The status of static pod ``uid`` once the kubelet has rejected it at admission (its /pods: a kubelet with
        no API server reports its static pods' status there)."""
        def failed():
            pods = self.server("/pods") or {}
            for pod in pods.get("items") or []:
                if pod["metadata"].get("uid") == uid and pod.get("status", {}).get("phase") == "Failed":
                    return pod["status"]
            return self.proc.poll() is not None
        status = wait_on(failed, START_TIMEOUT, "kubelet %s rejecting %s" % (minor, uid))
        assert status is not True, self.log()  # it exited instead
        return status

    def planned_on_checkpoint(self, config, desired, minor):
        """The kubelet role's planning of ``desired`` for kubelet ``minor`` on a node whose configuration is
        ``config`` and whose checkpoint is this kubelet's file, as it is now."""
        with open(self.checkpoint, "rb") as handle:
            return plan_change(config, desired, discover_sysfs("/"), RELEASES[minor], state=handle.read(),
                               state_path=self.checkpoint)

    def state(self):
        try:
            with open(self.checkpoint, encoding="utf-8") as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return {}

    def add(self, name, count, order, command=tuple(SLEEP)):
        """Static pod ``name`` (``count`` CPUs, running ``command``) into the manifest directory, as file ``order``;
        its UID."""
        return self.add_pod(static_pod(name, count, lab_module.BUSYBOX_IMAGE, command), order)

    def add_pod(self, pod, order):
        """The static pod ``pod`` (its manifest) into the manifest directory, as file ``order``; its UID."""
        name = pod["metadata"]["name"]
        with open(os.path.join(self.manifests, "%d-%s.yaml" % (order, name)), "w", encoding="utf-8") as handle:
            yaml.safe_dump(pod, handle)
        return pod["metadata"]["uid"]

    def remove(self, name, order):
        os.unlink(os.path.join(self.manifests, "%d-%s.yaml" % (order, name)))

    def first_line(self, uid):
        """What the pod's container printed first (its last start's log), or None before it did."""
        logs = sorted(glob.glob(os.path.join(self.dir, "logs", "*_%s" % uid, "app", "*.log")), key=os.path.getmtime)
        if not logs:
            return None
        with open(logs[-1], encoding="utf-8") as handle:
            line = handle.readline()
        return line.split(" F ", 1)[1].strip() if line.endswith("\n") and " F " in line else None

    def log(self, size=4000):
        with open(os.path.join(self.dir, "kubelet.log"), encoding="utf-8", errors="replace") as handle:
            return handle.read()[-size:]

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)
        self.keep_serving_pair()

    def keep_serving_pair(self):
        """The pair this kubelet made, kept for the next ones (SERVING_PAIR) when none is kept yet: only a whole one
        (the kubelet writes its files in place, and a kubelet stopped while it wrote them leaves a torn pair)."""
        cert, key = (os.path.join(self.pki, name) for name in SERVING_FILES)
        if os.path.isdir(SERVING_PAIR):
            return
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)  # both whole, and the key the cert's
        except (OSError, ssl.SSLError):
            return
        partial = SERVING_PAIR + ".partial"
        shutil.rmtree(partial, ignore_errors=True)
        os.makedirs(partial, mode=0o700)
        for name in SERVING_FILES:
            shutil.copy2(os.path.join(self.pki, name), partial)
        os.rename(partial, SERVING_PAIR)


def planned(desired, minor, tmp_path, lab):
    """The kubelet's configuration as the kubelet role plans ``desired`` for this node and kubelet version."""
    change = plan_change(BASE, desired, discover_sysfs("/"), RELEASES[minor], state=None,
                         state_path=str(tmp_path / "root" / "cpu_manager_state"))
    return change, dict(change.config, containerRuntimeEndpoint=lab.endpoint)


def predict(tmp_path, uid, count, *node, check=True):
    """``bin/kubecpu allocate`` for the static pod ``uid`` (one container "app" of ``count`` CPUs) on ``node`` (its
    flags): the JSON it printed, or (``check`` off) what it did."""
    (tmp_path / "pod.json").write_text(json.dumps({
        "uid": uid, "name": uid[:-len("-uid")], "namespace": "default",
        "containers": [{"name": "app", "cpu_request": str(count), "cpu_limit": str(count), "memory_request": "32Mi",
                        "memory_limit": "32Mi"}]}))
    return kubecpu("allocate", *node, "--pod", str(tmp_path / "pod.json"), "--container", "app", check=check)


def remove_static_pods(lab):
    for item in lab.cri.list_pods():  # what the kubelet left running: removed as the kubelet would
        if item.namespace == "default":
            lab.cri.remove_pod_sandbox(item.id)


def said_in(text, log):
    """``text`` in the kubelet's log: as it is, or inside a quoted value of a structured line (err="...")."""
    return text in log or text.replace("\\", "\\\\").replace('"', '\\"') in log


def all_running(lab, uids):
    """Pod UID -> its running container's ID, once every pod of ``uids`` has one (else None)."""
    running = {item.pod_uid: item.id for item in lab.cri.list_containers() if item.state == "CONTAINER_RUNNING"}
    return running if all(uid in running for uid in uids) else None


def watched_through_two_reconcile_periods(kubelet, kept):
    """The kubelet running and its checkpoint's entries and default set ``kept``'s, looked at through two of its
    reconcile periods (RECONCILE)."""
    began = time.monotonic()
    while time.monotonic() - began <= 2 * RECONCILE + 1:
        assert kubelet.proc.poll() is None, kubelet.log()
        assert kubelet.state()["entries"] == kept["entries"]
        time.sleep(0.5)
    got = kubelet.state()
    assert (got["entries"], got["defaultCpuSet"]) == (kept["entries"], kept["defaultCpuSet"])
    return got
