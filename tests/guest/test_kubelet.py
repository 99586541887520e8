"""The real kubelet beside kubecpu on the real server (tests/guest/kubelets.py runs it: 1.35.4, 1.36.3 and 1.37.2,
standalone, on containerd 2.1.9 with the systemd cgroup driver, configured as the kubelet role plans). Guaranteed
static pods, several running at once: each kubelet's checkpoint, and each container's cgroup and first process, are
what ``bin/kubecpu allocate`` predicts for the same node, the same order and the same kubelet version, and an upgrade
1.35 -> 1.36 -> 1.37 with the pods running keeps every pod where it was. On the configuration the role plans (its
/configz says so) the kubelet refuses a corrupt checkpoint in the words of ``bin/kubecpu state``; after ``state
--rebuild --kubelet-stopped`` it starts again and every pod keeps its CPUs.

Machine: CPUs 2n and 2n+1 are one core; NUMA node 0 = CPUs 0-3, node 1 = CPUs 4-7."""

from __future__ import annotations

import json
import os

from conftest import cpus, kubecpu, settle
from kubelets import (RECONCILE, RELEASES, START_TIMEOUT, Kubelet, all_running, planned, predict,
                      remove_static_pods, said_in, wait_on, watched_through_two_reconcile_periods)

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.kubelet_config import Desired

# Guaranteed static pods (name, CPUs), each admitted by the kubelet version named, one after the other: reserved
# CPU 0 leaves 7, all of them exclusive in the end
RESERVED_0 = Desired(policy="static", reserved_cpus=CPUSet.parse("0"))
UPGRADE = (("1.35", (("two", 2), ("one", 1))), ("1.36", (("three", 3),)), ("1.37", (("last", 1),)))


def test_each_kubelet_pins_where_kubecpu_predicts_and_an_upgrade_keeps_every_pod(kubelet_binaries, lab21, tmp_path):
    """Static policy, reserved CPU 0 (the role's reserved_cpus), no options. Kubelet 1.35.4 admits static pods of 2
    and 1 CPUs, put into its manifest directory one after the other (each once the one before is admitted); then it
    is upgraded, with its pods running, to 1.36.3, which admits a pod of 3 CPUs, and to 1.37.2, which admits one of 1.
    Before each upgrade ``bin/kubecpu state --kubelet-version`` of the next version takes the older file (checkpoint
    V2 -> V3 -> V4), as does the role's planning (no migration); the next kubelet starts on it and keeps every pod:
    the same container on the same CPUs. After each admission its checkpoint is kubecpu's state after the same
    allocations in the same order with the same version, field for field (that version's format and checksums), and
    each container runs on its CPUs. Last, full-pcpus-only is switched on as the role plans it (a restart, no
    migration): 1.37.2 starts on its checkpoint and keeps every pod, those of 1 CPU too."""
    (tmp_path / "topology.json").write_text(json.dumps(kubecpu("topology")))
    predicted = str(tmp_path / "kubecpu-state")
    uids, kubelet, older = {}, None, None  # older: the running kubelet's minor and configuration
    try:
        for minor, pods in UPGRADE:
            _change, config = planned(RESERVED_0, minor, tmp_path, lab21)
            assert config["cpuManagerPolicy"] == "static" and config["reservedSystemCPUs"] == "0"
            if older is not None:  # the upgrade: the older kubelet's file as the newer one will take it
                kubelet.stop()
                kept, running = kubelet.state(), all_running(lab21, uids.values())
                taken = kubecpu("state", "--topology", str(tmp_path / "topology.json"), "--state", kubelet.checkpoint,
                                "--reserved-cpus", "0", "--kubelet-version", minor)  # fails on a refusal
                assert taken["entries"] == kept["entries"], taken
                change = kubelet.planned_on_checkpoint(older[1], RESERVED_0, minor)  # the role's, for the new version
                assert (change.verdict_before, change.verdict_after, change.changed_keys) == (None, None, [])
                print("kubelet %s -> %s: the role plans no change and no migration (it writes %s)" % (
                    RELEASES[older[0]], RELEASES[minor], change.kubelet.writes))
            kubelet, older = Kubelet(kubelet_binaries[minor], str(tmp_path), config), (minor, config)
            kubelet.start()
            kubelet.up(minor)
            if uids:
                wait_on(lambda: kubelet.state().get("entries") == kept["entries"] or kubelet.proc.poll(),
                        START_TIMEOUT, "kubelet %s keeping the pods of %s" % (minor, sorted(uids)))
                assert all_running(lab21, uids.values()) == running  # the same containers: none restarted
                print("kubelet %s started on the older file: %s" % (RELEASES[minor], kubelet.state()))
            for name, count in pods:
                uids[name] = kubelet.add(name, count, len(uids))
                predict(tmp_path, uids[name], count, "--topology", str(tmp_path / "topology.json"), "--state",
                        predicted, "--reserved-cpus", "0", "--kubelet-version", minor)
                wait_on(lambda uid=uids[name]: uid in kubelet.state().get("entries", {}) or kubelet.proc.poll(),
                        START_TIMEOUT, "kubelet %s admitting %s" % (minor, name))
            with open(predicted, encoding="utf-8") as handle:
                want = json.load(handle)
            running = wait_on(lambda: all_running(lab21, uids.values()) or kubelet.proc.poll() is not None,
                              START_TIMEOUT, "kubelet %s running its %d static pods" % (minor, len(uids)))
            assert kubelet.proc.poll() is None, kubelet.log()
            got = kubelet.state()
            assert got["entries"] == want["entries"], (got, want)
            assert got == want  # the whole file, its checksums included: kubecpu writes what this kubelet writes
            for name in uids:
                settle(lab21, {"name": name, "containers": {"app": running[uids[name]]}},
                       cpus(got["entries"][uids[name]]["app"]))
            print("kubelet %s: %s; kubecpu predicted %s" % (RELEASES[minor], got["entries"], want["entries"]))
        kubelet = whole_cores_switched_on(kubelet, older, kubelet_binaries, lab21, tmp_path, uids)
    finally:
        if kubelet is not None:
            kubelet.stop()
        remove_static_pods(lab21)


