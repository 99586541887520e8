"""kubecpu's NRI plugin beside the NRI resource-policy plugins topology-aware and balloons, on one containerd 2.

    python benchmarks/peers.py [--quick]

Each plugin in turn, ONE AT A TIME, against the same containerd 2.4.2 on this machine (scripts/runtimes.sh
containerd-2.4, a lab of scripts/lab.py: cgroupfs driver, kubelet-like pods and cgroup parents, NRI on), with the same
pod sequence. The peers are v0.14.0 of github.com/containers/nri-plugins (scripts/peers.sh builds them once per
machine); they run without an API server: ``-config-file`` with their policy's custom resource as YAML (CONFIGS
below: pinCPU on, pinMemory off as kubecpu's default, reservedResources cpu "cpuset:0" as kubecpu's
``--reserved-cpus 0``), ``-nri-socket``, ``-pid-file`` and ``-state-dir`` on a mount of its own made rshared
(their reply bind-mounts a directory of it into every container, which containerd 2 refuses from a private mount).
kubecpu runs as ``bin/kubecpu nri`` with the node's /usr/bin/python3, as the agent role starts it.

How the reply is timed: a proxy on the NRI socket (benchmarks/_nri_proxy.py), between containerd and the plugin,
reads NRI's frames and the ttrpc messages in them and stamps, for each request of the runtime, the moment its last
byte arrived from containerd and the moment the plugin's whole reply arrived. The same bytes for every plugin, the
same clock, nothing of the plugin's own accounting; what it adds (two Unix socket hops, the proxy's wake-ups) is the
same for all. containerd's log does not time its NRI calls per plugin at its default level, and a debug level would
slow containerd for everyone. The figures are the time containerd waits for the plugin's CreateContainer answer.

What is measured, each figure beside its ratio to the best peer of the same run (lower is better for all):

* CreateContainer reply p50 / p99 with 0, 50 and 250 containers already known (--quick: 0 and 20): the known
  containers are BestEffort and Burstable pods (five containers each; the Burstable ones ask for no CPU or 2m),
  made before the plugin starts (it learns them in its Synchronize). Then, one at a time, a pod whose container is
  created (not started) and the pod removed: a Guaranteed 1-CPU container (exclusive) and a Burstable 100m one
  (shared), alternately, after one untimed warm-up of each. A refused creation is counted apart: its reply is an
  error, not an allocation, and no ratio is taken against it.
* Each plugin's RSS (VmRSS) and CPU time (utime + stime of /proc/PID/stat), idle after its Synchronize at each
  level, and over a storm of pod creations (CPU per creation, the highest RSS seen).
* The plugin SIGKILLed in the middle of that storm: one Guaranteed 1-CPU pod, then shared pods, then the kill; while
  it is gone a Guaranteed pod and more shared pods are made; then it is started again. Every container's cpuset is
  read from cgroupfs every 50 ms: what the pods made during the outage got (their first instruction's
  Cpus_allowed_list, from their log), how long containers ran on the CPU the first Guaranteed container had for
  itself, and when the node settled. kubecpu runs this twice: with its fail-closed OCI hook in containerd's
  base_runtime_spec (operations/runtime_hook.py, as benchmarks/hook.py installs it) and without.
* The plugin restarted (SIGTERM, started again) with those pods running: which running container's cpuset changed.

This machine has 2 CPUs: with CPU 0 reserved, CPU 1 is the only one a container can have for itself, so at most one
Guaranteed 1-CPU container at a time can be exclusive; the guest (tests/guest) has the room this lacks. Figures are
printed, never asserted: the suite runs --quick (77-84 s here) to keep it working. Without the peers in the
cache (scripts/peers.sh), --quick says so and measures kubecpu alone; a full run builds them first.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from _common import percentiles  # also sets up the import path

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.runtime_hook import hook_entry, with_hook

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import lab as lab_module  # noqa: E402

KUBECPU = os.path.join(ROOT, "bin", "kubecpu")
PROXY = os.path.join(ROOT, "benchmarks", "_nri_proxy.py")
PYTHON = "/usr/bin/python3"  # the node's interpreter, as the agent role runs the plugin
PEERS = ("topology-aware", "balloons")
NAMESPACE = "lab"  # an ordinary namespace: the peers give kube-system and their reserved namespaces CPU 0
START_TIMEOUT = 60.0  # seconds a plugin may take from its start to its Synchronize answer
KUBELET_TIMEOUT = 120.0  # seconds a CRI call may take: the kubelet's default runtimeRequestTimeout
CGROUP_ROOT = "/kubecpu-peers"  # the pods' cgroupRoot (PeerLab)
SAMPLE_EVERY = 0.05  # seconds between two readings of every container's cpuset
SETTLE = 1.5  # seconds without a cpuset change after which the node is taken as settled (--quick: 1 s)

CONFIGS = {
    "topology-aware": """apiVersion: config.nri/v1alpha1
