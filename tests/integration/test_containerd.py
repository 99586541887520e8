"""bin/kubecpu reconcile (one pass and the agent loop) against a real containerd over CRI (gRPC).

These machines have 2 CPUs: with one reserved CPU, CPU 1 is the only one that can become exclusive, so each
test leaves no pinned pod behind. cgroup v1, cgroupfs driver, as a kubelet node would have.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.waits import (
    EVENT_PASS_WITHIN, EVENT_TEST_PERIOD, metric, until)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KUBECPU = os.path.join(ROOT, "bin", "kubecpu")
ENV = dict(os.environ, KUBECPU_PYTHON=sys.executable)


def kubecpu(lab, state, *extra, check=True):
    argv = [KUBECPU, "reconcile", "--runtime", "cri", "--runtime-endpoint", lab.endpoint, "--state", str(state),
            "--num-reserved", "1", "--kubelet-state", str(state) + ".kubelet", *extra]
    proc = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=120, check=False)
    if check:
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)
    return proc


@pytest.fixture
def pods(lab):
    made = []

    def make(*args, **kwargs):
        pod = lab.run_pod(*args, **kwargs)
        made.append(pod)
        return pod
    yield make
    for pod in made:
        lab.remove_pod(pod)


def test_guaranteed_pinned_others_shared_then_idempotent(lab, pods, tmp_path):
    state = tmp_path / "state"
    g = pods("fwd", "Guaranteed", [{"name": "main", "cpu": 1000}, {"name": "half", "cpu": 500}])
    b = pods("api", "Burstable", [{"name": "app", "cpu": 250}])
    e = pods("batch", "BestEffort", [{"name": "app"}])
    check = kubecpu(lab, state, "--check")
    assert [a["action"] for a in check["actions"]].count("allocate") == 1
    assert not state.exists() and lab.cgroup_cpus(g, g["containers"]["main"]) == "0-1"

    first = kubecpu(lab, state)
    assert first["changed"]
    allocated = [a for a in first["actions"] if a["action"] == "allocate"]
    assert [(a["container"], a["cpus"]) for a in allocated] == [("main", "1")]
    assert lab.cgroup_cpus(g, g["containers"]["main"]) == "1" == lab.allowed_cpus(g["containers"]["main"])
    for pod, name in ((g, "half"), (b, "app"), (e, "app")):  # 500m in a Guaranteed pod, Burstable, BestEffort
        assert lab.cgroup_cpus(pod, pod["containers"][name]) == "0" == lab.allowed_cpus(pod["containers"][name])
    saved = json.loads(state.read_text())
    assert saved["entries"] == {g["uid"]: {"main": "1"}} and saved["defaultCpuSet"] == "0"

    second = kubecpu(lab, state)
    assert not second["changed"] and second["actions"] == []
    assert second["runtime_calls"] == {"list": 1}


def test_more_cpus_than_free_is_a_clear_error_and_changes_nothing(lab, pods, tmp_path):
    state = tmp_path / "state"
    big = pods("big", "Guaranteed", [{"name": "app", "cpu": 2000}])
    doc = kubecpu(lab, state)
    assert [e["kind"] for e in doc["errors"]] == ["allocation"]
    assert "not enough cpus available to satisfy request: requested=2, available=1" in doc["errors"][0]["error"]
    assert json.loads(state.read_text()).get("entries", {}) == {}
    assert lab.cgroup_cpus(big, big["containers"]["app"]) == "0-1"


def test_init_container_cpus_go_to_the_app_container(lab, pods, tmp_path):
    state = tmp_path / "state"
    # the init container runs until told to finish (exit 0 on SIGTERM): no race with a fixed sleep on a slow machine
    until_told = ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.2; done"]
    pod = pods("migrate", "Guaranteed", [{"name": "init", "cpu": 1000, "command": until_told}])
    first = kubecpu(lab, state)
    assert [(a["container"], a["cpus"]) for a in first["actions"] if a["action"] == "allocate"] == [("init", "1")]
    lab.cri.stop_container(pod["containers"]["init"], timeout=30)
    deadline = time.monotonic() + 20
    while lab.cri.inspect(pod["containers"]["init"]).finished_at == 0:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    app = lab.run_container(pod, {"name": "app", "cpu": 1000})
    second = kubecpu(lab, state)
    assert [(a["container"], a["cpus"]) for a in second["actions"] if a["action"] == "allocate"] == [("app", "1")]
    assert lab.cgroup_cpus(pod, app) == "1"
    assert json.loads(state.read_text())["entries"][pod["uid"]] == {"init": "1", "app": "1"}


def test_restarted_container_is_pinned_to_its_old_cpus(lab, pods, tmp_path):
    state = tmp_path / "state"
    pod = pods("worker", "Guaranteed", [{"name": "app", "cpu": 1000}])
    kubecpu(lab, state)
    old = pod["containers"]["app"]
    lab.cri.stop_container(old)
    new = lab.run_container(pod, {"name": "app", "cpu": 1000}, attempt=1)
    doc = kubecpu(lab, state)
    assert [(a["action"], a["container_id"], a["cpus"]) for a in doc["actions"]] == [("update", new, "1")]
    assert lab.cgroup_cpus(pod, new) == "1" == lab.allowed_cpus(new)


def test_gone_pod_is_released(lab, pods, tmp_path):
    state = tmp_path / "state"
    pod = lab.run_pod("short", "Guaranteed", [{"name": "app", "cpu": 1000}])
    other = pods("stay", "Burstable", [{"name": "app", "cpu": 100}])
    kubecpu(lab, state)
    assert lab.cgroup_cpus(other, other["containers"]["app"]) == "0"
    lab.remove_pod(pod)
    doc = kubecpu(lab, state)
    assert [(a["action"], a["cpus"]) for a in doc["actions"] if a["action"] == "release"] == [("release", "1")]
    assert lab.cgroup_cpus(other, other["containers"]["app"]) == "0-1"


def test_containerd_stopped_fails_the_pass_then_recovers(lab, pods, tmp_path):
    state = tmp_path / "state"
    pods("steady", "Guaranteed", [{"name": "app", "cpu": 1000}])
    kubecpu(lab, state)
    before = state.read_bytes()
    lab.stop_daemon()
    try:
        proc = kubecpu(lab, state, "--runtime-timeout", "1", check=False)
        assert proc.returncode == 1
        assert "unavailable" in proc.stderr and "Traceback" not in proc.stderr
        assert state.read_bytes() == before
    finally:
        lab.start_daemon()
    assert not kubecpu(lab, state)["changed"]


def test_agent_loop_pins_new_containers_survives_an_outage_and_stops_on_sigterm(lab, pods, tmp_path):
    state, metrics = tmp_path / "state", tmp_path / "metrics.prom"
    argv = [KUBECPU, "reconcile", "--loop", "--period", "200ms", "--runtime", "cri", "--runtime-endpoint",
            lab.endpoint, "--state", str(state), "--num-reserved", "1", "--kubelet-state", str(tmp_path / "none"),
            "--metrics-path", str(metrics)]
    agent = subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pod = pods("late", "Guaranteed", [{"name": "app", "cpu": 1000}])
        deadline = time.monotonic() + 20
        while lab.cgroup_cpus(pod, pod["containers"]["app"]) != "1":
            assert time.monotonic() < deadline, "the agent did not pin the container"
            time.sleep(0.05)
        while _thread_cpus(agent.pid) != {"0"}:  # the agent's own threads leave the CPU it handed out
            assert time.monotonic() < deadline, _thread_cpus(agent.pid)
            time.sleep(0.05)
        failed = metric(metrics, 'kubecpu_reconcile_passes_total{result="failure"}')
        lab.stop_daemon(signal.SIGKILL)
        until(lambda: metric(metrics, 'kubecpu_reconcile_passes_total{result="failure"}') > failed,
              "a pass failed while containerd was down")
        lab.start_daemon()
        lab.cri.update(pod["containers"]["app"], cpuset_cpus=lab_cpuset("0-1"))  # drift while it was down
        deadline = time.monotonic() + 40
        while lab.cgroup_cpus(pod, pod["containers"]["app"]) != "1":
            assert time.monotonic() < deadline, "the agent did not recover after containerd came back"
            time.sleep(0.1)
        assert agent.poll() is None
    finally:
        agent.send_signal(signal.SIGTERM)
        out, err = agent.communicate(timeout=30)
    assert agent.returncode == 0, err
    log = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any(entry["level"] == "error" and "unavailable" in entry["msg"] for entry in log)
    assert log[-1]["msg"] == "agent stopped"
    text = metrics.read_text()
    for name in ("cpu_manager_pinning_requests_total 1", "cpu_manager_exclusive_cpu_allocation_count 1",
                 "cpu_manager_shared_pool_size_millicores 0", 'cpu_manager_allocation_per_numa{numa_node="0"} 1',
                 "kubecpu_drift_corrections_total 1", 'kubecpu_reconcile_passes_total{result="failure"}'):
        assert name in text, text


def _thread_cpus(pid):
    """Cpus_allowed_list of every thread of a process."""
    found = set()
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/status" % (pid, tid), encoding="utf-8") as handle:
            found.update(line.split(":", 1)[1].strip() for line in handle if line.startswith("Cpus_allowed_list"))
    return found


def lab_cpuset(text):
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
    return CPUSet.parse(text)


class Vanishing:
    """The real CRI runtime, except that containers named in ``doomed`` are removed from containerd right
    after the list call returns: they vanish between the list and their inspection or update."""

    def __init__(self, lab):
        self.lab = lab
        self.doomed = []
        self.name = "cri"

    def __getattr__(self, name):
        return getattr(self.lab.cri, name)

    def list_containers(self):
        listed = self.lab.cri.list_containers()
        for cid in self.doomed:
            self.lab.cri.stop_container(cid)
            self.lab.cri.remove_container(cid)
        self.doomed = []
        return listed


def test_containers_vanishing_in_the_middle_of_a_pass_are_skipped(lab, pods, tmp_path):
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import NodeConfig
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.factory import build_manager

    runtime = Vanishing(lab)
    config = NodeConfig(state_path=str(tmp_path / "state"), num_reserved=1, runtime="cri",
                        runtime_endpoint=lab.endpoint, kubelet_state_path=str(tmp_path / "none"))
    manager = build_manager(config, with_runtime=True, runtime=runtime)
    shared = pods("shared", "Burstable", [{"name": "a", "cpu": 100}, {"name": "b", "cpu": 100}])
    assert manager.reconcile().errors == []
    pinned = pods("pinned", "Guaranteed", [{"name": "app", "cpu": 1000}])
    late = pods("late", "Burstable", [{"name": "app", "cpu": 100}])
    known, new = shared["containers"]["a"], late["containers"]["app"]
    runtime.doomed = [known, new]  # a cached container that needs an update, and one never inspected

    plan = manager.reconcile()
    assert plan.errors == []
    assert sorted((s["container_id"], s["reason"]) for s in plan.skipped) == sorted([
        (known, "removed before its update"), (new, "removed between the list and its inspection")])
    assert lab.cgroup_cpus(pinned, pinned["containers"]["app"]) == "1"
    assert lab.cgroup_cpus(shared, shared["containers"]["b"]) == "0"
    assert manager.store.load().get(pinned["uid"], "app") is not None

    after = manager.reconcile()  # the next pass recovers: nothing left to do, nothing leaked
    assert after.errors == [] and after.actions == [] and after.runtime_calls == {"list": 1}


def test_pod_list_and_pod_cgroup_parent_over_cri(lab, pods):
    pod = pods("sandbox", "Burstable", [{"name": "app", "cpu": 100}])
    listed = {p.uid: p for p in lab.cri.list_pods()}
    assert listed[pod["uid"]].state == "SANDBOX_READY" and listed[pod["uid"]].name == "sandbox"
    parent = lab.cri.pod_cgroup_parent(pod["sandbox_id"])
    assert parent == "/kubepods/burstable/pod" + pod["uid"]


def test_the_pods_annotations_over_cri(lab):
    """PodSandboxStatus gives the annotations the kubelet set on the sandbox; describe keeps kubecpu's, once asked."""
    pod = lab.run_pod("noted", "Burstable", [{"name": "app", "cpu": 100}],
                      annotations={"cpu-burst.kubecpu.io": "20ms", "irq-load-balancing.kubecpu.io": "disable"})
    try:
        found = lab.cri.pod_annotations(pod["sandbox_id"])
        assert found["cpu-burst.kubecpu.io"] == "20ms" and found["kubernetes.io/config.source"] == "api"
        listed = next(c for c in lab.cri.list_containers() if c.id == pod["containers"]["app"])
        assert lab.cri.describe(listed).annotations is None  # not asked for
        lab.cri.want_annotations = True
        assert lab.cri.describe(listed).annotations == {"cpu-burst.kubecpu.io": "20ms",
                                                        "irq-load-balancing.kubecpu.io": "disable"}
    finally:
        lab.cri.want_annotations = False
        lab.remove_pod(pod)


