"""Exclusive CPUs in a Burstable pod and the system partition (issue 66, features 1 and 3; docs/HOUSEKEEPING.md) on
the real server, on containerd 2.4.2 and CRI-O 1.36.3 (cgroup v2, the systemd driver), through the agent's passes:
pods created, resized in place, defragmented and removed, then both options switched off. Each step's cpusets are
read back from /proc and cgroupfs (``settle``) and printed.

Machine: CPUs 2n and 2n+1 are one core; NUMA node 0 = CPUs 0-3, node 1 = CPUs 4-7. Reserved: CPUs 0-1 (core 0)."""

from __future__ import annotations

import pytest
from conftest import ALL, cpus, entries, kubecpu, node_flags, settle

KEY = "cpu-exclusive.kubecpu.io"
RESERVED = {0, 1}
OPTIONS = ["--exclusive-burstable", "--system-partition", "--system-namespaces", "kube-system"]


@pytest.fixture(params=["lab24", "crio"])
def runtime(request):
    """containerd 2.4.2 or CRI-O 1.36.3, both on the systemd cgroup driver."""
    return request.getfixturevalue(request.param)


def placed(runtime, pods, want):
    """Each (pod, container) on its CPUs in /proc and cgroupfs as ``want`` says: {(pod name, container): CPUs}."""
    for (name, container), cpu_set in want.items():
        settle(runtime, pods[name], cpu_set, name=container)
    return {"%s/%s" % key: ",".join(map(str, sorted(value))) for key, value in want.items()}


def test_a_burstable_containers_exclusive_cpus_and_the_system_partition_created_resized_defragmented_removed(
        runtime, tmp_path):
    state = str(tmp_path / "state")
    node = node_flags(runtime, state) + ["--reserved-cpus", "0-1"]
    pods = {}
    try:
        pods["burst"] = runtime.run_pod("burst", "Burstable", [{"name": "app", "cpu": 2000, "limit": 2000},
                                                               {"name": "side", "cpu": 100}], annotations={KEY: "app"})
        pods["sys"] = runtime.run_pod("sys", "Burstable", [{"name": "app", "cpu": 100}], namespace="kube-system")
        pods["web"] = runtime.run_pod("web", "Burstable", [{"name": "app", "cpu": 250}])
        pods["frac"] = runtime.run_pod("frac", "Burstable", [{"name": "app", "cpu": 1500, "limit": 1500}],
                                       annotations={KEY: "app"})
        burst = pods["burst"]["uid"]

        created = kubecpu("reconcile", *node, *OPTIONS)
        app = cpus(entries(state)[burst]["app"])
        assert len(app) == 2 and not app & RESERVED and list(entries(state)) == [burst]
        pool = ALL - RESERVED - app
        print("created:", placed(runtime, pods, {("burst", "app"): app, ("burst", "side"): pool,
                                                 ("web", "app"): pool, ("frac", "app"): pool,
                                                 ("sys", "app"): RESERVED}))
        refused = [e["error"] for e in created["errors"] if e.get("kind") == "exclusive"]
        assert len(refused) == 1 and "its CPU request 1500m is not a whole number of CPUs" in refused[0], refused

        runtime.cri.resize(pods["burst"]["containers"]["app"], 3000, 3000)  # in place: request and limit
        kubecpu("reconcile", *node, *OPTIONS)
        grown = cpus(entries(state)[burst]["app"])
        assert len(grown) == 3 and app < grown and not grown & RESERVED
        pool = ALL - RESERVED - grown
        print("resized to 3 CPUs:", placed(runtime, pods, {("burst", "app"): grown, ("burst", "side"): pool,
                                                           ("web", "app"): pool, ("sys", "app"): RESERVED}))

        done = kubecpu("defrag", "--time-budget", "60s", *node, *OPTIONS)
        after = cpus(entries(state)[burst]["app"])
        assert len(after) == 3 and not after & RESERVED, done
        pool = ALL - RESERVED - after
        print("defragmented (%d moves):" % sum(a["action"] == "move" for a in done["actions"]),
              placed(runtime, pods, {("burst", "app"): after, ("burst", "side"): pool, ("web", "app"): pool,
                                     ("sys", "app"): RESERVED}))

        runtime.remove_pod(pods.pop("burst"))
        released = kubecpu("reconcile", *node, *OPTIONS)
        assert [(a["action"], a["container"]) for a in released["actions"] if a["action"] == "release"] == [
            ("release", "app")] and entries(state) == {}
        print("removed:", placed(runtime, pods, {("web", "app"): ALL - RESERVED, ("frac", "app"): ALL - RESERVED,
                                                 ("sys", "app"): RESERVED}))

        kubecpu("reconcile", *node)  # both options off: every shared container on the whole pool again
        print("switched off:", placed(runtime, pods, {("web", "app"): ALL, ("frac", "app"): ALL,
                                                      ("sys", "app"): ALL}))
    finally:
        for pod in pods.values():
            runtime.remove_pod(pod)
