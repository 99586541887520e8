"""The main job on a real local node: a throwaway containerd with kubelet-like pods, pinned by kubecpu.

Starts containerd (scripts/lab.py), creates five pods as a kubelet would, runs one reconcile pass of
``bin/kubecpu reconcile --runtime cri`` (one CPU reserved), prints which container got which CPUs as
cgroupfs and the kernel report them, then tears everything down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import lab as lab_module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PODS = [
    ("net", "dpdk-forwarder", "Guaranteed", [{"name": "fwd", "cpu": 1000}, {"name": "stats", "cpu": 500}]),
    ("trading", "matcher", "Guaranteed", [{"name": "warmup", "cpu": 1000, "command": ["/bin/sleep", "1"]}]),
    ("web", "frontend", "Burstable", [{"name": "nginx", "cpu": 250}]),
    ("batch", "report", "BestEffort", [{"name": "job"}]),
]


def reconcile(lab, state):
    argv = [os.path.join(ROOT, "bin", "kubecpu"), "reconcile", "--runtime", "cri", "--runtime-endpoint",
            lab.endpoint, "--state", state, "--num-reserved", "1", "--kubelet-state", state + ".kubelet"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                          env=dict(os.environ, KUBECPU_PYTHON=sys.executable))
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip())
    return json.loads(proc.stdout)


def main() -> int:
    problems = lab_module.missing_requirements()
    if problems:
        print("demo: cannot run a real node here: %s" % "; ".join(problems))
        return 3
    with lab_module.Lab() as lab, tempfile.TemporaryDirectory() as work:
        state = os.path.join(work, "cpu_manager_state")
        print("Started a throwaway containerd (%s) in %s" % (lab.cri.version()["RuntimeVersion"], lab.dir))
        made = [(ns, name, qos, lab.run_pod(name, qos, containers, namespace=ns))
                for ns, name, qos, containers in PODS]
        first = reconcile(lab, state)
        # the matcher's init-like container finishes; its app container starts and inherits its CPU
        matcher = made[1][3]
        while lab.cri.inspect(matcher["containers"]["warmup"]).finished_at == 0:
            time.sleep(0.1)
        matcher["containers"]["engine"] = lab.run_container(matcher, {"name": "engine", "cpu": 1000})
        second = reconcile(lab, state)
        third = reconcile(lab, state)
        for number, doc in enumerate((first, second, third), 1):
            kinds = {}
            for action in doc["actions"]:
                kinds[action["action"]] = kinds.get(action["action"], 0) + 1
            print("Pass %d: %s; runtime calls %s; errors %d" % (
                number, ", ".join("%d %s" % (v, k) for k, v in sorted(kinds.items())) or "nothing to do",
                json.dumps(doc["runtime_calls"]), len(doc["errors"])))
            for error in doc["errors"]:
                print("  %s/%s: %s" % (error.get("pod"), error.get("container"), error["error"]))
        print()
        print("%-30s %-11s %-8s %-7s %-12s %s" % ("POD/CONTAINER", "QOS", "REQUEST", "STATE", "CGROUP CPUS",
                                                  "Cpus_allowed_list"))
        for ns, name, qos, pod in made:
            for container, cid in pod["containers"].items():
                info = lab.cri.inspect(cid)
                running = info.finished_at == 0
                request = "%dm" % info.requested_milli() if info.requested_milli() else "-"
                print("%-30s %-11s %-8s %-7s %-12s %s" % (
                    "%s/%s/%s" % (ns, name, container), qos, request, "running" if running else "exited",
                    lab.cgroup_cpus(pod, cid) if running else "-", lab.allowed_cpus(cid) if running else "-"))
        with open(state, encoding="utf-8") as handle:
            print("\nState file (kubelet cpu_manager_state format):\n" + handle.read())
    print("Torn down: containerd stopped, pods and state removed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
