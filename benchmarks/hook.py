"""What the OCI hook adds to a container's start, on the real containerd 1.7.24 with NRI (scripts/lab.py).

    python benchmarks/hook.py [--quick]

A Guaranteed 1-CPU container's StartContainer (runc create and start: where the createRuntime hook runs), p50 and
p99 over 50 starts each (10 with --quick), in one run:

* baseline: containerd without the hook; the NRI plugin up (it pins at creation) or down (nothing pins);
* checking: containerd with the hook in its base_runtime_spec and the NRI plugin up: the plugin placed the
  container, the hook only checks (its cgroup against the state, no lock);
* allocating: the hook with the plugin down: it allocates under the lock, writes the cgroup, moves the shared ones.

Between two starts the pod is removed and its CPU released (untimed: the plugin on removal, else one agent pass).
Targets (issue 25): checking at most +40 ms p50 and +80 ms p99 over the baseline with the plugin up; allocating at
most +120 ms p99 over the baseline with the plugin down. The hook's own run time is shown beside (its answer's
wall time in a wrapper-free run: python3 bin/kubecpu hook on a recorded state).
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

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.runtime_hook import hook_entry, with_hook

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import lab as lab_module  # noqa: E402

KUBECPU = os.path.join(ROOT, "bin", "kubecpu")
PYTHON = "/usr/bin/python3"  # the node's interpreter, as the role installs the hook


def _binaries():
    out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "containerd-nri.sh")], capture_output=True,
                         text=True, check=True, timeout=600).stdout
    return out.strip().splitlines()[-1]


def _base_spec(binaries, work, state):
    spec = json.loads(subprocess.run([os.path.join(binaries, "ctr"), "oci", "spec"], capture_output=True, text=True,
                                     check=True).stdout)
    config = os.path.join(work, "agent.json")  # as the agent role installs it: the agent's configuration file
    with open(config, "w", encoding="utf-8") as handle:
        json.dump({"state": state, "reserved_cpus": "0", "kubelet_state": os.path.join(work, "no-kubelet-state")},
                  handle)
    spec = with_hook(spec, hook_entry(PYTHON, KUBECPU, config, 10))
    path = os.path.join(work, "base-spec.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(spec, handle)
    return path


class _Plugin:
    def __init__(self, lab, state):
        self.lab, self.state, self.proc = lab, state, None

    def __enter__(self):
        metrics = self.state + ".prom"
        self.proc = subprocess.Popen([PYTHON, KUBECPU, "nri", "--socket", self.lab.nri_socket, "--state", self.state,
                                      "--reserved-cpus", "0", "--kubelet-state", self.state + ".none",
                                      "--metrics-path", metrics], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, env=dict(os.environ, KUBECPU_PYTHON=PYTHON))
        deadline = time.monotonic() + 30
        while not os.path.exists(metrics):  # registered and synchronized: its first pass wrote its metrics
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("the NRI plugin did not register")
            time.sleep(0.02)
        return self

    def __exit__(self, *_exc):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def _starts(lab, count, state, plugin_up):
    """StartContainer's wall time for ``count`` Guaranteed 1-CPU containers, one at a time."""
    samples = []
    for n in range(count):
        pod = lab.run_pod("start-%d" % n, "Guaranteed", [{"name": "app", "cpu": 1000}], start=False)
        cid = pod["containers"]["app"]
        started = time.perf_counter()
        lab.cri.start_container(cid)
        samples.append(time.perf_counter() - started)
        lab.remove_pod(pod)
        if not plugin_up and os.path.exists(state):  # release its CPU as the agent's next pass does
            subprocess.run([PYTHON, KUBECPU, "reconcile", "--runtime", "cri", "--runtime-endpoint", lab.endpoint,
                            "--state", state, "--reserved-cpus", "0", "--kubelet-state", state + ".none"],
                           check=True, capture_output=True, env=dict(os.environ, KUBECPU_PYTHON=PYTHON))
    return samples


def _phase(binaries, hooked, plugin_up, count):
    with tempfile.TemporaryDirectory(prefix="kubecpu-hook-bench-") as work:
        state = os.path.join(work, "state")
        base = _base_spec(binaries, work, state) if hooked else None
        with lab_module.Lab(binaries=binaries, nri=True, base_spec=base) as lab:
            lab.run_pod("warm", "Burstable", [{"name": "app", "cpu": 100}])  # the image and runc in the page cache
            if plugin_up:
                with _Plugin(lab, state):
                    return _starts(lab, count, state, True)
            return _starts(lab, count, state, False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    problems = lab_module.missing_requirements()
    if problems:
        print("skipped: no real containerd here: " + "; ".join(problems))
        return 0
    binaries = _binaries()
    count = 10 if args.quick else 50
    rows = {}
    for label, hooked, plugin_up in (("baseline, plugin up", False, True), ("hook checking, plugin up", True, True),
                                     ("baseline, plugin down", False, False),
                                     ("hook allocating, plugin down", True, False)):
        rows[label] = percentiles(_phase(binaries, hooked, plugin_up, count))
    print("OCI hook: StartContainer of a Guaranteed 1-CPU container on containerd 1.7.24, %d starts each" % count)
    for label, (p50, p99) in rows.items():
        print("   %-30s p50 %6.1f ms  p99 %6.1f ms" % (label, p50 * 1000, p99 * 1000))
    check = [(a - b) * 1000 for a, b in zip(rows["hook checking, plugin up"], rows["baseline, plugin up"])]
    alloc = [(a - b) * 1000 for a, b in zip(rows["hook allocating, plugin down"], rows["baseline, plugin down"])]
    print("   checking adds   p50 %+6.1f ms  p99 %+6.1f ms (target <= +40 / +80 ms)" % tuple(check))
    print("   allocating adds p50 %+6.1f ms  p99 %+6.1f ms (target p99 <= +120 ms)" % tuple(alloc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