def read_cgroup(controller, path, name):
    with open("/sys/fs/cgroup/%s%s/%s" % (controller, path, name), encoding="utf-8") as handle:
        return handle.read().strip()


def test_unlimited_cpu_quota_and_memory_alignment_are_applied_and_restored(lab, pods, tmp_path):
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import ManagerOptions
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import NodeConfig
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.factory import build_manager

    pod = pods("quota", "Guaranteed", [{"name": "app", "cpu": 1000}])
    cid = pod["containers"]["app"]
    path = lab.cri.inspect(cid).cgroup_path
    assert read_cgroup("cpu", path, "cpu.cfs_quota_us") == "100000"  # a 1-CPU limit, as the kubelet sets it
    config = NodeConfig(state_path=str(tmp_path / "state"), num_reserved=1, runtime="cri",
                        runtime_endpoint=lab.endpoint, kubelet_state_path=str(tmp_path / "none"),
                        options=ManagerOptions(align_memory=True, cpu_quota="unlimited"))
    manager = build_manager(config, with_runtime=True)
    plan = manager.reconcile()
    assert plan.errors == []
    assert lab.cgroup_cpus(pod, cid) == "1"
    assert read_cgroup("cpu", path, "cpu.cfs_quota_us") == "-1"  # not capped by CFS while it owns CPU 1
    assert read_cgroup("cpu", path.rsplit("/", 1)[0], "cpu.cfs_quota_us") == "-1"  # nor its pod
    assert read_cgroup("cpuset", path, "cpuset.mems") == "0"  # the NUMA node of CPU 1
    assert not manager.reconcile().changed

    released = manager.release_container(container_id=cid)
    assert released.errors == [] and released.result["released"] == "1"
    assert lab.cgroup_cpus(pod, cid) == "0-1"
    assert read_cgroup("cpu", path, "cpu.cfs_quota_us") == "100000"  # its limit again
    assert read_cgroup("cpu", path.rsplit("/", 1)[0], "cpu.cfs_quota_us") == "100000"  # the kubelet's pod quota
    manager.runtime.close()