WHOLE_CORES = Desired(policy="static", reserved_cpus=CPUSet.parse("0"), reconcile_period="%ds" % RECONCILE,
                      policy_options={"full-pcpus-only": "true"})


def whole_cores_switched_on(kubelet, older, binaries, lab, tmp_path, uids):
    """``full-pcpus-only`` switched on beside running pods of 1 CPU (one, last): the role's planning changes the
    option (and the reconcile period) and needs no migration, so the role restarts the kubelet on the checkpoint it
    has; the kubelet keeps every container it has there (its Allocate says "container already present in state,
    skipping" before any alignment check): the same containers on the same CPUs through two of its reconcile
    periods. The kubelet role's rollout makes this restart over SSH (tests/guest_host/test_kubelet_role.py, for the
    reservation); here its plan and the kubelet's start on it. The kubelet now running."""
    minor, config = older
    kubelet.stop()
    kept, running = kubelet.state(), all_running(lab, uids.values())
    assert sorted(len(cpus(entry["app"])) for entry in kept["entries"].values()) == [1, 1, 2, 3]
    change = kubelet.planned_on_checkpoint(config, WHOLE_CORES, minor)
    assert (change.verdict_before, change.verdict_after) == (None, None)
    assert sorted(change.changed_keys) == ["cpuManagerPolicyOptions", "cpuManagerReconcilePeriod"]
    kubelet = Kubelet(binaries[minor], str(tmp_path), dict(change.config, containerRuntimeEndpoint=lab.endpoint))
    kubelet.start()
    kubelet.up(minor)
    print("kubelet %s with full-pcpus-only: /configz %s" % (RELEASES[minor], kubelet.runs(change.config)))
    watched_through_two_reconcile_periods(kubelet, kept)
    assert all_running(lab, uids.values()) == running  # the same containers: none restarted
    return kubelet


PLANNED = Desired(policy="static", reserved_cpus=CPUSet.parse("0"), reconcile_period="%ds" % RECONCILE,
                  policy_options={"full-pcpus-only": "true", "distribute-cpus-across-numa": "true"},
                  topology_manager_policy="restricted", topology_manager_scope="pod")


