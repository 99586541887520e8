"""Live defragmentation on the real server, on containerd 2.1.9, 1.7.24 and 2.4.2 and on CRI-O 1.36.3: every move
seen in /proc, the state and the cgroups agreeing, a whole-core request refused before and admitted after.

Machine: CPUs 2n and 2n+1 are one core; NUMA node 0 = CPUs 0-3, node 1 = CPUs 4-7."""

from __future__ import annotations

import json

import pytest
from conftest import SIBLINGS, cpus, entries, guaranteed, kubecpu, node_flags, settle


def free_cpus(state):
    with open(state, encoding="utf-8") as handle:
        return cpus(json.load(handle)["defaultCpuSet"])


@pytest.fixture(params=["lab21", "lab17", "lab24", "crio"])
def runtime(request):
    """containerd 2.1.9 (systemd driver), 1.7.24 (cgroupfs), 2.4.2 (systemd) or CRI-O 1.36.3 (systemd)."""
    return request.getfixturevalue(request.param)


def test_live_defragmentation_frees_whole_cores_that_a_request_then_gets(runtime, made, tmp_path):
    """Four 1-CPU pods fill CPUs 4-7 (cores 0-1 reserved); the two on CPUs 5 and 6 removed leave a free CPU on each of
    cores 4-5 and 6-7: no whole core is free and a 2-CPU full-pcpus-only request is refused. ``bin/kubecpu defrag`` moves pinned containers
    live until whole cores are free; every move shows in /proc and cgroupfs and the state agrees; then the request
    is admitted. On each runtime its CRI's UpdateContainerResources moves them."""
    state = str(tmp_path / "state")
    flags = node_flags(runtime, state) + ["--reserved-cpus", "0-3"]
    pods = []
    for n in range(4):  # one at a time: the packed order fills 4, 5, 6, 7 as the kubelet would
        pods.append(runtime.run_pod("x%d" % n, "Guaranteed", guaranteed(1)))
        made.append((runtime, pods[-1]))
        kubecpu("reconcile", *flags)
    held = {pod["uid"]: cpus(entries(state)[pod["uid"]]["app"]) for pod in pods}
    assert sorted(min(v) for v in held.values()) == [4, 5, 6, 7]
    keep = []
    for pod in pods:  # remove the pods on CPUs 5 and 6: one free CPU on each of cores 4-5 and 6-7
        if min(held[pod["uid"]]) in (5, 6):
            runtime.remove_pod(pod)
            made.remove((runtime, pod))
        else:
            keep.append(pod)
    kubecpu("reconcile", *flags)
    before = free_cpus(state) - {0, 1, 2, 3}
    assert before == {5, 6}
    topology = str(tmp_path / "topology.json")
    with open(topology, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(kubecpu("topology")))
    plan_argv = ["plan", "--topology", topology, "--count", "2", "--option", "full-pcpus-only", "--available"]
    refused = kubecpu(*plan_argv, ",".join(map(str, sorted(before))), check=False)
    assert refused.returncode == 1 and "SMT Alignment Error" in refused.stderr

    checked = kubecpu("defrag", "--check", "--time-budget", "60s", *flags)  # proven best: the same plan twice
    assert checked["actions"] and entries(state) == {p["uid"]: {"app": ",".join(map(str, sorted(held[p["uid"]])))}
                                                     for p in keep}  # --check changed nothing
    done = kubecpu("defrag", "--time-budget", "60s", *flags)
    moves = [a for a in done["actions"] if a["action"] == "move"]
    assert moves and [(m["pod_uid"], m["cpus"]) for m in moves] == [
        (m["pod_uid"], m["cpus"]) for m in checked["actions"] if m["action"] == "move"]
    after = entries(state)
    for pod in keep:  # /proc, cgroupfs and the state agree on every container, moved or not
        settle(runtime, pod, cpus(after[pod["uid"]]["app"]))
    free = free_cpus(state) - {0, 1, 2, 3}
    assert any(cpu in free and SIBLINGS[cpu] in free for cpu in free)  # a whole core is free now
    admitted = kubecpu(*plan_argv, ",".join(map(str, sorted(free))))
    assert cpus(admitted["cpus"]) <= free and len(cpus(admitted["cpus"])) == 2
    info = {"moves": len(moves), "free_before": sorted(before), "free_after": sorted(free)}
    print("live defragmentation on the guest:", json.dumps(info))