def test_agent_and_one_shot_passes_together_never_double_book(lab, pods, tmp_path):
    """The agent at a 50 ms period and 12 concurrent one-shot passes share one state file; three Guaranteed
    pods compete for the one CPU that can be exclusive, and the pinned pod goes away half-way."""
    import concurrent.futures

    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import NodeConfig
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.factory import build_manager

    state = tmp_path / "state"
    agent = subprocess.Popen(
        [KUBECPU, "reconcile", "--loop", "--period", "50ms", "--runtime", "cri", "--runtime-endpoint", lab.endpoint,
         "--state", str(state), "--num-reserved", "1", "--kubelet-state", str(tmp_path / "none")],
        env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        first = lab.run_pod("first", "Guaranteed", [{"name": "app", "cpu": 1000}])
        others = [pods("other-%d" % n, "Guaranteed", [{"name": "app", "cpu": 1000}]) for n in range(2)]
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            runs = [pool.submit(kubecpu, lab, state, check=False) for _pass in range(6)]
            lab.remove_pod(first)
            runs += [pool.submit(kubecpu, lab, state, check=False) for _pass in range(6)]
            codes = [r.result().returncode for r in runs]
        assert codes == [0] * 12
        deadline = time.monotonic() + 20
        while True:  # the agent settles: one of the remaining pods owns CPU 1
            config = NodeConfig(state_path=str(state), num_reserved=1, read_only=True)
            saved = build_manager(config).read_state()  # validates like the kubelet would at a restart
            owners = [(uid, name) for uid, name, cpus in saved.assignments() if 1 in cpus]
            if len(owners) == 1 and owners[0][0] in {p["uid"] for p in others}:
                break
            assert time.monotonic() < deadline, saved.to_dict()
            time.sleep(0.1)
        assert len(list(saved.assignments())) == 1 and str(saved.default) == "0"
        pinned = next(p for p in others if p["uid"] == owners[0][0])
        assert lab.cgroup_cpus(pinned, pinned["containers"]["app"]) == "1"
        for pod in others:
            if pod is not pinned:
                assert lab.cgroup_cpus(pod, pod["containers"]["app"]) == "0"
    finally:
        agent.send_signal(signal.SIGTERM)
        _out, err = agent.communicate(timeout=30)
    assert agent.returncode == 0, err


def test_the_cri_runtime_needs_nothing_but_python_and_writes_no_code(lab, pods, tmp_path, bare_python):
    state = tmp_path / "kubecpu" / "state"
    state.parent.mkdir()  # kubecpu makes no directory it was not asked for
    g = pods("bare-python", "Guaranteed", [{"name": "main", "cpu": 1000}])
    argv = [KUBECPU, "reconcile", "--runtime", "cri", "--runtime-endpoint", lab.endpoint, "--state", str(state),
            "--num-reserved", "1", "--kubelet-state", str(tmp_path / "kubelet-state")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                          env=dict(os.environ, KUBECPU_PYTHON=bare_python, TMPDIR=str(tmp_path / "tmp")))
    assert proc.returncode == 0, proc.stderr
    assert [(a["container"], a["cpus"]) for a in json.loads(proc.stdout)["actions"] if a["action"] == "allocate"] == [
        ("main", "1")]
    assert lab.cgroup_cpus(g, g["containers"]["main"]) == "1"
    written = sorted(os.listdir(state.parent))
    assert written == ["state", "state.baselines.json", "state.containers.json", "state.lock"]  # no generated code
    assert not (tmp_path / "tmp").exists() or not os.listdir(tmp_path / "tmp")


def event_agent(lab, state, tmp_path):
    """The loop agent over CRI with a period of EVENT_TEST_PERIOD: a pass within EVENT_PASS_WITHIN was an event's."""
    argv = [KUBECPU, "reconcile", "--loop", "--period", EVENT_TEST_PERIOD, "--runtime", "cri", "--runtime-endpoint",
            lab.endpoint, "--state", str(state), "--num-reserved", "1", "--kubelet-state", str(state) + ".kubelet",
            "--metrics-path", str(tmp_path / "kubecpu.prom")]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)


