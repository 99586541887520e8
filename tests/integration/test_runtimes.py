"""Every runtime (Debian 12's containerd 1.6; scripts/runtimes.sh: containerd 1.7.24 and 2.1.9 from Debian, CRI-O
1.36.3, 2.4.2 and crictl 1.37.0 built from the Go module proxy), for what the CRI backends do on it: ``bin/kubecpu
reconcile`` over CRI (gRPC) and through a real crictl pins, shares and releases, ``state --rebuild`` rebuilds a
lost state file from what crictl lists, the pod annotations kubecpu reads come through both, and the modules
cpu_manager_reconcile and cpu_manager_allocate run through crictl. The recorded crictl samples stay as the unit
tests' data (tests/unit/support/fake_crictl.py)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import runtimes
from test_containerd import ENV, KUBECPU
from test_modules import playbook

CRICTL_PLAYBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crictl.yml")


@pytest.fixture(scope="module", params=["containerd 1.6", "containerd 1.7.24", "containerd 2.1.9", "containerd 2.4.2",
                                        "cri-o 1.36.3"])
def runtime_lab(request, tmp_path_factory):
    with runtimes.runtime_lab(request.param, str(tmp_path_factory.mktemp("runtime-lab"))) as lab:
        lab.name = request.param
        yield lab


def kubecpu(lab, crictl, *argv):
    """bin/kubecpu through ``crictl`` (None: over CRI, gRPC)."""
    backend = ["--runtime", "crictl", "--crictl", crictl] if crictl else ["--runtime", "cri"]
    proc = subprocess.run([KUBECPU, *argv, *backend, "--runtime-endpoint", lab.endpoint, "--num-reserved", "1"],
                          capture_output=True, text=True, env=ENV, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_crictl_reports_the_runtime_it_talks_to(runtime_lab, crictl):
    out = subprocess.run([crictl, "--runtime-endpoint", runtime_lab.endpoint, "version"], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    name, version = runtime_lab.name.split()
    assert "RuntimeName:  %s\n" % name in out and "RuntimeVersion:  %s" % version in out.replace(" v", " ")


@pytest.mark.parametrize("backend", ["crictl", "cri"])
def test_reconcile_pins_shares_releases_and_a_lost_state_is_rebuilt(runtime_lab, crictl, tmp_path, backend):
    lab, state = runtime_lab, tmp_path / "state"
    crictl = crictl if backend == "crictl" else None
    kubelet = ("--state", str(state), "--kubelet-state", str(tmp_path / "kubelet"))
    g = lab.run_pod("crictl-g", "Guaranteed", [{"name": "main", "cpu": 1000}, {"name": "half", "cpu": 500}])
    b = lab.run_pod("crictl-b", "Burstable", [{"name": "app", "cpu": 250}])
    try:
        first = kubecpu(lab, crictl, "reconcile", *kubelet)
        assert [(a["container"], a["cpus"]) for a in first["actions"] if a["action"] == "allocate"] == [("main", "1")]
        assert lab.cgroup_cpus(g, g["containers"]["main"]) == "1" == lab.allowed_cpus(g["containers"]["main"])
        assert lab.cgroup_cpus(g, g["containers"]["half"]) == "0" == lab.cgroup_cpus(b, b["containers"]["app"])
        assert not kubecpu(lab, crictl, "reconcile", *kubelet)["changed"]

        lost = json.loads(state.read_text())
        state.write_text("lost in a crash")
        rebuilt = kubecpu(lab, crictl, "state", "--rebuild", "--state", str(state))
        assert (rebuilt["entries"], rebuilt["defaultCpuSet"]) == (lost["entries"], lost["defaultCpuSet"]) == (
            {g["uid"]: {"main": "1"}}, "0")
        assert json.loads(state.read_text())["entries"] == lost["entries"]
    finally:
        lab.remove_pod(g)
        lab.remove_pod(b)
    released = kubecpu(lab, crictl, "reconcile", *kubelet)
    assert [a["action"] for a in released["actions"]] == ["release"]
    assert json.loads(state.read_text()).get("entries", {}) == {}  # omitted when empty, as the kubelet writes it


def test_the_modules_through_crictl(runtime_lab, crictl, tmp_path):
    lab = runtime_lab
    pod = lab.run_pod("crictl-ansible", "Guaranteed", [{"name": "main", "cpu": 1000}])
    try:
        proc = playbook({"crictl": crictl, "endpoint": lab.endpoint, "state_path": str(tmp_path / "state"),
                         "kubelet_state": str(tmp_path / "kubelet"), "pod_uid": pod["uid"],
                         "main_id": pod["containers"]["main"]}, path=CRICTL_PLAYBOOK)
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
        assert lab.cgroup_cpus(pod, pod["containers"]["main"]) == "1" == lab.allowed_cpus(pod["containers"]["main"])
    finally:
        lab.remove_pod(pod)


def test_the_pod_annotations_kubecpu_reads_come_through_both_backends(runtime_lab, crictl):
    """kubecpu's annotations and CRI-O's name for interrupt isolation, from the sandbox as the runtime keeps it. CRI-O
    itself drops its own ``irq-load-balancing.crio.io`` from a pod whose runtime handler does not allow it (its
    ``allowed_annotations``; the default handler allows none): kubecpu sees it only where CRI-O would act on it."""
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.crictl import CrictlRuntime

    notes = {"cpu-burst.kubecpu.io": "20ms", "irq-load-balancing.kubecpu.io": "disable",
             "irq-load-balancing.crio.io": "disable"}
    pod = runtime_lab.run_pod("noted", "Burstable", [{"name": "app", "cpu": 100}], annotations=notes)
    try:
        through_crictl = CrictlRuntime(crictl, runtime_lab.endpoint, timeout=30).pod_annotations(pod["sandbox_id"])
        over_cri = runtime_lab.cri.pod_annotations(pod["sandbox_id"])
        kept = {key: value for key, value in notes.items()
                if not (runtime_lab.name.startswith("cri-o") and key.endswith(".crio.io"))}
        for found in (through_crictl, over_cri):
            assert {key: found.get(key) for key in notes} == dict(dict.fromkeys(notes), **kept)
    finally:
        runtime_lab.remove_pod(pod)


def test_a_burstable_containers_exclusive_cpus_and_the_system_partition_through_the_agent(runtime_lab, tmp_path):
    """Issue 66's features 1 and 3 on each runtime (docs/HOUSEKEEPING.md), through the agent's passes over CRI, CPU
    0 reserved: a Burstable pod's container named by ``cpu-exclusive.kubecpu.io`` gets CPU 1 and its unnamed helper
    stays on the shared CPU 0; removed, CPU 1 is released. With the system partition a kube-system pod runs on the
    reserved CPU 0 and every other container off it; switched off, both share every CPU again. (The guest's
    tests/guest/test_workload_asks.py resizes and defragments on 8 CPUs; this host has 2.)"""
    lab, flags = runtime_lab, ("--state", str(tmp_path / "state"), "--kubelet-state", str(tmp_path / "kubelet"))
    burst = lab.run_pod("burst", "Burstable", [{"name": "app", "cpu": 1000, "limit": 1000}, {"name": "side", "cpu": 100}],
                        annotations={"cpu-exclusive.kubecpu.io": "app"})
    try:
        pinned = kubecpu(lab, None, "reconcile", *flags, "--exclusive-burstable")
        assert [(a["action"], a["container"], a["cpus"]) for a in pinned["actions"] if a["action"] == "allocate"] == [
            ("allocate", "app", "1")]
        app, side = burst["containers"]["app"], burst["containers"]["side"]
        assert (lab.cgroup_cpus(burst, app), lab.allowed_cpus(app), lab.cgroup_cpus(burst, side)) == ("1", "1", "0")
    finally:
        lab.remove_pod(burst)
    released = kubecpu(lab, None, "reconcile", *flags, "--exclusive-burstable")
    assert [(a["action"], a["container"]) for a in released["actions"]] == [("release", "app")]

    system = lab.run_pod("node-agent", "Burstable", [{"name": "app", "cpu": 100}], namespace="kube-system")
    web = lab.run_pod("web", "Burstable", [{"name": "app", "cpu": 250}])
    try:
        kubecpu(lab, None, "reconcile", *flags, "--system-partition", "--system-namespaces", "kube-system")
        cids = system["containers"]["app"], web["containers"]["app"]
        assert [lab.cgroup_cpus(pod, cid) for pod, cid in zip((system, web), cids)] == ["0", "1"]
        assert [lab.allowed_cpus(cid) for cid in cids] == ["0", "1"]
        kubecpu(lab, None, "reconcile", *flags)  # switched off: the whole pool again
        assert [lab.cgroup_cpus(pod, cid) for pod, cid in zip((system, web), cids)] == ["0-1", "0-1"]
    finally:
        lab.remove_pod(system)
        lab.remove_pod(web)


def test_per_pod_power_through_the_agent_on_a_modelled_sysfs(runtime_lab, tmp_path):
    """Issue 66's feature 2 on each runtime, through the agent's passes over CRI: the pod's annotations as the runtime
    keeps them set its exclusive CPU's C-state limit and governor on a sysfs tree modelled on Linux's (2 CPUs, as
    this host, with intel_pstate's cpufreq files: tests/unit/support/fake_sysfs.py), CPU 0's left as they were; the
    pod removed, both are given back and the record goes. (The guest proves the C-state limit on a real kernel:
    tests/guest/test_power.py.)"""
    from ansible_collections.kubecpu.cpu_manager.tests.unit.support import fake_sysfs

    lab, root = runtime_lab, str(tmp_path / "machine")
    fake_sysfs.build(root, fake_sysfs.machine(1, 2, 1))
    fake_sysfs.power(root, range(2))
    cpu_dir = os.path.join(root, "sys", "devices", "system", "cpu")

    def power():
        read = {}
        for cpu in range(2):
            with open(os.path.join(cpu_dir, "cpu%d" % cpu, "power", "pm_qos_resume_latency_us"), encoding="ascii") as f:
                latency = f.read().strip()
            with open(os.path.join(cpu_dir, "cpu%d" % cpu, "cpufreq", "scaling_governor"), encoding="ascii") as f:
                read[cpu] = (latency, f.read().strip())
        return read

    flags = ("--state", str(tmp_path / "state"), "--kubelet-state", str(tmp_path / "kubelet"), "--cpu-power",
             "--sysfs-root", root)
    before = power()
    pod = lab.run_pod("calm", "Guaranteed", [{"name": "main", "cpu": 1000}],
                      annotations={"cpu-c-states.kubecpu.io": "max_latency:20",
                                   "cpu-freq-governor.kubecpu.io": "performance"})
    try:
        kubecpu(lab, None, "reconcile", *flags)
        assert lab.cgroup_cpus(pod, pod["containers"]["main"]) == "1"
        assert power() == {0: before[0], 1: ("20", "performance")}
    finally:
        lab.remove_pod(pod)
    kubecpu(lab, None, "reconcile", *flags)
    assert power() == before and not os.path.exists(str(tmp_path / "state") + ".power.json")