kind: TopologyAwarePolicy
metadata:
  name: default
spec:
  pinCPU: true
  pinMemory: false
  preferIsolatedCPUs: false
  preferSharedCPUs: false
  reservedResources:
    cpu: "cpuset:0"
""",
    # the kubelet's shared pool is every CPU no container has for itself, reserved ones included: here the built-in
    # reserved balloon (CPU 0) takes every container that is not Guaranteed and shares the idle CPUs, and each
    # Guaranteed container gets a balloon of its own. (The pod's QoS class, key pod/qosclass, does not resolve in
    # v0.14.0: "non-string type v1.PodQOSClass"; the container's, key qosclass, does.)
    "balloons": """apiVersion: config.nri/v1alpha1
kind: BalloonsPolicy
metadata:
  name: default
spec:
  pinCPU: true
  pinMemory: false
  reservedResources:
    cpu: "cpuset:0"
  balloonTypes:
  - name: guaranteed
    matchExpressions:
    - key: qosclass
      operator: Equals
      values: [Guaranteed]
    preferNewBalloons: true
  - name: reserved
    namespaces: ["*"]
    shareIdleCPUsInSame: system
""",
}


# --- the pieces ------------------------------------------------------------------------------------------------
def _run(argv, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1800, **kwargs)


def containerd_binaries():
    done = _run(["bash", os.path.join(ROOT, "scripts", "runtimes.sh"), "containerd-2.4"])
    return done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else None


def peer_binaries(build):
    """{name: path} of the peers: from the cache, or built first when ``build``; ({}, why) when there are none."""
    if build:
        done = _run(["bash", os.path.join(ROOT, "scripts", "peers.sh")])
        if done.returncode != 0:
            return {}, "scripts/peers.sh failed: " + done.stderr.strip()[-400:]
    lines = _run(["bash", os.path.join(ROOT, "scripts", "peers.sh"), "versions"]).stdout.split("\n")
    found = {}
    for line in lines:
        fields = line.split()
        if len(fields) >= 4 and fields[0] in PEERS and os.access(fields[2], os.X_OK):
            found[fields[0]] = {"path": fields[2], "version": fields[1], "build_seconds": fields[3]}
    if not found:
        return {}, "the peers are not in the cache (bash scripts/peers.sh builds them, about 3-6 minutes)"
    return found, ""


def progress(started, message):
    """Where the run is, on stderr (the figures go to stdout)."""
    print("[%5.1f s] %s" % (time.monotonic() - started, message), file=sys.stderr, flush=True)


def cpus(text):
    return CPUSet.parse(text.strip()) if text.strip() else None


class Proxy:
    """benchmarks/_nri_proxy.py as a process; its records read back."""

    def __init__(self, work, upstream):
        self.socket = os.path.join(work, "proxy.sock")
        self.path = os.path.join(work, "records.jsonl")
        open(self.path, "w", encoding="utf-8").close()
        self.proc = subprocess.Popen([sys.executable, PROXY, self.socket, upstream, self.path],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.socket):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("the NRI proxy did not start")
            time.sleep(0.02)

    def records(self):
        with open(self.path, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.endswith("\n")]

    def close(self):
        self.proc.kill()
        self.proc.wait()


class Plugin:
    """One plugin's process: started, waited for (its Synchronize answered, through the proxy), stopped."""

    def __init__(self, name, argv, work, proxy):
        self.name, self.argv, self.proxy = name, argv, proxy
        self.log_path = os.path.join(work, name + ".log")
        self.proc = None

    def start(self):
        seen = max([r["conn"] for r in self.proxy.records()] or [0])
        log = open(self.log_path, "ab")  # pylint: disable=consider-using-with  # the process keeps it
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                     env=dict(os.environ, KUBECPU_PYTHON=PYTHON))
        log.close()
        started = time.monotonic()
        while not any(r["conn"] > seen and r["method"] == "Synchronize" for r in self.proxy.records()):
            if self.proc.poll() is not None or time.monotonic() - started > START_TIMEOUT:
                with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                    tail = handle.read()[-3000:]
                raise RuntimeError("%s did not synchronize (%s); its log ends:\n%s" % (
                    self.name, "exited %s" % self.proc.returncode if self.proc.poll() is not None else "still running",
                    tail))
            time.sleep(0.02)
        return time.monotonic() - started

    def stop(self, sig=signal.SIGTERM):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def stats(self):
        """(RSS in MiB, CPU seconds) of the running process; None when it is gone. The CPU time is the sum of its
        threads' run time in /proc/PID/task/*/schedstat (nanoseconds; utime and stime count 10 ms ticks, too coarse
        for a second of idling), else utime + stime."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        base = "/proc/%d" % self.proc.pid
        try:
            with open(base + "/status", encoding="ascii") as handle:
                rss = next(int(line.split()[1]) for line in handle if line.startswith("VmRSS:"))
            ran = 0
            for task in os.listdir(base + "/task"):
                with contextlib.suppress(OSError), open("%s/task/%s/schedstat" % (base, task), encoding="ascii") as f:
                    ran += int(f.read().split()[0])
            if not ran:
                with open(base + "/stat", encoding="ascii") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                ran = (int(fields[11]) + int(fields[12])) * 10**9 // os.sysconf("SC_CLK_TCK")
        except (OSError, StopIteration):
            return None
        return rss / 1024.0, ran / 1e9


def kubecpu_argv(socket, state):
    return [KUBECPU, "nri", "--socket", socket, "--state", state, "--reserved-cpus", "0",
            "--kubelet-state", state + ".none", "--metrics-path", state + ".prom"]


def peer_argv(binary, name, work, socket):
    config = os.path.join(work, name + ".yaml")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(CONFIGS[name])
    state = os.path.join(work, name + "-state")
    os.makedirs(state, exist_ok=True)
    return [binary, "-config-file", config, "-nri-socket", socket, "-state-dir", state,
            "-pid-file", os.path.join(work, name + ".pid")]


@contextlib.contextmanager
def shared_mounts(work, names):
    """Each peer's state directory bind-mounted onto itself and made rshared, unmounted at the end."""
    mounted = []
    try:
        for name in names:
            state = os.path.join(work, name + "-state")
            os.makedirs(state, exist_ok=True)
            subprocess.run(["mount", "--bind", state, state], check=True)
            mounted.append(state)
            subprocess.run(["mount", "--make-rshared", state], check=True)
        yield
    finally:
        for state in reversed(mounted):
            subprocess.run(["umount", "-l", state], check=False)