def test_the_agent_wakes_on_container_cgroups_not_its_period(lab, pods, tmp_path):
    """--period 60s: a burst of containers started together is pinned (and the shared pool shrunk) within
    EVENT_PASS_WITHIN seconds (idle, well under one), because their cgroups coming wake the agent, not the period."""
    state = tmp_path / "state"
    agent = event_agent(lab, state, tmp_path)
    try:  # its first pass done: the next by the period would be 60 s away
        until(lambda: metric(tmp_path / "kubecpu.prom", "kubecpu_reconcile_passes_total{") >= 1, "the first pass")
        made = [pods("burst-%d" % n, "Burstable", [{"name": "app", "cpu": 100}]) for n in range(4)]
        made.append(pods("burst-g", "Guaranteed", [{"name": "main", "cpu": 1000}]))
        started = time.monotonic()  # the last one has just started
        want = {id(p): "1" if p["qos"] == "Guaranteed" else "0" for p in made}
        while time.monotonic() - started < 2 * EVENT_PASS_WITHIN:
            seen = {id(p): lab.cgroup_cpus(p, next(iter(p["containers"].values()))) for p in made}
            if seen == want:
                break
            time.sleep(0.01)
        took = time.monotonic() - started
        assert seen == want and took < EVENT_PASS_WITHIN, took
    finally:
        agent.send_signal(signal.SIGTERM)
        _out, err = agent.communicate(timeout=30)
    assert agent.returncode == 0, err


