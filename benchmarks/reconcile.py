"""Reconcile pass cost, pinning latency on a real containerd, and module overhead.

    python benchmarks/reconcile.py [--quick] [--no-real]

1. A pass with 10, 50 and 250 containers on a fake runtime (256-CPU node, cgroupfs in a temp dir): runtime
   calls and our own CPU time (process time), steady state and after one change (a new Guaranteed pod).
   Baseline in the same run: the same pass with the container cache disabled (every container inspected).
2. Pinning latency on the real containerd (scripts/lab.py) over gRPC: from a Guaranteed container's start to its
   exclusive cpuset in cgroupfs, p50 / p99 over 20 containers, for the agent polling every 1 s (--no-watch, the
   baseline) and woken by cgroup events with a 10 s period; and the event-driven agent's idle CPU use with 50
   shared-pool containers.
3. cpu_manager_allocate wall time against ansible.builtin.ping on localhost, both through ansible-playbook.
4. containerd SIGKILLed in the middle of the agent's loop (1 s period over gRPC), kept down 5 s, restarted; a pinned
   container's cpuset changed by hand while it was down: the passes that failed, the state file's bytes during the
   outage, and the time from containerd's restart to the drift corrected. Repeated 5 times (2 with --quick).
5. The NRI plugin: its CreateContainer reply time in-process with 0 / 50 / 250 containers known, and on Debian 13's
   containerd 1.7.24 how many Guaranteed containers saw only their exclusive CPU in their first line.
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

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroups import CgroupFS
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.container_cache import ContainerCache
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.manager import NodeManager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore

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


def _agent(lab, work, period, watch):
    argv = [os.path.join(ROOT, "bin", "kubecpu"), "reconcile", "--loop", "--period", period, "--runtime", "cri",
            "--runtime-endpoint", lab.endpoint, "--state", os.path.join(work, "state"), "--num-reserved", "1",
            "--kubelet-state", os.path.join(work, "none")] + ([] if watch else ["--no-watch"])
    return subprocess.Popen(argv, env=dict(os.environ, KUBECPU_PYTHON=sys.executable), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _latencies(lab, count, state):
    """From a Guaranteed container's start to its exclusive cpuset in cgroupfs, and from its pod's removal (what
    ``crictl rmp -f`` does) to its CPU released in the state, ``count`` times each."""
    samples, releases = [], []
    for n in range(count):
        pod = lab.run_pod("lat-%d" % n, "Guaranteed", [{"name": "app", "cpu": 1000}], start=False)
        cid = pod["containers"]["app"]
        lab.cri.start_container(cid)
        started = time.monotonic()
        while lab.cgroup_cpus(pod, cid) != "1":
            if time.monotonic() - started > 15:
                raise RuntimeError("not pinned within 15 s")
            time.sleep(0.002)
        samples.append(time.monotonic() - started)
        lab.remove_pod(pod)
        started = time.monotonic()
        while pod["uid"] in _entries(state):
            if time.monotonic() - started > 30:
                raise RuntimeError("not released within 30 s")
            time.sleep(0.002)
        releases.append(time.monotonic() - started)
    return samples, releases


def _entries(state):
    try:
        with open(state, encoding="utf-8") as handle:
            return json.load(handle).get("entries", {})
    except (OSError, ValueError):
        return {}


def _burst(lab, work, count):
    """``count`` containers (one Guaranteed) created, then started together: until every one has its target."""
    made = [lab.run_pod("burst-%d" % n, "Guaranteed" if n == 0 else "Burstable",
                        [{"name": "app", "cpu": 1000 if n == 0 else 100}], start=False) for n in range(count)]
    agent = _agent(lab, work, "10s", True)
    try:
        time.sleep(1.0)
        started = time.monotonic()
        for pod in made:
            lab.cri.start_container(pod["containers"]["app"])
        want = ["1"] + ["0"] * (count - 1)
        while [lab.cgroup_cpus(p, p["containers"]["app"]) for p in made] != want:
            if time.monotonic() - started > 15:
                raise RuntimeError("the burst was not pinned within 15 s")
            time.sleep(0.005)
        return time.monotonic() - started
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
        for pod in made:
            lab.remove_pod(pod)


def _idle(lab, work, containers, seconds):
    """The event-driven agent's CPU use with ``containers`` shared-pool containers and nothing to do."""
    made = [lab.run_pod("idle-%d" % n, "Burstable", [{"name": "app", "cpu": 100}]) for n in range(containers)]
    agent = _agent(lab, work, "10s", True)
    try:
        time.sleep(2.0)  # its first pass pins nothing and shrinks nothing: then it only waits
        before = _cpu_seconds(agent.pid)
        time.sleep(seconds)
        used = _cpu_seconds(agent.pid) - before
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
        for pod in made:
            lab.remove_pod(pod)
    return used / seconds