# --- pods ------------------------------------------------------------------------------------------------------
SHARED_KINDS = [("BestEffort", None, None), ("Burstable", None, 32 << 20), ("Burstable", 2, None)]
GUARANTEED = ("Guaranteed", 1000, None)


def make_pod(lab, name, kind, *, start=True, containers=1):
    """A pod of ``kind`` (QoS class, millicores, memory) and its containers; (pod, error): the pod made even when a
    container is refused (error: why)."""
    qos, cpu, memory = kind
    pod = lab.run_pod(name, qos, [], namespace=NAMESPACE)
    spec = {"cpu": cpu, "command": lab_module.FIRST_LINE}
    if memory is not None:
        spec["memory"] = memory
    try:
        for n in range(containers):
            pod["containers"]["c%d" % n] = lab.run_container(pod, dict(spec, name="c%d" % n), start=False)
            if start:
                lab.cri.start_container(pod["containers"]["c%d" % n])
    except Exception as exc:  # pylint: disable=broad-except  # what the runtime said is the result
        return pod, str(exc)
    return pod, None


def grow_backlog(lab, backlog, count):
    """Known containers up to ``count``: pods of five, BestEffort and Burstable in turn, made with no plugin."""
    while sum(len(p["containers"]) for p in backlog) < count:
        pod, error = make_pod(lab, "known-%d" % len(backlog), SHARED_KINDS[len(backlog) % len(SHARED_KINDS)],
                              containers=5)
        if error:
            raise RuntimeError("a known pod was refused with no plugin: " + error)
        backlog.append(pod)


def first_line(pod, name, timeout=3.0):
    """The CPUs the container's first instruction was allowed (its log's first line), "" when none came."""
    path = os.path.join(pod["sandbox"]["log_directory"], name, "0.log")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            with open(path, encoding="utf-8") as handle:
                line = handle.readline()
            if line.endswith("\n"):
                return line.split(" F ", 1)[1].split(":", 1)[1].strip()
        time.sleep(0.05)
    return ""


# --- phase 1: replies ------------------------------------------------------------------------------------------
class PeerLab(lab_module.Lab):
    """The lab's containerd with its pods below a cgroupRoot of their own (CGROUP_ROOT, as a kubelet run with
    ``--cgroup-root``): an allocating OCI hook of another lab on this machine walks /kubepods for the containers on
    the CPU it takes and moves them off (one moved this benchmark's Guaranteed container once); these pods are not
    there. Each plugin reads the QoS class from the path as before (kubecpu below any cgroupRoot, the peers from the
    words "burstable" and "besteffort" in it)."""

    def pod_parent(self, qos, uid):
        return CGROUP_ROOT + super().pod_parent(qos, uid)


