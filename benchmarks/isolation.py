"""The isolation result, the reason the collection exists: a latency-sensitive victim beside a CPU aggressor on a
real containerd node, first unpinned, then with kubecpu giving the victim an exclusive CPU (one `bin/kubecpu
reconcile` pass over CRI; no hand-made cpusets), with `cpu_quota: keep` and `unlimited`. The baseline in the same
run is the same workload as plain processes, unpinned and then pinned with sched_setaffinity (taskset).

Victim: a Guaranteed 1-CPU container whose workload is a Python loop joined to the container's cgroups (cpuset,
cpu, cpuacct), so it is placed exactly as the container is: each iteration does a fixed amount of work, and its
wall time is the latency sample; throughput is iterations per second. Aggressor: a Burstable container with no
limit running three busy loops, requesting 1 CPU (an equal neighbour) or 3 CPUs (a heavy one). The pod and QoS
cgroups get the cpu.shares the kubelet gives them (the sum of their requests), so CFS weighs the neighbours as on
a kubelet node. Per mode: victim p50 / p99 latency and throughput, the aggressor's CPU use (cpuacct), the victim's
CFS throttling counters (cpu.stat), and ratios against the unpinned run of the same neighbour.

    python benchmarks/isolation.py [--seconds 8] [--quick]      # root, containerd (scripts/lab.py installs it)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from _common import percentiles

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import lab as lab_module  # noqa: E402

VICTIM = r'''
import json, os, sys, time
for controller in sys.argv[2:]:
    with open(os.path.join(controller, "tasks"), "w") as handle:
        handle.write(str(os.getpid()))
if os.environ.get("PIN"):
    os.sched_setaffinity(0, {int(os.environ["PIN"])})
end = time.perf_counter() + float(sys.argv[1])
samples = []
while True:
    start = time.perf_counter()
    if start >= end:
        break
    x = 0
    for i in range(20000):
        x += i
    samples.append(time.perf_counter() - start)
print(json.dumps(samples))
'''
BURN = ["/bin/sh", "-c", "while :; do :; done & while :; do :; done & while :; do :; done"]


def cgroup_dirs(lab, cid):
    path = lab.cri.inspect(cid).cgroup_path
    return {c: "/sys/fs/cgroup/%s%s" % (c, path) for c in ("cpuset", "cpu", "cpuacct")}


def read(path, default=""):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return default


def throttled(cpu_dir):
    stat = dict(line.split() for line in read(os.path.join(cpu_dir, "cpu.stat")).splitlines() if line)
    return int(stat.get("nr_throttled", 0)), int(stat.get("nr_periods", 0))


def victim_run(seconds, dirs=(), pin=None):
    env = dict(os.environ, PIN=str(pin) if pin is not None else "")
    out = subprocess.run([sys.executable, "-c", VICTIM, str(seconds), *dirs], env=env, capture_output=True,
                         text=True, check=True).stdout
    samples = json.loads(out)
    p50, p99 = percentiles(samples)
    return {"p50_us": p50 * 1e6, "p99_us": p99 * 1e6, "throughput": len(samples) / seconds}


def kubecpu_pass(lab, state, quota):
    argv = [os.path.join(ROOT, "bin", "kubecpu"), "reconcile", "--runtime", "cri", "--runtime-endpoint",
            lab.endpoint, "--state", state, "--num-reserved", "1", "--cpu-quota", quota,
            "--kubelet-state", state + ".kubelet-absent"]
    doc = json.loads(subprocess.run(argv, env=dict(os.environ, KUBECPU_PYTHON=sys.executable), capture_output=True,
                                    text=True, check=True).stdout)
    return [(a["action"], a.get("container"), a.get("cpus")) for a in doc["actions"]]


def kubelet_shares(cpu_dir, millicores):
    """What the kubelet writes: a pod cgroup's (and the burstable QoS cgroup's) cpu.shares = sum of requests."""
    with open(os.path.join(cpu_dir, "cpu.shares"), "w", encoding="utf-8") as handle:
        handle.write(str(max(2, millicores * 1024 // 1000)))


def container_modes(lab, seconds, work, aggressor_milli):
    victim = lab.run_pod("victim", "Guaranteed", [{"name": "victim", "cpu": 1000}])
    aggressor = lab.run_pod("aggressor", "Burstable", [{"name": "burn", "cpu": aggressor_milli, "command": BURN}])
    vdirs = cgroup_dirs(lab, victim["containers"]["victim"])
    adirs = cgroup_dirs(lab, aggressor["containers"]["burn"])
    kubelet_shares(os.path.dirname(vdirs["cpu"]), 1000)
    kubelet_shares(os.path.dirname(adirs["cpu"]), aggressor_milli)
    kubelet_shares(os.path.dirname(os.path.dirname(adirs["cpu"])), aggressor_milli)  # kubepods/burstable
    state = os.path.join(work, "state-%d" % aggressor_milli)
    rows = []
    label = "%d-CPU neighbour" % (aggressor_milli // 1000)
    for mode, quota in (("unpinned, " + label, None), ("kubecpu keep, " + label, "keep"),
                        ("kubecpu unlimited, " + label, "unlimited")):
        actions = kubecpu_pass(lab, state, quota) if quota else []
        time.sleep(0.5)
        usage0, thr0 = int(read(os.path.join(adirs["cpuacct"], "cpuacct.usage"), "0")), throttled(vdirs["cpu"])
        row = victim_run(seconds, list(vdirs.values()))
        usage1, thr1 = int(read(os.path.join(adirs["cpuacct"], "cpuacct.usage"), "0")), throttled(vdirs["cpu"])
        row.update(mode=mode, aggressor_cpus=(usage1 - usage0) / 1e9 / seconds, victim_cpuset=read(
            os.path.join(vdirs["cpuset"], "cpuset.cpus")), aggressor_cpuset=read(
            os.path.join(adirs["cpuset"], "cpuset.cpus")), throttled=thr1[0] - thr0[0], periods=thr1[1] - thr0[1],
            quota=read(os.path.join(vdirs["cpu"], "cpu.cfs_quota_us")), actions=actions)
        rows.append(row)
    lab.remove_pod(victim)
    lab.remove_pod(aggressor)
    return rows


def taskset_modes(seconds):
    rows = []
    for mode, victim_cpu, burn_cpu in (("plain processes, unpinned", None, None),
                                       ("plain processes, taskset", 1, 0)):
        burners = [subprocess.Popen(["taskset", "-c", str(burn_cpu), *BURN[:2], "while :; do :; done"]
                                    if burn_cpu is not None else [*BURN[:2], "while :; do :; done"])
                   for _index in range(3)]
        try:
            time.sleep(0.3)
            row = victim_run(seconds, pin=victim_cpu)
        finally:
            for proc in burners:
                proc.kill()
                proc.wait()
        row.update(mode=mode, aggressor_cpus=None, throttled=None, periods=None, quota="", victim_cpuset=(
            str(victim_cpu) if victim_cpu is not None else "all"), aggressor_cpuset=(
            str(burn_cpu) if burn_cpu is not None else "all"), actions=[])
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="victim run per mode (default 8)")
    parser.add_argument("--quick", action="store_true", help="1 s per mode (a smoke run for the test suite)")
    args = parser.parse_args()
    seconds = 1.0 if args.quick else args.seconds
    missing = lab_module.missing_requirements()
    if missing or os.cpu_count() < 2:
        print("isolation: skipped (%s)" % (", ".join(missing) or "fewer than 2 CPUs"))
        return 0
    with lab_module.Lab() as lab, tempfile.TemporaryDirectory() as work:
        rows = container_modes(lab, seconds, work, 1000) + container_modes(lab, seconds, work, 3000)
    rows += taskset_modes(seconds)
    print("victim: %.0f s per mode; aggressor: 3 busy loops; %d CPUs" % (seconds, os.cpu_count()))
    header = ("mode", "victim cpus", "aggr cpus", "p50 us", "p99 us", "iter/s", "p99 ratio", "thr ratio",
              "aggr CPU", "throttled", "quota")
    print("%-34s %-11s %-9s %8s %9s %8s %9s %9s %8s %10s %8s" % header)
    for index, row in enumerate(rows):
        ref = rows[index - index % 3] if index < 6 else rows[6]
        print("%-34s %-11s %-9s %8.0f %9.0f %8.0f %9.2f %9.2f %8s %10s %8s" % (
            row["mode"], row["victim_cpuset"], row["aggressor_cpuset"], row["p50_us"], row["p99_us"],
            row["throughput"], row["p99_us"] / ref["p99_us"], row["throughput"] / ref["throughput"],
            "-" if row["aggressor_cpus"] is None else "%.2f" % row["aggressor_cpus"],
            "-" if row["throttled"] is None else "%d/%d" % (row["throttled"], row["periods"]), row["quota"] or "-"))
    for first in (0, 3):
        unpinned = rows[first]
        for pinned in rows[first + 1:first + 3]:
            p99, thr = pinned["p99_us"] / unpinned["p99_us"], pinned["throughput"] / unpinned["throughput"]
            print("target, %s (pinned p99 <= 0.25x unpinned, throughput >= 1.8x): p99 %.2fx, throughput %.2fx: %s" % (
                pinned["mode"], p99, thr, "not judged (--quick)" if args.quick else "met" if p99 <= 0.25 and thr >= 1.8
                else "MISSED"))
    taskset = rows[7]["p99_us"] / rows[6]["p99_us"], rows[7]["throughput"] / rows[6]["throughput"]
    print("the same machine's floor, plain processes with taskset: p99 %.2fx, throughput %.2fx" % taskset)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
