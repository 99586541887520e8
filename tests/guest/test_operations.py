"""What changes a real node beyond a pass, with several pinned containers: in-place resize with several CPUs through
the agent and the NRI plugin (up as a superset, down to the baseline, below it refused, back to the shared pool), and
a lost checkpoint rebuilt from what runs. (Live defragmentation: test_defrag.py.)"""

from __future__ import annotations

import os

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ContainerRuntimeError
from conftest import ALL, SHARED, Pinner, cpus, entries, guaranteed, kubecpu, node_flags, proc_status, settle, wait_for


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