def new_lab(binaries, **options):
    """A lab of containerd 2.4.2 with NRI whose CRI calls wait as long as the kubelet's (runtimeRequestTimeout 2m):
    with 250 containers a call waits for the runtime to apply a reply's updates to each."""
    lab = PeerLab(binaries=binaries, nri=True, **options)
    lab.cri_timeout = KUBELET_TIMEOUT
    return lab


def remove_cgroup_root():
    """The QoS and top cgroups the runtime made below CGROUP_ROOT, once their pods are gone (each hierarchy)."""
    unified = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
    roots = ["/sys/fs/cgroup"] if unified else [os.path.join("/sys/fs/cgroup", n) for n in os.listdir("/sys/fs/cgroup")]
    for root in roots:
        for below in ("/kubepods/burstable", "/kubepods/besteffort", "/kubepods", ""):
            with contextlib.suppress(OSError):
                os.rmdir(root + CGROUP_ROOT + below)


def reply_samples(lab, proxy, plugin, count, tag):
    """CreateContainer replies for ``count`` exclusive and ``count`` shared containers, one at a time after a warm-up:
    {kind: [(seconds, reply bytes, refused)], "unanswered": {kind: creations the proxy saw no reply to (the plugin
    was not connected)}, "connections": how many the plugin made meanwhile, "exited": whether it ended}."""
    windows, failures = [], 0
    started = time.monotonic()
    for n in range(count + 1):
        for kind, qos, cpu in (("exclusive", "Guaranteed", 1000), ("shared", "Burstable", 100)):
            try:
                pod = lab.run_pod("%s-%s-%d" % (tag, kind, n), qos, [], namespace=NAMESPACE)
            except Exception:  # pylint: disable=broad-except  # the runtime's own failure, counted
                failures += 1
                continue
            before = time.monotonic()
            refused = False
            try:
                lab.run_container(pod, {"name": "c", "cpu": cpu}, start=False)
            except Exception:  # pylint: disable=broad-except  # a refusal is a result
                refused = True
            after = time.monotonic()
            with contextlib.suppress(Exception):  # removed at the lab's end otherwise
                lab.remove_pod(pod)
            if n:  # the first of each kind warms up
                windows.append((kind, before, after, refused))
    records = [r for r in proxy.records() if r["start"] >= started]
    out = {"exclusive": [], "shared": [], "unanswered": {"exclusive": 0, "shared": 0},
           "connections": len({r["conn"] for r in records}), "exited": plugin.proc.poll() is not None,
           "sandbox_failures": failures}
    for kind, before, after, refused in windows:
        replies = [r for r in records if r["method"] == "CreateContainer" and before <= r["start"] <= after]
        if replies:
            out[kind].append((replies[-1]["end"] - replies[-1]["start"], replies[-1]["reply_bytes"], refused))
        else:
            out["unanswered"][kind] += 1
    return out


# --- phase 2: storm, kill, restart -----------------------------------------------------------------------------
class Watch:
    """Every tracked container's cpuset (cgroupfs) and the plugin's RSS, read every SAMPLE_EVERY seconds."""

    def __init__(self, lab):
        self.lab = lab
        self.paths = {}  # name -> its cpuset file
        self.timeline = []  # (time, {name: cpuset text})
        self.rss = []
        self.plugin = None
        self.stopped = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def track(self, name, cid):
        directory = self.lab.cgroup_dir(cid)
        unified = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
        self.paths[name] = [os.path.join(directory, "cpuset.cpus")] + (
            [os.path.join(directory, "cpuset.cpus.effective")] if unified else [])

    def _read(self, paths):
        for path in paths:
            with contextlib.suppress(OSError):
                with open(path, encoding="ascii") as handle:
                    text = handle.read().strip()
                if text:
                    return text
        return ""

    def _loop(self):
        while not self.stopped:
            now = time.monotonic()
            self.timeline.append((now, {name: self._read(paths) for name, paths in list(self.paths.items())}))
            stats = self.plugin.stats() if self.plugin is not None else None
            if stats is not None:
                self.rss.append((now, stats[0]))
            time.sleep(SAMPLE_EVERY)

    def now(self):
        return dict(self.timeline[-1][1]) if self.timeline else {}

    def stop(self):
        self.stopped = True
        self.thread.join()


