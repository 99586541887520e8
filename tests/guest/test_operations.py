"""What changes a real node beyond a pass, with several pinned containers: live defragmentation (every move seen
in /proc, the state and the cgroups agreeing, a whole-core request refused before and admitted after), in-place
resize with several CPUs through the agent and the NRI plugin (up as a superset, down to the baseline, below it
refused, back to the shared pool), and a lost checkpoint rebuilt from what runs."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ContainerRuntimeError
from conftest import ALL, SHARED, SIBLINGS, Pinner, cpus, guaranteed, kubecpu, proc_status, settle, wait_for

TIMEOUT = ["--runtime-timeout", "30"]  # a guest vCPU is 25-30x slower than the host's


@pytest.fixture
def made(lab21):
    pods = []
    yield pods
    for lab, pod in pods:
        lab.remove_pod(pod)


def node_flags(lab, state):
    return ["--runtime", "cri", "--runtime-endpoint", lab.endpoint, "--state", state, "--kubelet-state",
            state + ".kubelet", *TIMEOUT]


def entries(state):
    with open(state, encoding="utf-8") as handle:
        return json.load(handle).get("entries", {})


def free_cpus(state):
    with open(state, encoding="utf-8") as handle:
        return cpus(json.load(handle)["defaultCpuSet"])


@pytest.fixture(params=["lab21", "crio"])
def runtime(request):
    """containerd 2.1.9 or CRI-O 1.36.3, each with the systemd cgroup driver."""
    return request.getfixturevalue(request.param)


def test_live_defragmentation_frees_whole_cores_that_a_request_then_gets(runtime, made, tmp_path):
    """Six 1-CPU pods fill CPUs 2-7 (core 0 reserved); three removed leave a free CPU on each of three cores: no
    whole core is free and a 2-CPU full-pcpus-only request is refused. ``bin/kubecpu defrag`` moves pinned containers
    live until whole cores are free; every move shows in /proc and cgroupfs and the state agrees; then the request
    is admitted. On containerd 2.1.9 and on CRI-O (its CRI's UpdateContainerResources moves them)."""
    state = str(tmp_path / "state")
    flags = node_flags(runtime, state) + ["--reserved-cpus", "0-1"]
    pods = []
    for n in range(6):  # one at a time: the packed order fills 2, 3, 4, ... as the kubelet would
        pods.append(runtime.run_pod("x%d" % n, "Guaranteed", guaranteed(1)))
        made.append((runtime, pods[-1]))
        kubecpu("reconcile", *flags)
    held = {pod["uid"]: cpus(entries(state)[pod["uid"]]["app"]) for pod in pods}
    assert sorted(min(v) for v in held.values()) == [2, 3, 4, 5, 6, 7]
    keep = []
    for pod in pods:  # remove the pods on CPUs 3, 4 and 6: one free CPU on each of cores 2-3, 4-5, 6-7
        if min(held[pod["uid"]]) in (3, 4, 6):
            runtime.remove_pod(pod)
            made.remove((runtime, pod))
        else:
            keep.append(pod)
    kubecpu("reconcile", *flags)
    before = free_cpus(state) - {0, 1}
    assert before == {3, 4, 6}
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
    free = free_cpus(state) - {0, 1}
    assert any(cpu in free and SIBLINGS[cpu] in free for cpu in free)  # a whole core is free now
    admitted = kubecpu(*plan_argv, ",".join(map(str, sorted(free))))
    assert cpus(admitted["cpus"]) <= free and len(cpus(admitted["cpus"])) == 2
    info = {"moves": len(moves), "free_before": sorted(before), "free_after": sorted(free)}
    print("live defragmentation on the guest:", json.dumps(info))


def _resize_steps(lab, pinner, pod, state):
    """2 CPUs -> 4 (a superset) -> 2 (the baseline) -> 1 (below it: refused, kept) -> 500m (back to shared)."""
    cid = pod["containers"]["app"]
    wait_for(lambda: pod["uid"] in entries(state), 120, "the pod in the state")
    base = settle(lab, pod, cpus(entries(state)[pod["uid"]]["app"]))
    assert len(base) == 2
    lab.cri.update(cid, cpu_quota=400000, cpu_period=100000)
    wait_for(lambda: len(cpus(entries(state)[pod["uid"]]["app"])) == 4, 120, "resized up to 4 CPUs")
    up = settle(lab, pod, cpus(entries(state)[pod["uid"]]["app"]))
    assert base < up
    lab.cri.update(cid, cpu_quota=200000, cpu_period=100000)
    wait_for(lambda: cpus(entries(state)[pod["uid"]]["app"]) == base, 120, "resized down to the baseline")
    settle(lab, pod, base)
    try:  # below the baseline: the kubelet refuses it too
        lab.cri.update(cid, cpu_quota=100000, cpu_period=100000)
    except ContainerRuntimeError as exc:  # through NRI the runtime hands the plugin's refusal to the caller
        assert pinner.mode == "nri" and "below its baseline" in str(exc), exc
    else:  # the agent finds the resize afterwards and counts its refusal
        assert pinner.mode == "agent"
        wait_for(lambda: pinner.errors("resize") >= 1, 120, "the refused resize counted")
    assert cpus(entries(state)[pod["uid"]]["app"]) == base and cpus(proc_status(lab, cid)) == base
    lab.cri.update(cid, cpu_quota=50000, cpu_period=100000)  # 500m: no exclusive CPUs any more
    wait_for(lambda: pod["uid"] not in entries(state), 120, "released to the shared pool")
    settle(lab, pod, ALL)  # the reserved CPU is in the shared pool too


def test_in_place_resize_with_several_cpus_through_the_agent(lab21, made, tmp_path):
    pinner = Pinner(lab21, str(tmp_path), "agent", ["--reserved-cpus", "0", "--period", "2s"])  # a resize: no event
    pinner.start()
    try:
        pod = lab21.run_pod("resized", "Guaranteed", guaranteed(2))
        made.append((lab21, pod))
        _resize_steps(lab21, pinner, pod, pinner.state)
    finally:
        pinner.stop()


def test_in_place_resize_with_several_cpus_through_the_plugin(lab17, tmp_path):
    pinner = Pinner(lab17, str(tmp_path), "nri", ["--reserved-cpus", "0"])
    pinner.start()
    pod = None
    try:
        pod = lab17.run_pod("resized", "Guaranteed", guaranteed(2))
        _resize_steps(lab17, pinner, pod, pinner.state)
    finally:
        if pod is not None:
            lab17.remove_pod(pod)
        pinner.stop()


def test_a_lost_checkpoint_with_several_pinned_containers_is_rebuilt(lab21, made, tmp_path):
    state = str(tmp_path / "state")
    flags = node_flags(lab21, state) + ["--reserved-cpus", "0"]
    pinned = [lab21.run_pod("r%d" % n, "Guaranteed", guaranteed(n + 1)) for n in range(3)]  # 1, 2 and 3 CPUs
    shared = lab21.run_pod("web", "Burstable", SHARED)
    made.extend((lab21, pod) for pod in pinned + [shared])
    kubecpu("reconcile", *flags)
    lost = entries(state)
    assert len(lost) == 3
    with open(state, "w", encoding="utf-8") as handle:
        handle.write("lost in a crash")
    rebuilt = kubecpu("state", "--rebuild", *flags)
    assert rebuilt["entries"] == lost == entries(state)
    kept = [name for name in os.listdir(str(tmp_path)) if name.startswith("state.rebuild-")]
    assert len(kept) == 1
    for pod in pinned:
        settle(lab21, pod, cpus(lost[pod["uid"]]["app"]))
    assert kubecpu("reconcile", *flags)["counts"]["allocate"] == 0  # goes on from the rebuilt file
