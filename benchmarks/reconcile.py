"""Reconcile pass cost, pinning latency on a real containerd, and module overhead.

    python benchmarks/reconcile.py [--quick] [--no-real]

1. A pass with 10, 50 and 250 containers on a fake runtime (256-CPU node, cgroupfs in a temp dir): runtime
   calls and our own CPU time (process time), steady state and after one change (a new Guaranteed pod).
   Baseline in the same run: the same pass with the container cache disabled (every container inspected).
2. Pinning latency on the real containerd (scripts/lab.py), agent at a 1 s period over gRPC: from a
   Guaranteed container's start to its exclusive cpuset in cgroupfs; p50 / p99 over 20 containers.
3. cpu_manager_allocate wall time against ansible.builtin.ping on localhost, both through ansible-playbook.
4. containerd SIGKILLed in the middle of the agent's loop (1 s period over gRPC), kept down 5 s, restarted; a pinned
   container's cpuset changed by hand while it was down: the passes that failed, the state file's bytes during the
   outage, and the time from containerd's restart to the drift corrected. Repeated 5 times (2 with --quick).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from _common import percentiles  # also sets up the import path

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.cgroups import CgroupFS
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.container_cache import ContainerCache
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.manager import NodeManager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.state_store import StateStore

from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_crictl import make_node
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class NoCache(ContainerCache):
    def get(self, listed):  # the baseline: inspect every container on every pass
        return None


def fake_node(count, cache=True):
    work = tempfile.mkdtemp(prefix="kubecpu-bench-")
    topo = generated(2, 64, 2, 4, 8)
    runtime = FakeRuntime(os.path.join(work, "cgroup"), str(topo.all_cpus), "0-7")
    for n in range(count):
        qos = ("Guaranteed", "Burstable", "BestEffort")[n % 3]
        runtime.add("pod-%d" % n, "app", qos, 1000 if qos == "Guaranteed" else 250, pod_name="p%d" % n)
    manager = NodeManager(topo, new_policy("static", topo, 2), StateStore(os.path.join(work, "state"), "static"),
                          runtime, cgroups=CgroupFS(os.path.join(work, "cgroup")),
                          cache=ContainerCache() if cache else NoCache())
    manager.reconcile()
    return manager, runtime


def cpu_time(fn):
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def bench_passes(quick):
    print("1. reconcile pass on a fake runtime (256 CPUs): our CPU time and runtime calls")
    print("%-11s %-13s %-30s %-13s %s" % ("containers", "steady (ms)", "steady calls", "change (ms)", "change calls"))
    rounds = 3 if quick else 20
    for count in (10, 50, 250):
        manager, runtime = fake_node(count)
        steady = []
        for _round in range(rounds):
            seconds, plan = cpu_time(manager.reconcile)
            steady.append(seconds)
        calls = plan.runtime_calls
        runtime.add("pod-new", "app", "Guaranteed", 2000, pod_name="new")
        change, changed = cpu_time(manager.reconcile)
        base_manager, _rt = fake_node(count, cache=False)
        base_calls = base_manager.reconcile().runtime_calls
        p50 = percentiles(steady)[0]
        print("%-11d %-13.2f %-30s %-13.2f %s   (uncached baseline: %s)" % (
            count, p50 * 1000, json.dumps(calls), change * 1000, json.dumps(changed.runtime_calls),
            json.dumps(base_calls)))


def bench_latency(quick):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import lab as lab_module

    problems = lab_module.missing_requirements()
    if problems:
        print("2. pinning latency: skipped (%s)" % "; ".join(problems))
        return
    samples = []
    with lab_module.Lab() as lab, tempfile.TemporaryDirectory() as work:
        argv = [os.path.join(ROOT, "bin", "kubecpu"), "reconcile", "--loop", "--period", "1s", "--runtime", "cri",
                "--runtime-endpoint", lab.endpoint, "--state", os.path.join(work, "state"), "--num-reserved", "1",
                "--kubelet-state", os.path.join(work, "none")]
        agent = subprocess.Popen(argv, env=dict(os.environ, KUBECPU_PYTHON=sys.executable),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for n in range(3 if quick else 20):
                pod = lab.run_pod("lat-%d" % n, "Guaranteed", [{"name": "app", "cpu": 1000}], start=False)
                cid = pod["containers"]["app"]
                lab.cri.start_container(cid)
                started = time.monotonic()
                while lab.cgroup_cpus(pod, cid) != "1":
                    if time.monotonic() - started > 10:
                        raise RuntimeError("not pinned within 10 s")
                    time.sleep(0.005)
                samples.append(time.monotonic() - started)
                lab.remove_pod(pod)
                time.sleep(1.1)  # let the agent release the CPU before the next container
        finally:
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=30)
    p50, p99 = percentiles(samples)
    print("2. pinning latency, agent period 1 s over gRPC, %d containers: p50 %.0f ms, p99 %.0f ms (target p99 < "
          "1500 ms)" % (len(samples), p50 * 1000, p99 * 1000))


def bench_outage(quick):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import lab as lab_module

    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.cpuset import CPUSet

    if lab_module.missing_requirements():
        print("4. containerd killed mid-loop: skipped")
        return
    recoveries, unchanged = [], 0
    rounds = 2 if quick else 5
    with lab_module.Lab() as lab, tempfile.TemporaryDirectory() as work:
        state = os.path.join(work, "state")
        argv = [os.path.join(ROOT, "bin", "kubecpu"), "reconcile", "--loop", "--period", "1s", "--runtime", "cri",
                "--runtime-endpoint", lab.endpoint, "--state", state, "--num-reserved", "1",
                "--kubelet-state", os.path.join(work, "none")]
        agent = subprocess.Popen(argv, env=dict(os.environ, KUBECPU_PYTHON=sys.executable),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            pod = lab.run_pod("outage", "Guaranteed", [{"name": "app", "cpu": 1000}])
            cid = pod["containers"]["app"]
            deadline = time.monotonic() + 20
            while lab.cgroup_cpus(pod, cid) != "1":
                if time.monotonic() > deadline:
                    raise RuntimeError("not pinned within 20 s")
                time.sleep(0.05)
            for _round in range(rounds):
                with open(state, "rb") as handle:
                    before = handle.read()
                lab.stop_daemon(signal.SIGKILL)
                time.sleep(5)
                with open(state, "rb") as handle:
                    unchanged += handle.read() == before
                lab.start_daemon()
                restarted = time.monotonic()
                lab.cri.update(cid, cpuset_cpus=CPUSet.parse("0-1"))  # drift the agent must correct
                while lab.cgroup_cpus(pod, cid) != "1":
                    if time.monotonic() - restarted > 60:
                        raise RuntimeError("the agent did not recover within 60 s")
                    time.sleep(0.02)
                recoveries.append(time.monotonic() - restarted)
        finally:
            agent.send_signal(signal.SIGTERM)
            _out, err = agent.communicate(timeout=60)
    log = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    failed_passes = [entry for entry in log if entry["level"] == "error"]
    p50, worst = percentiles(recoveries)[0], max(recoveries)
    print("4. containerd SIGKILLed for 5 s, %d times, agent at 1 s over gRPC: %d failed passes logged (%.1f per "
          "outage), state file unchanged during %d of %d outages, drift corrected %.2f s (p50) / %.2f s (worst) "
          "after containerd restarted; agent exit %d" % (rounds, len(failed_passes), len(failed_passes) / rounds,
                                                         unchanged, rounds, p50, worst, agent.returncode))


def bench_module(quick):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import lab as lab_module

    if lab_module.missing_requirements():
        print("3. module overhead: skipped")
        return
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_LOCALHOST_WARNING="0")
    runs = 2 if quick else 11
    with lab_module.Lab() as lab, tempfile.TemporaryDirectory() as work:
        pod = lab.run_pod("bench", "Guaranteed", [{"name": "app", "cpu": 1000}])
        stand_in = make_node(os.path.join(work, "crictl-node"))
        plays = {}
        for name, task in (("ping", {"ansible.builtin.ping": {}}),
                           ("allocate", {"kubecpu.cpu_manager.cpu_manager_allocate": {
                               "pod_uid": pod["uid"], "container_name": "app", "runtime": "cri",
                               "runtime_endpoint": lab.endpoint, "num_reserved": 1,
                               "state_path": os.path.join(work, "state"),
                               "kubelet_state_path": os.path.join(work, "none")}}),
                           ("allocate-crictl", {"kubecpu.cpu_manager.cpu_manager_allocate": {
                               "container_id": stand_in["prod/web/main"], "runtime": "crictl",
                               "crictl_path": stand_in["crictl"], "cgroup_root": stand_in["cgroup"],
                               "topology_path": stand_in["topology"], "num_reserved": 1,
                               "state_path": os.path.join(work, "crictl-state"),
                               "kubelet_state_path": os.path.join(work, "none")}})):
            path = os.path.join(work, name + ".yml")
            with open(path, "w", encoding="utf-8") as handle:
                json.dump([{"hosts": "localhost", "gather_facts": False, "tasks": [task]}], handle)
            plays[name] = path
        times = {name: [] for name in plays}
        first = {}
        for run in range(runs + 1):  # run 0: the first, cold run (code generation, inspections), shown apart
            for name, path in plays.items():
                start = time.monotonic()
                subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                                "-c", "local", path], env=env, check=True, stdout=subprocess.DEVNULL)
                if run:
                    times[name].append(time.monotonic() - start)
                else:
                    first[name] = time.monotonic() - start
    ping = percentiles(times["ping"])[0]
    print("3. ansible-playbook wall time, median of %d interleaved repeat runs: ping %.2f s" % (runs, ping))
    for name, label in (("allocate", "cpu_manager_allocate over CRI (gRPC)"),
                        ("allocate-crictl", "cpu_manager_allocate over crictl (stand-in replaying crictl 1.32 "
                                            "output)")):
        took = percentiles(times[name])[0]
        print("   %s: %.2f s, %.2fx, +%.2f s (target <= 1.2x); first, cold run %.2f s" % (
            label, took, took / ping, took - ping, first[name]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (a smoke run for the test suite)")
    parser.add_argument("--no-real", action="store_true", help="only the fake-runtime figures")
    args = parser.parse_args()
    bench_passes(args.quick)
    if not args.no_real:
        bench_latency(args.quick)
        bench_module(args.quick)
        bench_outage(args.quick)


if __name__ == "__main__":
    main()