def storm_kill_restart(lab, plugin, storm):
    """The storm, the kill in its middle, the outage, the restart; then the graceful restart with pods running.
    ``storm``: {"sizes": (shared pods before the kill, during the outage), "outage": seconds, "settle": seconds}."""
    (before_count, during_count), outage = storm["sizes"], storm["outage"]
    watch = Watch(lab)
    pods, report = [], {"outage_pods": [], "refused_before": 0}
    try:
        plugin.start()
        watch.plugin = plugin
        time.sleep(0.3)
        start_stats = plugin.stats()
        storm_started = time.monotonic()
        owner, error = make_pod(lab, "owner", GUARANTEED)
        pods.append(owner)
        if error:
            report["refused_before"] += 1
        else:
            watch.track("owner", owner["containers"]["c0"])
            report["owner_first"] = first_line(owner, "c0")
        for n in range(before_count):
            pod, error = make_pod(lab, "before-%d" % n, SHARED_KINDS[n % len(SHARED_KINDS)])
            pods.append(pod)
            if error:
                report["refused_before"] += 1
            else:
                watch.track(pod["name"], pod["containers"]["c0"])
        storm_seconds = time.monotonic() - storm_started
        end_stats = plugin.stats()
        if start_stats and end_stats:
            report["storm_cpu_ms_per_pod"] = (end_stats[1] - start_stats[1]) * 1000 / (before_count + 1)
            report["storm_pods_per_s"] = (before_count + 1) / storm_seconds
        report["storm_rss_peak"] = max([rss for t, rss in watch.rss if t >= storm_started] or [0])
        time.sleep(0.3)
        exclusive = watch.now().get("owner", "")
        report["owner_before"] = exclusive
        # the kill, in the middle of the storm
        killed = time.monotonic()
        watch.plugin = None
        plugin.stop(signal.SIGKILL)
        specs = [("outage-guaranteed", GUARANTEED)] + [
            ("outage-%d" % n, SHARED_KINDS[n % len(SHARED_KINDS)]) for n in range(during_count)]
        for name, kind in specs:
            pod, error = make_pod(lab, name, kind)
            pods.append(pod)
            entry = {"name": name, "qos": kind[0], "created": error is None,
                     "error": (error or "")[-160:], "first": first_line(pod, "c0") if error is None else ""}
            if error is None:
                watch.track(name, pod["containers"]["c0"])
            report["outage_pods"].append(entry)
        time.sleep(max(0.0, outage - (time.monotonic() - killed)))
        restarted = time.monotonic()
        report["outage_seconds"] = restarted - killed
        report["restart_to_sync"] = plugin.start()
        watch.plugin = plugin
        settled = _settle(watch, restarted, storm["settle"])
        report["settled_after_restart"] = settled - restarted
        report["after_kill"] = watch.now()
        report["intrusion"] = _intrusion(watch.timeline, exclusive, killed)
        # the graceful restart with the pods running
        time.sleep(0.3)
        running = watch.now()
        plugin.stop(signal.SIGTERM)
        watch.plugin = None
        again = time.monotonic()
        plugin.start()
        watch.plugin = plugin
        _settle(watch, again, storm["settle"])
        now = watch.now()
        report["restart_changed"] = {name: (running[name], now.get(name, "")) for name in running
                                     if running[name] != now.get(name, "")}
        report["restart_running"] = len(running)
        owned = cpus(exclusive) if exclusive else None
        report["restart_sharing_owner"] = sorted(n for n, t in now.items()
                                                 if n != "owner" and owned and t and not cpus(t).isdisjoint(owned))
        for pod in pods:  # removed while the plugin runs: its books end empty
            lab.remove_pod(pod)
        pods = []
    finally:
        watch.stop()
        for pod in pods:
            with contextlib.suppress(Exception):
                lab.remove_pod(pod)
        plugin.stop()
    return report


def _settle(watch, since, settle, limit=20.0):
    """The time of the last cpuset change after ``since``, once none has come for ``settle`` seconds (or ``limit``)."""
    deadline = since + limit
    while time.monotonic() < deadline:
        changes = _changes(watch.timeline, since)
        last = changes[-1] if changes else since
        if time.monotonic() - last >= settle:
            return last
        time.sleep(0.1)
    return deadline


def _changes(timeline, since):
    out, previous = [], None
    for when, sets in timeline:
        if when >= since and previous is not None and any(previous.get(k) != v for k, v in sets.items()
                                                          if k in previous):
            out.append(when)
        previous = sets
    return out


def _intrusion(timeline, exclusive, since):
    """{container: seconds} its cpuset held a CPU of the owner's exclusive set, from ``since`` on (to the end of the
    timeline: the node settled after the restart)."""
    owned = cpus(exclusive) if exclusive else None
    everything = cpus(lab_module_cpus())
    if owned is None or owned == everything:
        return {}
    seconds = collections.Counter()
    for (when, sets), (after, _next) in zip(timeline, timeline[1:]):
        if when < since:
            continue
        for name, text in sets.items():
            if name != "owner" and text and not cpus(text).isdisjoint(owned):
                seconds[name] += after - when
    return dict(seconds)