def test_a_removed_pod_is_released_as_fast_as_a_new_one_is_pinned(lab, tmp_path):
    """Issue 24: --period 60s, woken by cgroup events (containerd 1.6, cgroupfs). A pinned pod removed as
    ``crictl rmp -f`` removes it (its sandbox stopped and removed) is released within EVENT_PASS_WITHIN seconds, three
    times of three, long before a period's pass: the cgroup's going wakes a pass while the runtime still lists the
    container, and the passes that follow a moving list see it go. Idle it takes milliseconds; beside the whole suite
    on 2 CPUs one release took 1.34 s on 2026-12-07, so the bound tells an event's pass from the period's and is no
    latency target (benchmarks/reconcile.py measures that)."""
    state = tmp_path / "state"
    agent = event_agent(lab, state, tmp_path)

    def entries():
        return json.loads(state.read_text()).get("entries", {}) if state.exists() else {}

    took = []
    try:
        until(lambda: metric(tmp_path / "kubecpu.prom", "kubecpu_reconcile_passes_total{") >= 1, "the first pass")
        for n in range(3):
            pod = lab.run_pod("gone-%d" % n, "Guaranteed", [{"name": "main", "cpu": 1000}])
            until(lambda pod=pod: pod["uid"] in entries(), "pod %d pinned" % n, timeout=5)
            lab.remove_pod(pod)
            started = time.monotonic()
            until(lambda pod=pod: pod["uid"] not in entries(), "pod %d released" % n, timeout=60, step=0.01)
            took.append(time.monotonic() - started)
    finally:
        agent.send_signal(signal.SIGTERM)
        _out, err = agent.communicate(timeout=30)
    assert agent.returncode == 0, err
    assert max(took) < EVENT_PASS_WITHIN, took


