"""Side by side under the policy options and the Topology Manager's policies, the real kubelet is the oracle:
kubelets 1.35.4 and 1.37.2 (tests/guest/kubelets.py) on the real server, each configuration the role plans. 1.36
allocates as 1.35 does (KUBELET_VERSIONS.md, B.2): what 1.36.3 does differently, its checkpoint and its refusals, it is
judged on in tests/guest/test_kubelet.py and tests/guest/test_kubelet_refusals.py (2026-12-07: its two cases here cost
the suite's slowest guest group about 200 s on CI's machine).
Guaranteed static pods of 1, 2, 3, 4 and 6 CPUs come one after the other and stay: the kubelet's checkpoint, and the
CPUs of each container's cgroup and first process, are what ``bin/kubecpu allocate`` predicts with the same options,
Topology Manager, order and version, file for file; the pod the kubelet rejects at admission is the one kubecpu
refuses. (tests/guest/test_kubelet.py has full-pcpus-only with distribute-cpus-across-numa and the Topology Manager's
restricted policy, and its SMT refusal.)

Machine: CPUs 2n and 2n+1 are one core; NUMA node 0 = socket 0 = CPUs 0-3 (one L3), node 1 = socket 1 = CPUs 4-7."""

from __future__ import annotations

import json
from typing import NamedTuple, Optional, Tuple

import pytest
from conftest import cpus, kubecpu, settle
from kubelets import (RELEASES, START_TIMEOUT, Kubelet, all_running, planned, predict, remove_static_pods,
                      said_in, wait_on)

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.kubelet_config import Desired

ZERO = CPUSet.parse("0")


class Pod(NamedTuple):
    name: str
    count: int
    rejected: Optional[str] = None  # the kubelet's reason when it rejects the pod at admission


class Case(NamedTuple):
    what: str
    desired: Desired
    pods: Tuple[Pod, ...]


CASES = (
    # Every CPU but the reserved one handed out, then one more asked for: both refuse it for want of a CPU (the
    # kubelet's CPU manager, in kubecpu's words: "Allocate failed due to <them>, which is unexpected")
    Case("strict-cpu-reservation, align-by-socket, prefer-align-cpus-by-uncorecache; Topology Manager best-effort",
         Desired(policy="static", reserved_cpus=ZERO, topology_manager_policy="best-effort",
                 policy_options={"strict-cpu-reservation": "true", "align-by-socket": "true",
                                 "prefer-align-cpus-by-uncorecache": "true"}),
         (Pod("six", 6), Pod("one", 1), Pod("extra", 1, "UnexpectedAdmissionError"))),
    # 6 CPUs fit no NUMA node, nor 1 once both are taken: Topology Manager refusals in both
    Case("distribute-cpus-across-cores; Topology Manager single-numa-node, scope pod",
         Desired(policy="static", reserved_cpus=ZERO, topology_manager_policy="single-numa-node",
                 topology_manager_scope="pod", policy_options={"distribute-cpus-across-cores": "true"}),
         (Pod("six", 6, "TopologyAffinityError"), Pod("four", 4), Pod("three", 3),
          Pod("one", 1, "TopologyAffinityError"))),
)


