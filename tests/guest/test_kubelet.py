"""The real kubelet beside kubecpu on the real server (tests/guest/kubelets.py runs it: 1.35.4, 1.36.3 and 1.37.2,
standalone, on containerd 2.1.9 with the systemd cgroup driver, configured as the kubelet role plans). Guaranteed
static pods, several running at once: the kubelet's checkpoint, and each container's cgroup and first process, are
what ``bin/kubecpu allocate`` predicts for the same node, the same order and the same kubelet version. On the
configuration the role plans (its /configz says so) the kubelet refuses a corrupt checkpoint in the words of
``bin/kubecpu state``; after ``state --rebuild --kubelet-stopped`` it starts again and every pod keeps its CPUs.

Machine: CPUs 2n and 2n+1 are one core; NUMA node 0 = CPUs 0-3, node 1 = CPUs 4-7."""

from __future__ import annotations

import json
import time

from conftest import cpus, kubecpu, settle, wait_for
from kubelets import (RELEASES, START_TIMEOUT, Kubelet, all_running, planned, remove_static_pods,
                      said_in)

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.kubelet_config import Desired

PODS = (("two", 2), ("one", 1), ("three", 3))  # Guaranteed static pods: name, CPUs


def test_the_kubelet_pins_static_pods_where_kubecpu_predicts(kubelet_binary, lab21, tmp_path):
    """Static policy, reserved CPU 0 (the role's reserved_cpus), no options: static pods of 2, 1 and 3 CPUs put into
    its manifest directory one after the other, each once the one before is admitted. Its checkpoint is kubecpu's
    state after the same allocations in the same order, field for field (its format and checksums are this kubelet
    version's), and each container runs on its CPUs."""
    minor, binary = kubelet_binary
    _change, config = planned(Desired(policy="static", reserved_cpus=CPUSet.parse("0")), minor, tmp_path, lab21)
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
        running = wait_for(lambda: all_running(lab21, uids.values()) or kubelet.proc.poll() is not None,
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
        remove_static_pods(lab21)


RECONCILE = 5  # seconds: PLANNED's cpuManagerReconcilePeriod
PLANNED = Desired(policy="static", reserved_cpus=CPUSet.parse("0"), reconcile_period="%ds" % RECONCILE,
                  policy_options={"full-pcpus-only": "true", "distribute-cpus-across-numa": "true"},
                  topology_manager_policy="restricted", topology_manager_scope="pod")
REPORTED = ("cpuManagerPolicy", "cpuManagerPolicyOptions", "reservedSystemCPUs", "cpuManagerReconcilePeriod",
            "topologyManagerPolicy", "topologyManagerScope")


def test_on_the_planned_configuration_a_corrupt_checkpoint_is_refused_as_kubecpu_says_and_a_rebuild_keeps_pods(
        kubelet_binary, lab21, tmp_path):
    """The kubelet starts on the configuration the role plans (policy, options, reservation, reconcile period, the
    Topology Manager's policy and scope): its /configz reports each as written. Two static pods of 2 CPUs run; the
    kubelet stops and its checkpoint's checksums are broken. ``bin/kubecpu state`` refuses the file in the words the
    kubelet then refuses to start with. ``state --rebuild --kubelet-stopped`` rebuilds it from what runs; the kubelet
    starts on it, and after two of its reconcile periods every pod runs the same container on the same CPUs."""
    minor, binary = kubelet_binary
    change, config = planned(PLANNED, minor, tmp_path, lab21)
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
        running = wait_for(lambda: all_running(lab21, uids) or kubelet.proc.poll() is not None, START_TIMEOUT,
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
        while time.monotonic() - began <= 2 * RECONCILE + 1:  # watched through two of its reconcile periods
            assert kubelet.proc.poll() is None, kubelet.log()
            assert kubelet.state()["entries"] == kept["entries"]
            time.sleep(0.5)
        got = kubelet.state()
        assert (got["entries"], got["defaultCpuSet"]) == (kept["entries"], kept["defaultCpuSet"])
        assert all_running(lab21, uids) == running  # the same containers: none restarted
        for uid in uids:
            settle(lab21, {"name": uid, "containers": {"app": running[uid]}}, cpus(kept["entries"][uid]["app"]))
    finally:
        kubelet.stop()
        remove_static_pods(lab21)
