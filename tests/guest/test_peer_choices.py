"""The CPUs each NRI resource-policy plugin gives the same pods on the real server (issue 65; docs/COMPARISON.md):
kubecpu's NRI plugin, and the NRI plugins topology-aware and balloons v0.14.0 (scripts/peers.sh; the guest stage
shares their builds in), one at a time on containerd 2.4.2 (NRI on, the systemd driver), each configured as
benchmarks/peers.py configures it (CPU 0 reserved). The same pods in the same order under each: a Burstable pod, then
Guaranteed pods of 2, 1 and 3 CPUs. Beside them, what the kubelet's static policy gives the same pods
(``bin/kubecpu allocate`` in the same order: tests/guest/test_kubelet.py proves it is what the real kubelets give).

Recorded for each container: its CPUs, whether they are whole cores, one NUMA node, and the shared pool the Burstable
container was left with. kubecpu's plugin gives what the kubelet gives; the peers' choices are printed for the
comparison.

Machine: CPUs 2n and 2n+1 are one core; NUMA node 0 = CPUs 0-3, node 1 = CPUs 4-7."""

from __future__ import annotations

import json
import os
import sys

from conftest import NUMA, ROOT, SIBLINGS, cpus, kubecpu, shared_build

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import peers  # benchmarks/peers.py: the plugins' configurations, their process and their proxy

PEERS_BUILD = os.path.join(ROOT, ".cache", "peers")  # where the guest stage shares scripts/peers.sh's builds
GUARANTEED = (("two", 2), ("one", 1), ("three", 3))
SHARED = ("web", 250)


def run_pods(lab):
    """The pods in order under the plugin that runs: {pod: its container's CPUs, or the runtime's refusal}."""
    got, made = {}, []
    try:
        asks = [(SHARED[0], "Burstable", SHARED[1])] + [(n, "Guaranteed", c * 1000) for n, c in GUARANTEED]
        for name, qos, milli in asks:
            pod = lab.run_pod(name, qos, [], namespace=peers.NAMESPACE)
            made.append(pod)
            try:
                cid = lab.run_container(pod, {"name": "app", "cpu": milli})
            except Exception as exc:  # pylint: disable=broad-except  # a refusal is a result
                got[name] = "refused: %s" % str(exc).splitlines()[0][:200]
                continue
            pod["containers"]["app"] = cid
        for pod in made:  # read once every creation is answered: a later reply may shrink an earlier one's set
            if pod["containers"].get("app"):
                got[pod["name"]] = lab.allowed_cpus(pod["containers"]["app"])
    finally:
        for pod in made:
            lab.remove_pod(pod)
    return got


def described(cpu_text):
    if cpu_text.startswith("refused"):
        return {"cpus": cpu_text}
    held = cpus(cpu_text)
    return {"cpus": cpu_text, "whole_cores": all(SIBLINGS[c] in held for c in held),
            "numa_nodes": sorted({NUMA[c] for c in held})}


def kubelets_choices(tmp_path):
    """What the kubelet's static policy gives the Guaranteed pods in this order, CPU 0 reserved."""
    (tmp_path / "topology.json").write_text(json.dumps(kubecpu("topology")))
    state, got = str(tmp_path / "kubelet-state"), {}
    for name, count in GUARANTEED:
        (tmp_path / "pod.json").write_text(json.dumps({
            "uid": name + "-uid", "name": name, "namespace": "default",
            "containers": [{"name": "app", "cpu_request": str(count), "cpu_limit": str(count),
                            "memory_request": "64Mi", "memory_limit": "64Mi"}]}))
        got[name] = kubecpu("allocate", "--topology", str(tmp_path / "topology.json"), "--state", state,
                            "--reserved-cpus", "0", "--pod", str(tmp_path / "pod.json"), "--container", "app")["cpus"]
    return got


def test_the_same_pods_under_kubecpu_topology_aware_and_balloons_beside_the_kubelets_choices(lab24, tmp_path):
    binaries = {name: shared_build(os.path.join(PEERS_BUILD, name)) for name in peers.PEERS}
    work = str(tmp_path)
    proxy = peers.Proxy(work, lab24.nri_socket)
    table = {"kubelet": {name: described(text) for name, text in kubelets_choices(tmp_path).items()}}
    try:
        with peers.shared_mounts(work, peers.PEERS):
            for name in ("kubecpu",) + peers.PEERS:
                argv = (peers.kubecpu_argv(proxy.socket, os.path.join(work, "kubecpu-state")) if name == "kubecpu"
                        else peers.peer_argv(binaries[name], name, work, proxy.socket))
                plugin = peers.Plugin(name, argv, work, proxy)
                plugin.start()
                try:
                    table[name] = {pod: described(text) for pod, text in run_pods(lab24).items()}
                finally:
                    plugin.stop()
    finally:
        proxy.close()
    print("the same pods under each plugin, and the kubelet's choices:", json.dumps(table, sort_keys=True))
    for name in ("kubecpu",) + peers.PEERS:  # each plugin: every pod created, its count, none on CPU 0, none shared
        held = [cpus(table[name][pod]["cpus"]) for pod, _count in GUARANTEED]
        assert [len(cpu_set) for cpu_set in held] == [count for _pod, count in GUARANTEED], (name, table[name])
        assert len(set().union(*held)) == sum(map(len, held)) and 0 not in set().union(*held), (name, table[name])
    kubecpu_guaranteed = {pod: table["kubecpu"][pod] for pod, _count in GUARANTEED}
    assert kubecpu_guaranteed == table["kubelet"]  # the kubelet's choices, whole cores and NUMA nodes included
    exclusive = set().union(*(cpus(row["cpus"]) for row in kubecpu_guaranteed.values()))
    assert cpus(table["kubecpu"]["web"]["cpus"]) == set(range(8)) - exclusive  # the shared pool: the rest, CPU 0 too