def _cpu_seconds(pid):
    with open("/proc/%d/stat" % pid, encoding="utf-8") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _lab(what):
    """scripts/lab.py, or None (and the reason printed) where no real containerd can run."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import lab as lab_module

    problems = lab_module.missing_requirements()
    if problems:
        print("%s: skipped (%s)" % (what, "; ".join(problems)))
        return None
    return lab_module


def bench_latency(quick):
    lab_module = _lab("2. pinning latency")
    if lab_module is None:
        return
    count = 3 if quick else 20
    rows = []
    with lab_module.Lab() as lab:
        for label, period, watch in (("poll, period 1 s", "1s", False), ("events, period 10 s", "10s", True)):
            with tempfile.TemporaryDirectory() as work:
                agent = _agent(lab, work, period, watch)
                try:
                    time.sleep(0.5)
                    pinned, released = _latencies(lab, count, os.path.join(work, "state"))
                    rows.append((label, percentiles(pinned), percentiles(released)))
                finally:
                    agent.send_signal(signal.SIGTERM)
                    agent.wait(timeout=30)
        with tempfile.TemporaryDirectory() as work:
            burst_size = 5 if quick else 20
            burst = _burst(lab, work, burst_size)
        with tempfile.TemporaryDirectory() as work:
            containers = 5 if quick else 50
            idle = _idle(lab, work, containers, 3.0 if quick else 20.0)
    print("2. pinning latency on containerd 1.6 over gRPC, %d containers, start -> exclusive cpuset in cgroupfs:"
          % count)
    for label, (p50, p99), (free50, free99) in rows:
        print("   %-22s p50 %5.0f ms  p99 %5.0f ms;  pod removed -> CPU released: p50 %5.0f ms  p99 %5.0f ms"
              % (label, p50 * 1000, p99 * 1000, free50 * 1000, free99 * 1000))
    print("   poll / events p99: %.1fx (target: events p99 <= 200 ms); events, release p99 %.0f ms (target <= 1000 ms)"
          % (rows[0][1][1] / rows[1][1][1], rows[1][2][1] * 1000))
    print("   burst, events: %d containers started together, all on their targets %.0f ms after the first start "
          "(target < 1000 ms)" % (burst_size, burst * 1000))
    print("   idle, events, %d shared-pool containers, nothing to do: %.2f%% of a CPU (target < 1%%)"
          % (containers, idle * 100))


def bench_nri(quick):
    """The NRI plugin: its reply to CreateContainer in-process with 0 / 50 / 250 shared containers known (each new
    Guaranteed container shrinks their pool: every reply updates all of them), with the state on this disk (a durable
    write in every reply) and on tmpfs (the work without the disk), and on the real containerd 1.7.24 the first
    instruction's CPUs."""
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.nri_api import PLUGIN_SERVICE, schema
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.services.nri_plugin import NRIPlugin, NRIView

    pb = schema()
    rounds = 5 if quick else 50
    print("5. NRI plugin, CreateContainer -> reply (in-process, 256-CPU node), %d Guaranteed containers each:" % rounds)
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    for where, base in (("disk", None), ("tmpfs", shm)):
        if where == "tmpfs" and (base is None or quick):
            continue
        figures = {}
        for known in (0, 50, 250):
            with tempfile.TemporaryDirectory(dir=base) as work:
                topo = generated(2, 64, 2, 4, 8)
                view = NRIView()
                manager = NodeManager(topo, new_policy("static", topo, 2), StateStore(os.path.join(work, "state")),
                                      view, cgroups=CgroupFS(os.path.join(work, "cgroup")))
                plugin = NRIPlugin(manager, view, open(os.devnull, "w"))
                samples = []
                for n in range(known + rounds):
                    pod = pb.PodSandbox(id="sb%d" % n, name="p%d" % n, uid="u%d" % n, namespace="ns")
                    guaranteed = n >= known
                    pod.linux.cgroup_parent = ("/kubepods/podu%d" if guaranteed else "/kubepods/burstable/podu%d") % n
                    ctr = pb.Container(id="c%d" % n, pod_sandbox_id="sb%d" % n, name="app", state=1)
                    ctr.linux.cgroups_path = pod.linux.cgroup_parent + "/c%d" % n
                    ctr.linux.resources.cpu.shares.value = 1024 if guaranteed else 256
                    ctr.linux.resources.cpu.period.value = 100000
                    if guaranteed:
                        ctr.linux.resources.cpu.quota.value = 100000
                    payload = pb.CreateContainerRequest(pod=pod, container=ctr).SerializeToString()
                    started = time.perf_counter()
                    plugin.handle(PLUGIN_SERVICE, "CreateContainer", payload, 0)
                    if guaranteed:
                        samples.append(time.perf_counter() - started)
                    plugin._after_replies()  # what the plugin's loop does once the reply is sent: not timed
                figures[known] = percentiles(samples)
        for known, (p50, p99) in figures.items():
            print("   state on %-5s %3d shared containers known: p50 %5.2f ms  p99 %5.2f ms  (%.2fx / %.2fx the "
                  "figures with none; target p99 <= 5 ms at 250; the runtime waits up to 2000 ms)"
                  % (where, known, p50 * 1000, p99 * 1000, p50 / figures[0][0], p99 / figures[0][1]))
    _nri_first_instruction(quick)


