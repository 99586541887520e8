"""The main job on a real local node: a throwaway containerd with kubelet-like pods, pinned by kubecpu.

Starts containerd (scripts/lab.py), creates the embedded demo's pods as a kubelet would, runs one reconcile pass of
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
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.discovery import discover
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.pod import Pod
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.quantity import milli_value
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.demo import (SAMPLE_PODS, Row, init_notes,
                                                                                          node_line, table)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def lab_pods():
    """The embedded demo's pods (SAMPLE_PODS) as the lab runs them: (namespace, name, QoS class, the containers
    started first, the containers started once those finished). An init container is a container that exits."""
    pods = []
    for doc in SAMPLE_PODS:
        pod = Pod.from_dict(doc)
        apps = [_lab_container(container) for container in pod.containers]
        if pod.init_containers:
            inits = [dict(_lab_container(container), command=["/bin/sleep", "1"]) for container in pod.init_containers]
            pods.append((pod.namespace, pod.name, pod.qos_class(), inits, apps))
        else:
            pods.append((pod.namespace, pod.name, pod.qos_class(), apps, []))
    return pods


def _lab_container(container):
    if container.cpu_request is None:
        return {"name": container.name}
    return {"name": container.name, "cpu": milli_value(container.cpu_request)}


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
    topo = discover("/")
    with lab_module.Lab() as lab, tempfile.TemporaryDirectory() as work:
        state = os.path.join(work, "cpu_manager_state")
        print(node_line(topo))
        print("Runtime: a throwaway containerd %s in %s; kubecpu's agent pass, 1 CPU reserved\n" % (
            lab.cri.version()["RuntimeVersion"], lab.dir))
        made = [(ns, name, qos, lab.run_pod(name, qos, containers, namespace=ns), later)
                for ns, name, qos, containers, later in lab_pods()]
        first = reconcile(lab, state)
        # the init containers finish; their pods' app containers start and reuse their CPUs
        deadline = time.monotonic() + 30
        for _ns, name, _qos, pod, later in made:
            for cid in list(pod["containers"].values()) if later else []:
                while lab.cri.inspect(cid).finished_at == 0:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the %s pod's init container did not finish within 30 s" % name)
                    time.sleep(0.1)
            for container in later:
                pod["containers"][container["name"]] = lab.run_container(pod, container)
        passes = [first, reconcile(lab, state), reconcile(lab, state)]
        for number, doc in enumerate(passes, 1):
            kinds: dict = {}
            for action in doc["actions"]:
                kinds[action["action"]] = kinds.get(action["action"], 0) + 1
            print("Pass %d: %s (runtime calls: %s)" % (
                number, ", ".join("%d %s" % (v, k) for k, v in sorted(kinds.items())) or "nothing to do",
                ", ".join("%s %d" % item for item in sorted(doc["runtime_calls"].items()))))
        refusals = {(e.get("pod"), e.get("container")): e["error"] for e in passes[-1]["errors"]}
        with open(state, encoding="utf-8") as handle:
            saved = handle.read()
        pinned = {name for containers in json.loads(saved)["entries"].values() for name in containers}
        rows = []
        for ns, name, qos, pod, _later in made:
            for container, cid in pod["containers"].items():
                info = lab.cri.inspect(cid)
                running = info.finished_at == 0
                refused = refusals.get(("%s/%s" % (ns, name), container), "")
                cpus = "-"
                if running:
                    cgroup, kernel = lab.cgroup_cpus(pod, cid), lab.allowed_cpus(cid)
                    cpus = cgroup if cgroup == kernel else "cgroup %s, kernel %s" % (cgroup, kernel)
                rows.append(Row("%s/%s/%s" % (ns, name, container), qos,
                                "%dm" % info.requested_milli() if info.requested_milli() else "-",
                                "running" if running else "exited",
                                "refused" if refused else "yes" if container in pinned else "no", cpus,
                                refused.split(": ", 1)[-1]))
        print("\n" + table(rows), end="")
        print(init_notes(), end="")
        print("CPUS: cpuset.cpus in cgroupfs, the same as Cpus_allowed_list of the container's process in /proc.")
        print("\nState file (kubelet cpu_manager_state format):\n" + saved)
    print("Torn down: containerd stopped, pods and state removed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