def test_the_agent_follows_an_in_place_resize(lab, pods, tmp_path):
    """The kubelet's resize through UpdateContainerResources (from the test), seen by the agent as the container's
    new CFS quota in cgroupfs: to a fractional request (shared pool), back (exclusive), up (infeasible on two CPUs:
    kept and reported); each checked in /proc."""
    state = tmp_path / "state"
    argv = [KUBECPU, "reconcile", "--loop", "--period", "100ms", "--runtime", "cri", "--runtime-endpoint",
            lab.endpoint, "--state", str(state), "--num-reserved", "1", "--kubelet-state", str(state) + ".kubelet",
            "--metrics-path", str(tmp_path / "kubecpu.prom")]
    agent = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)

    def settled(want):
        deadline = time.monotonic() + 5
        while lab.allowed_cpus(cid) != want and time.monotonic() < deadline:
            time.sleep(0.02)
        return lab.allowed_cpus(cid)

    try:
        pod = pods("resized", "Guaranteed", [{"name": "main", "cpu": 1000}])
        cid = pod["containers"]["main"]
        assert settled("1") == "1"
        lab.cri.update(cid, cpu_quota=50000, cpu_period=100000)  # 500m
        assert settled("0-1") == "0-1"
        assert json.loads(state.read_text()).get("entries", {}) == {}
        lab.cri.update(cid, cpu_quota=100000, cpu_period=100000)  # 1 CPU again
        assert settled("1") == "1"
        lab.cri.update(cid, cpu_quota=200000, cpu_period=100000)  # 2: only CPU 1 can be exclusive
        until(lambda: metric(tmp_path / "kubecpu.prom", "kubecpu_resize_errors_total") >= 1, "the resize refused",
              timeout=5)
        assert lab.allowed_cpus(cid) == "1" and json.loads(state.read_text())["entries"] == {pod["uid"]: {"main": "1"}}
    finally:
        agent.send_signal(signal.SIGTERM)
        _out, err = agent.communicate(timeout=30)
    assert "resize infeasible: container lab/resized/main asks for 2 CPUs and keeps 1" in err


def test_a_lost_checkpoint_is_rebuilt_from_what_runs(lab, pods, tmp_path):
    state = tmp_path / "state"
    g = pods("rebuild-g", "Guaranteed", [{"name": "main", "cpu": 1000}])
    pods("rebuild-b", "Burstable", [{"name": "app", "cpu": 100}])
    kubecpu(lab, state)  # pins rebuild-g/main, shrinks the others to the shared pool
    lost = json.loads(state.read_text())
    assert lost["entries"] == {g["uid"]: {"main": "1"}}
    state.write_text("lost in a crash")
    argv = [KUBECPU, "state", "--rebuild", "--runtime", "cri", "--runtime-endpoint", lab.endpoint, "--state",
            str(state), "--num-reserved", "1"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    rebuilt = json.loads(state.read_text())
    assert (rebuilt["entries"], rebuilt["defaultCpuSet"]) == (lost["entries"], lost["defaultCpuSet"]) == (
        json.loads(proc.stdout)["entries"], json.loads(proc.stdout)["defaultCpuSet"])
    kept = [name for name in os.listdir(tmp_path) if name.startswith("state.rebuild-")]
    assert len(kept) == 1 and (tmp_path / kept[0]).read_text() == "lost in a crash"
    assert kubecpu(lab, state)["counts"]["allocate"] == 0  # the agent goes on from the rebuilt file