def lab_module_cpus():
    with open("/sys/devices/system/cpu/online", encoding="ascii") as handle:
        return handle.read()


# --- the run ---------------------------------------------------------------------------------------------------
def run(quick, logs=None):
    problems = lab_module.missing_requirements()
    if problems:
        print("skipped: no real containerd here: " + "; ".join(problems))
        return 0
    binaries = containerd_binaries()
    if binaries is None:
        print("skipped: containerd 2.4.2 could not be built (scripts/runtimes.sh containerd-2.4)")
        return 0
    peers, why = peer_binaries(build=not quick)
    if not peers:
        print("the peers are not measured: %s; kubecpu alone" % why)
    levels = (0, 20) if quick else (0, 50, 250)
    samples = 3 if quick else 30
    idle = 1.0 if quick else 10.0
    sizes = (4, 3) if quick else (20, 10)
    storm = {"sizes": sizes, "outage": 1.5 if quick else 5.0, "settle": 1.0 if quick else SETTLE}
    names = ["kubecpu"] + [name for name in PEERS if name in peers]
    replies = collections.defaultdict(dict)  # name -> level -> {kind: samples}
    resources = collections.defaultdict(dict)  # name -> level -> (rss, cpu share)
    storms = {}
    started = time.monotonic()
    load = [_loadavg()]
    with tempfile.TemporaryDirectory(prefix="kubecpu-peers-") as work, shared_mounts(work, names[1:]):
        with new_lab(binaries) as lab:
            proxy = Proxy(work, lab.nri_socket)
            state = os.path.join(work, "kubecpu-state", "state")
            os.makedirs(os.path.dirname(state))
            plugins = {"kubecpu": Plugin("kubecpu", kubecpu_argv(proxy.socket, state), work, proxy)}
            for name in names[1:]:
                plugins[name] = Plugin(name, peer_argv(peers[name]["path"], name, work, proxy.socket), work, proxy)
            try:
                lab.run_pod("warm", "BestEffort", [])  # the images and runc in the page cache
                backlog = []
                for level in levels:
                    grow_backlog(lab, backlog, level)
                    progress(started, "%d known containers" % level)
                    for name in names:
                        plugin = plugins[name]
                        try:
                            plugin.start()
                        except RuntimeError as exc:
                            plugin.stop()
                            replies[name][level] = {"failed": str(exc).splitlines()[0]}
                            progress(started, "%s: %s" % (name, replies[name][level]["failed"]))
                            continue
                        first = plugin.stats()
                        time.sleep(idle)
                        last = plugin.stats()
                        if first and last:
                            resources[name][level] = (last[0], 100.0 * (last[1] - first[1]) / idle)
                        replies[name][level] = reply_samples(lab, proxy, plugin, samples, "%s-%d" % (name, level))
                        plugin.stop()
                        progress(started, "%s: replies with %d known" % (name, level))
                for pod in backlog:
                    lab.remove_pod(pod)
                for name in names:
                    try:
                        storms[name] = storm_kill_restart(lab, plugins[name], storm)
                    except Exception as exc:  # pylint: disable=broad-except  # said, and the others measured
                        storms[name] = {"failed": "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0])}
                    progress(started, "%s: storm, kill, restart" % name)
            finally:
                for plugin in plugins.values():  # a failure above leaves none running
                    plugin.stop()
                proxy.close()
                shutil.copy(os.path.join(lab.dir, "daemon.log"), os.path.join(work, "containerd.log"))
                if logs:
                    keep(work, logs)
        storms["kubecpu + hook"] = _with_hook(binaries, work, storm, logs)
        progress(started, "kubecpu with its hook: storm, kill, restart")
    remove_cgroup_root()
    load.append(_loadavg())
    print_report({"quick": quick, "peers": peers, "levels": levels, "samples": samples, "sizes": sizes,
                  "names": names, "replies": replies, "resources": resources, "storms": storms,
                  "seconds": time.monotonic() - started, "load": load})
    return 0


def _loadavg():
    """The machine's 1-minute load average (others' work on these 2 CPUs is in every figure)."""
    with open("/proc/loadavg", encoding="ascii") as handle:
        return float(handle.read().split()[0])


def keep(work, logs, prefix=""):
    """The plugins' and containerd's logs, the proxy's records and the peers' configurations copied into ``logs``."""
    os.makedirs(logs, exist_ok=True)
    for name in os.listdir(work):
        if name.endswith((".log", ".jsonl", ".yaml")):
            shutil.copy(os.path.join(work, name), os.path.join(logs, prefix + name))


def _with_hook(binaries, work, storm, logs):
    """The storm, kill and restart of kubecpu on a containerd whose base_runtime_spec holds kubecpu's OCI hook."""
    hooked = os.path.join(work, "hooked")
    os.makedirs(hooked)
    state = os.path.join(hooked, "state")
    spec = json.loads(subprocess.run([os.path.join(binaries, "ctr"), "oci", "spec"], capture_output=True, text=True,
                                     check=True).stdout)
    config = os.path.join(hooked, "agent.json")  # the agent's configuration file, as the agent role writes it
    with open(config, "w", encoding="utf-8") as handle:
        json.dump({"state": state, "reserved_cpus": "0", "kubelet_state": state + ".none"}, handle)
    base = os.path.join(hooked, "base-spec.json")
    with open(base, "w", encoding="utf-8") as handle:
        json.dump(with_hook(spec, hook_entry(PYTHON, KUBECPU, config, 10)), handle)
    with new_lab(binaries, base_spec=base) as lab:
        proxy = Proxy(hooked, lab.nri_socket)
        try:
            plugin = Plugin("kubecpu-hooked", kubecpu_argv(proxy.socket, state), hooked, proxy)
            return storm_kill_restart(lab, plugin, storm)
        finally:
            proxy.close()
            shutil.copy(os.path.join(lab.dir, "daemon.log"), os.path.join(hooked, "containerd.log"))
            if logs:
                keep(hooked, logs, "hooked-")


# --- the report ------------------------------------------------------------------------------------------------
def _reply_row(phase, kind):
    """((p50 ms, p99 ms, reply bytes p50) of one plugin's allocations of ``kind`` in a phase, or None; notes)."""
    if "failed" in phase:
        return None, phase["failed"]
    rows = phase[kind]
    made = [(sec * 1000, size) for sec, size, refused in rows if not refused]
    refused = sorted(sec * 1000 for sec, _size, was in rows if was)
    notes = []
    if refused:
        notes.append("%d refused (reply p50 %.1f ms)" % (len(refused), refused[len(refused) // 2]))
    if phase["unanswered"][kind]:
        notes.append("%d made while it was not connected" % phase["unanswered"][kind])
    if phase["connections"] > 1:
        notes.append("connected %d times" % phase["connections"])
    if phase["exited"]:
        notes.append("exited")
    if phase["sandbox_failures"]:
        notes.append("%d pods the runtime did not make" % phase["sandbox_failures"])
    if not made:
        return None, ", ".join(notes) or "no reply"
    p50, p99 = percentiles([ms for ms, _size in made])
    return (p50, p99, sorted(size for _ms, size in made)[len(made) // 2]), ", ".join(notes)


def _print_replies(levels, samples, names, replies):
    print("\nCreateContainer reply as containerd waits for it (NRI proxy): %d of each kind per plugin after a warm-up; "
          "p50 and p99 of the allocations, refusals apart; ratio to the best peer" % samples)
    print("   %5s  %-9s  %-15s %8s %8s %8s  %-15s %s" % ("known", "kind", "plugin", "p50 ms", "p99 ms", "reply B",
                                                         "ratio p50/p99", "notes"))
    for level in levels:
        for kind in ("exclusive", "shared"):
            rows = {name: _reply_row(replies[name][level], kind) for name in names if level in replies[name]}
            peers = [row for name, (row, _n) in rows.items() if name != "kubecpu" and row]
            best = (min(r[0] for r in peers), min(r[1] for r in peers)) if peers else None
            for name, (row, notes) in rows.items():
                if row is None:
                    print("   %5d  %-9s  %-15s %8s %8s %8s  %-15s %s" % (level, kind, name, "-", "-", "-", "", notes))
                    continue
                ratio = "%s / %s" % (_ratio(row[0], best[0]), _ratio(row[1], best[1])) if best else ""
                print("   %5d  %-9s  %-15s %8.1f %8.1f %8d  %-15s %s" % (level, kind, name, row[0], row[1], row[2],
                                                                         ratio, notes))


def _per_minute(measured):
    """CPU ms per minute from (RSS, % of one CPU); None when not measured."""
    return None if measured is None else measured[1] * 600


def _ratio(value, best):
    return "%.2fx" % (value / best) if best else "-"


def print_report(results):
    quick, peers, levels, samples, sizes = (results[k] for k in ("quick", "peers", "levels", "samples", "sizes"))
    names, replies, resources, storms = (results[k] for k in ("names", "replies", "resources", "storms"))
    seconds = results["seconds"]
    version = _run(["containerd", "--version"], env=dict(os.environ, PATH=containerd_binaries() + ":" +
                                                         os.environ["PATH"])).stdout.split()
    print("kubecpu beside the NRI resource-policy plugins, one at a time on containerd %s (%s run, %.0f s)" % (
        version[2] if len(version) > 2 else "?", "quick" if quick else "full", seconds))
    print("   load average %.1f at the start, %.1f at the end (%d CPUs)" % (
        results["load"][0], results["load"][1], os.cpu_count() or 0))
    print("   python %s for kubecpu; %s" % (
        _run([PYTHON, "-c", "import platform; print(platform.python_version())"]).stdout.strip(),
        "; ".join("%s %s (built in %s s)" % (n, p["version"], p["build_seconds"]) for n, p in sorted(peers.items()))
        or "no peer"))
    _print_replies(levels, samples, names, replies)
    print("\nResources (RSS MiB; CPU: ms per minute idle, ms per pod made in the storm); (ratio to the best peer; "
          "none to a best of 0)")
    print("   %-24s %s" % ("", "".join("%-24s" % name for name in names)))
    rows = []
    for level in levels:
        rows.append(("RSS idle, %d known" % level, {n: resources[n].get(level, (None,))[0] for n in names}))
        rows.append(("CPU idle, %d known" % level, {n: _per_minute(resources[n].get(level)) for n in names}))
    rows.append(("RSS peak in the storm", {n: storms[n].get("storm_rss_peak") for n in names}))
    rows.append(("CPU ms per pod, storm", {n: storms[n].get("storm_cpu_ms_per_pod") for n in names}))
    for label, values in rows:
        peer_values = [v for n, v in values.items() if n != "kubecpu" and v is not None]
        best = min(peer_values) if peer_values else None
        print("   %-24s %s" % (label, "".join("%-24s" % (
            "-" if values[n] is None else "%.2f (%s)" % (values[n], _ratio(values[n], best) if best else "-"))
            for n in names)))
    print("\nThe plugin SIGKILLed in the middle of a storm (1 Guaranteed 1-CPU pod, then %d shared; while it is "
          "gone, 1 Guaranteed and %d shared), started again; then restarted (SIGTERM) with the pods running" % sizes)
    for name, report in storms.items():
        if "failed" in report:
            print("   %s: %s" % (name, report["failed"]))
            continue
        made = report["outage_pods"]
        firsts = collections.Counter(p["first"] or "-" for p in made if p["created"])
        refused = [p["name"] for p in made if not p["created"]]
        guaranteed = next((p for p in made if p["qos"] == "Guaranteed"), {})
        intrusion = report["intrusion"]
        print("   %s:" % name)
        print("      the Guaranteed owner's first CPUs %s, before the kill %s; pods refused before the kill: %d" % (
            report.get("owner_first") or "-", report["owner_before"] or "-", report["refused_before"]))
        print("      made while it was gone (%.1f s): %d created, first CPUs %s; %d refused%s" % (
            report["outage_seconds"], len(made) - len(refused), dict(firsts), len(refused),
            (" (" + refused[0] + ": " + next(p["error"] for p in made if not p["created"]) + ")") if refused else ""))
        print("      the Guaranteed one made meanwhile: %s, first CPUs %s, after the restart %s" % (
            "created" if guaranteed.get("created") else "refused", guaranteed.get("first") or "-",
            report["after_kill"].get("outage-guaranteed", "-")))
        owned = cpus(report["owner_before"]) if report["owner_before"] else None
        still = sorted(n for n, t in report["after_kill"].items()
                       if n != "owner" and owned and t and not cpus(t).isdisjoint(owned))
        moved = {n: t for n, t in intrusion.items() if n not in still}
        print("      on the owner's CPUs after the kill: %d containers; %d moved off them, %.1f s the longest; %d "
              "still on them when settled %s" % (len(intrusion), len(moved), max(moved.values() or [0]),
                                                 len(still), still[:4]))
        print("      restarted: synchronized %.2f s after its start, settled %.2f s after it; the owner on %s" % (
            report["restart_to_sync"], report["settled_after_restart"], report["after_kill"].get("owner", "-")))
        print("      restarted again (SIGTERM, start) with %d containers running: %d cpusets changed %s; then %d "
              "others on the owner's CPUs" % (report["restart_running"], len(report["restart_changed"]),
                                              dict(list(report["restart_changed"].items())[:4]),
                                              len(report["restart_sharing_owner"])))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples, 0 and 20 known containers")
    parser.add_argument("--logs", metavar="DIR", help="keep the plugins' logs and the proxy's records there")
    args = parser.parse_args()
    return run(args.quick, args.logs)


if __name__ == "__main__":
    sys.exit(main())