@pytest.mark.parametrize("kubelet_binary", ["1.35", "1.37"], indirect=True)
@pytest.mark.parametrize("case", CASES, ids=[case.what.split(";")[0].split(",")[0] for case in CASES])
def test_under_each_option_and_topology_manager_policy_the_kubelet_pins_where_kubecpu_predicts(
        kubelet_binary, lab21, tmp_path, case):
    """The kubelet runs the configuration the role planned (its /configz). The pods, in order, each put into the
    kubelet's manifest directory once the one before is admitted or rejected. After each: its checkpoint is
    kubecpu's state after the same allocations (its checksums too); a pod the kubelet rejects (its /pods: phase
    Failed, the reason) is one ``bin/kubecpu allocate`` refuses. In the end each running container's cgroup and
    first process are on its CPUs. When the node is full under strict-cpu-reservation (the shared pool empty), the
    kubelet cannot start again on its own checkpoint: ``bin/kubecpu state`` says so in its words, and so does the
    role's planning."""
    minor, binary = kubelet_binary
    change, config = planned(case.desired, minor, tmp_path, lab21)
    kubelet = Kubelet(binary, str(tmp_path), config)
    (tmp_path / "topology.json").write_text(json.dumps(kubecpu("topology")))
    settings = change.settings()
    node = ["--topology", str(tmp_path / "topology.json"), "--reserved-cpus", "0", "--kubelet-version", minor,
            *(arg for option in sorted(settings["policy_options"]) for arg in ("--option", option)),
            "--topology-manager-policy", settings["topology_manager_policy"],
            "--topology-manager-scope", settings["topology_manager_scope"]]
    predicted = str(tmp_path / "kubecpu-state")
    kubelet.start()
    try:
        kubelet.up(minor)
        print("kubelet %s /configz: %s" % (RELEASES[minor], kubelet.runs(change.config)))
        uids = []
        for order, pod in enumerate(case.pods):
            uid = kubelet.add(pod.name, pod.count, order)
            said = predict(tmp_path, uid, pod.count, *node, "--state", predicted, check=False)
            if pod.rejected is None:
                assert isinstance(said, dict), (pod, said.stderr)
                wait_on(lambda: uid in kubelet.state().get("entries", {}) or kubelet.proc.poll(), START_TIMEOUT,
                        "kubelet %s admitting %s" % (minor, pod.name))
                uids.append(uid)
                continue
            assert said.returncode != 0 and said.stderr.strip(), (pod, said.stdout)
            status = kubelet.rejected(uid, minor)
            print("kubelet %s rejects %s (%d): %s: %s; kubecpu refuses it: %s" % (
                RELEASES[minor], pod.name, pod.count, status.get("reason"), status.get("message"),
                said.stderr.strip()))
            assert status["reason"] == pod.rejected and uid not in kubelet.state().get("entries", {})
            if pod.rejected == "TopologyAffinityError":  # kubecpu names the policy and the hints after its words
                assert said.stderr.strip().startswith(status["message"].split(": ", 1)[1])
            else:
                assert said.stderr.strip() in status["message"]
            kubelet.remove(pod.name, order)
        with open(predicted, encoding="utf-8") as handle:
            want = json.load(handle)
        got = kubelet.state()
        assert got == want, (got, want)  # the same CPUs, file for file
        running = wait_on(lambda: all_running(lab21, uids) or kubelet.proc.poll() is not None, START_TIMEOUT,
                          "kubelet %s running its static pods" % minor)
        assert kubelet.proc.poll() is None, kubelet.log()
        for uid in uids:
            settle(lab21, {"name": uid, "containers": {"app": running[uid]}}, cpus(got["entries"][uid]["app"]))
        print("kubelet %s, %s: %s; kubecpu predicted %s"
              % (RELEASES[minor], case.what, got["entries"], want["entries"]))
        if not got["defaultCpuSet"]:  # full under strict reservation: the kubelet cannot start on its checkpoint
            kubelet.stop()
            refused = kubecpu("state", *node[:6], "--option", "strict-cpu-reservation", "--state", kubelet.checkpoint,
                              check=False)
            reason = refused.stderr.strip().rsplit(": ", 1)[1]
            assert refused.returncode != 0 and reason == "default cpuset cannot be empty", refused.stderr
            again = kubelet.planned_on_checkpoint(config, case.desired, minor)
            assert again.verdict_before == reason, again.verdict_before
            kubelet.start()
            assert said_in(reason, kubelet.refused(minor))
            print("kubelet %s cannot start again on its full checkpoint: %s (bin/kubecpu state and the role's "
                  "planning: %s)" % (RELEASES[minor], reason, again.verdict_before))
    finally:
        kubelet.stop()
        remove_static_pods(lab21)