def test_on_the_planned_configuration_a_corrupt_checkpoint_is_refused_as_kubecpu_says_and_a_rebuild_keeps_pods(
        kubelet_binary, lab21, tmp_path):
    """The kubelet starts on the configuration the role plans (policy, options, reservation, reconcile period, the
    Topology Manager's policy and scope): its /configz reports each as written. Two static pods of 2 CPUs come one
    after the other: its checkpoint is what ``bin/kubecpu allocate`` predicts with the same options and Topology
    Manager, file for file. A pod of 1 CPU: the kubelet rejects it (full-pcpus-only) with the reason kubecpu refuses
    it with. The kubelet stops and its checkpoint's checksums are broken. ``bin/kubecpu state`` refuses the file in
    the words the kubelet then refuses to start with. ``state --rebuild --kubelet-stopped`` rebuilds it from what
    runs; the kubelet starts on it, and after two of its reconcile periods every pod runs the same container on the
    same CPUs. Then the checkpoint is lost (removed with the kubelet stopped): rebuilt the same way, the same."""
    minor, binary = kubelet_binary
    change, config = planned(PLANNED, minor, tmp_path, lab21)
    kubelet = Kubelet(binary, str(tmp_path), config)
    (tmp_path / "topology.json").write_text(json.dumps(kubecpu("topology")))
    node = ["--topology", str(tmp_path / "topology.json"), "--state", kubelet.checkpoint, "--reserved-cpus", "0",
            "--kubelet-version", minor, "--option", "full-pcpus-only", "--option", "distribute-cpus-across-numa"]
    kubelet.start()
    try:
        kubelet.up(minor)
        print("kubelet %s /configz: %s" % (RELEASES[minor], kubelet.runs(change.config)))
        predicted = str(tmp_path / "kubecpu-state")
        options = [*node[:2], "--state", predicted, *node[4:], "--topology-manager-policy", "restricted",
                   "--topology-manager-scope", "pod"]
        uids = []
        for order, name in enumerate(("two", "pair")):  # one at a time, as in the test above
            uids.append(kubelet.add(name, 2, order))
            predict(tmp_path, uids[-1], 2, *options)
            wait_on(lambda: uids[-1] in kubelet.state().get("entries", {}) or kubelet.proc.poll(), START_TIMEOUT,
                    "kubelet %s admitting %s" % (minor, name))
        with open(predicted, encoding="utf-8") as handle:
            assert kubelet.state() == json.load(handle)  # the same CPUs under the options, file for file
        # a pod of 1 CPU: full-pcpus-only refuses it (a core has 2 CPUs); the kubelet keeps the rejected static pod's
        # status, and /pods reports it
        refused = predict(tmp_path, kubelet.add("odd", 1, 2), 1, *options, check=False)
        assert refused.returncode != 0 and refused.stderr.strip(), refused.stdout
        status = kubelet.rejected("odd-uid", minor)
        print("kubelet %s rejects odd: %s: %s; kubecpu: %s" % (
            RELEASES[minor], status.get("reason"), status.get("message"), refused.stderr.strip()))
        assert refused.stderr.strip() in status["message"]
        assert "odd-uid" not in kubelet.state()["entries"]
        kubelet.remove("odd", 2)
        running = wait_on(lambda: all_running(lab21, uids) or kubelet.proc.poll() is not None, START_TIMEOUT,
                          "kubelet %s running its static pods" % minor)
        assert kubelet.proc.poll() is None, kubelet.log()
        kept = None
        for damage in ("corrupt", "lost"):
            kubelet.stop()
            kept = kept or kubelet.state()
            assert set(kept["entries"]) == set(uids)
            if damage == "corrupt":
                broken = dict(kept, checksum=kept["checksum"] + 1)
                if "dataChecksum" in kept:  # 1.37's V4: its data's checksum too
                    broken["dataChecksum"] = kept["dataChecksum"] + 1
                with open(kubelet.checkpoint, "w", encoding="utf-8") as handle:
                    json.dump(broken, handle, separators=(",", ":"))
                said = kubecpu("state", *node, check=False)
                assert said.returncode != 0 and said.stderr.strip()
                kubelet.start()
                assert said_in(said.stderr.strip(), kubelet.refused(minor))
                print("kubelet %s and kubecpu refuse it: %s" % (RELEASES[minor], said.stderr.strip()))
            else:  # lost: a kubelet would start afresh and hand the running pods' CPUs out again
                os.unlink(kubelet.checkpoint)
            kubecpu("state", "--rebuild", "--kubelet-stopped", *node, "--runtime", "cri", "--runtime-endpoint",
                    lab21.endpoint, "--runtime-timeout", "30")
            kubelet.start()
            kubelet.up(minor)
            got = watched_through_two_reconcile_periods(kubelet, kept)
            assert all_running(lab21, uids) == running  # the same containers: none restarted
            for uid in uids:
                settle(lab21, {"name": uid, "containers": {"app": running[uid]}}, cpus(kept["entries"][uid]["app"]))
            print("kubelet %s, the checkpoint %s and rebuilt: it starts on it and keeps %s"
                  % (RELEASES[minor], damage, got["entries"]))
    finally:
        kubelet.stop()
        remove_static_pods(lab21)