def _nri_first_instruction(quick):
    lab_module = _lab("   first instruction")
    if lab_module is None:
        return
    binaries = subprocess.run(["bash", os.path.join(ROOT, "scripts", "containerd-nri.sh")], capture_output=True,
                              text=True, check=True).stdout.strip().splitlines()[-1]
    command = ["/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status; exec sleep 100000"]
    count = 3 if quick else 10
    right = 0
    with lab_module.Lab(binaries=binaries, nri=True) as lab, tempfile.TemporaryDirectory() as work:
        state = os.path.join(work, "state")
        log = os.path.join(work, "plugin.log")
        with open(log, "w") as out:
            plugin = subprocess.Popen([os.path.join(ROOT, "bin", "kubecpu"), "nri", "--socket", lab.nri_socket,
                                       "--state", state, "--num-reserved", "1", "--kubelet-state", state + ".k"],
                                      stdout=out, stderr=out, env=dict(os.environ, KUBECPU_PYTHON=sys.executable))
        try:
            time.sleep(1.0)
            for n in range(count):
                pod = lab.run_pod("first-%d" % n, "Guaranteed", [{"name": "main", "cpu": 1000, "command": command}])
                path = os.path.join(pod["sandbox"]["log_directory"], "main", "0.log")
                deadline = time.monotonic() + 10
                while not (os.path.exists(path) and open(path).read().endswith("\n")) and time.monotonic() < deadline:
                    time.sleep(0.01)
                right += open(path).readline().rstrip().endswith("\t1")
                lab.remove_pod(pod)
                time.sleep(0.2)
        finally:
            plugin.send_signal(signal.SIGTERM)
            plugin.wait(timeout=30)
    print("   first instruction on containerd 1.7.24: %d of %d Guaranteed containers saw only their exclusive CPU "
          "in their first line (Cpus_allowed_list)" % (right, count))


def bench_outage(quick):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import lab as lab_module

    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet

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
    parser.add_argument("--nri", action="store_true", help="only section 5, the NRI plugin")
    args = parser.parse_args()
    if args.nri:
        bench_nri(args.quick)
        return
    bench_passes(args.quick)
    if not args.no_real:
        bench_latency(args.quick)
        bench_module(args.quick)
        bench_outage(args.quick)
    bench_nri(args.quick)


if __name__ == "__main__":
    main()
