"""A tenant gets what the scheduler charged it, and no more (issue 62; docs/SECURITY.md, "A tenant who can only create
pods"). Random pods, with any names, annotations and resources, init containers and sidecars, are created container
by container and deleted in random order, interleaved, through each mode in which kubecpu is the node's CPU manager:

* ``hook``: the OCI hook places each container at its creation (fail closed), the agent's passes in between;
* ``agent``: the agent's passes alone (``NodeManager.reconcile`` over the runtime's list);
* ``nri``: the NRI plugin's passes, scoped to the pod that changed, over what NRI told (``NRIView``).

At every step:

1. no pod holds more exclusive CPUs than the kubelet's accounting charges it: for a Guaranteed pod the effective
   request (the largest of each init container's request plus the sidecars started before it, and the sum of the app
   containers' and sidecars'), for a Burstable pod the same over the containers its ``cpu-exclusive.kubecpu.io``
   names with a whole request (``exclusive_burstable`` is on in every mode; node/exclusive.py), for any other pod
   none; no CPU is held by two pods, none is both exclusive and shared;
2. no container's creation waits on another pod's runtime calls: every runtime call, of every mode, is made while
   the state lock is free (the hook waits for the lock with a hard bound, so its wait is bounded by computation).

The runtime is the fake in memory (``support/fake_runtime.py``) on a fake cgroupfs and sysfs (1 socket x 4 cores x 2
threads, CPU 0 reserved): the edges a unit test cannot run. Everything between them is the code that runs on nodes.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tempfile
from fractions import Fraction
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import HookRefusal, PodSpecError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import ManagerOptions
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.exclusive import parse_names
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.factory import build_manager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.model import (
    EXITED, RUNNING, ContainerInfo, ListedContainer, kubecpu_annotations)
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.services.hook import Hook
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.services.nri_plugin import NRIView

from ansible_collections.kubecpu.cpu_manager.tests.unit.support.cri_units import milli_to_quota, milli_to_shares
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.lock_probe import LockProbe, Probed, ProbedRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.hook_node import POD, Node

MODES = ("hook", "agent", "nri")
QOS = ("Guaranteed", "Guaranteed", "Guaranteed", "Burstable", "BestEffort")  # drawn three times in five
TOTALS = {}  # mode -> counts over the examples this process ran (``KUBECPU_TENANT_COUNTS=1`` prints them)


class ProbedView(Probed, NRIView):
    """What NRI told, each call of the manager on it probed."""

    def __init__(self, probe):
        super().__init__()
        self.probe = probe

    def update_many(self, container_ids, cpuset_cpus):  # the NRI view takes many (the fake runtime does not)
        self.probe.check("update")
        return super().update_many(container_ids, cpuset_cpus)


# --- the pods a tenant may send ------------------------------------------------------------------------------------
NAMES = st.one_of(st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True),  # a Kubernetes name
                  st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00/"), min_size=1,
                          max_size=24))
EXCLUSIVE = "cpu-exclusive.kubecpu.io"
MILLI = st.sampled_from([250, 500, 1000, 1000, 1000, 1500, 2000, 2000, 2000, 3000, 3000, 4000])
ANNOTATIONS = st.dictionaries(
    st.sampled_from(["irq-load-balancing.kubecpu.io", "irq-load-balancing.crio.io", "cpu-burst.kubecpu.io",
                     "cpu-quota.crio.io", "io.kubernetes.cri.sandbox-uid", "x", EXCLUSIVE]),
    st.text(max_size=300), max_size=4)


@st.composite
def pods(draw):
    qos = draw(st.sampled_from(QOS))
    names = draw(st.lists(NAMES, min_size=2, max_size=5, unique=True))
    kinds = draw(st.lists(st.sampled_from(["init", "init", "sidecar", "app", "app"]), min_size=len(names),
                          max_size=len(names)))
    if "app" not in kinds:
        kinds[-1] = "app"
    order = {"init": 0, "sidecar": 0, "app": 1}  # the kubelet starts init containers and sidecars in spec order first
    containers = []
    for name, kind in sorted(zip(names, kinds), key=lambda pair: order[pair[1]]):
        milli = 0 if qos == "BestEffort" else draw(MILLI) or (1000 if qos == "Guaranteed" else 0)
        containers.append((name, kind, milli))
    notes = draw(ANNOTATIONS)
    if draw(st.booleans()):  # containers it names: its own (any of them), one it lacks, a name that is none
        names_ok = [n for n in names if re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", n)] or names
        named = draw(st.lists(st.sampled_from(names_ok), max_size=len(names), unique=True))
        notes[EXCLUSIVE] = ",".join(named + draw(st.sampled_from([[], [], ["nosuch"], ["Bad_Name"]])))
    return {"qos": qos, "containers": containers, "annotations": notes}


def named(pod):
    """The containers a Burstable pod's annotation names (none when it cannot be read)."""
    try:
        return parse_names(pod["annotations"][EXCLUSIVE])
    except (KeyError, PodSpecError):
        return frozenset()


def charged(pod):
    """The pod's effective CPU request as the scheduler charges it (sidecars counted as KEP-753 does), over the
    containers that may hold exclusive CPUs: a Guaranteed pod's, and the containers with a whole request that a
    Burstable pod's ``cpu-exclusive.kubecpu.io`` names."""
    if pod["qos"] not in ("Guaranteed", "Burstable"):
        return Fraction(0)
    pinned = named(pod) if pod["qos"] == "Burstable" else None
    sidecars, peak = Fraction(0), Fraction(0)
    for name, kind, milli in pod["containers"]:
        request = Fraction(milli, 1000)
        if pinned is not None and (name not in pinned or milli % 1000):
            request = Fraction(0)
        if kind == "init":
            peak = max(peak, request + sidecars)
        elif kind == "sidecar":
            sidecars += request
            peak = max(peak, sidecars)
    apps = sum(Fraction(milli, 1000) for name, kind, milli in pod["containers"]
               if kind == "app" and (pinned is None or (name in pinned and not milli % 1000)))
    return max(peak, apps + sidecars)


STEPS = st.lists(st.tuples(st.sampled_from(["next", "next", "next", "next", "delete", "pass"]), st.integers(0, 7)),
                 min_size=8, max_size=60)


class Cluster:
    """One node in one mode: pods started container by container (an init container runs and exits 0 before the next
    container starts, a sidecar and an app container keep running), deleted, and the agent's passes."""

    def __init__(self, mode, tmp):
        self.mode = mode
        self.node = Node(tmp, False)
        self.probe = LockProbe(self.node.state)
        self.runtime = ProbedRuntime(self.probe, str(self.node.cgroup))
        config = self.node.config(options=ManagerOptions(exclusive_burstable=True))
        self.view = ProbedView(self.probe) if mode == "nri" else None
        self.manager = build_manager(config, with_runtime=True, runtime=self.view or self.runtime)
        self.hook = Hook(config, lock_timeout=0.3, runtime=lambda: self.runtime)
        self.pods = {}  # uid -> {"spec", "next", "ids"}
        self.refused = 0
        self.started = 0
        self.burstable_pinned = set()  # the Burstable pods that held exclusive CPUs at some step
        self.clock = 10_000

    def start(self, spec):
        self.started += 1
        uid = POD % (0x10000 + self.started)
        self.pods[uid] = {"spec": spec, "next": 0, "ids": []}
        self.runtime.pod_notes["sb-" + uid] = spec["annotations"]  # its sandbox, before its first container

    def step(self, uid):
        """The pod's next container: created, placed, running; an init container then exits 0."""
        pod = self.pods[uid]
        if pod["next"] >= len(pod["spec"]["containers"]) or pod.get("stuck"):
            return
        name, kind, milli = pod["spec"]["containers"][pod["next"]]
        qos = pod["spec"]["qos"]
        if self.mode == "hook":
            made = self.node.container(qos, milli or 1, uid=uid, name=name)
            try:
                self.hook.run(io.BytesIO(made["stdin"]))
            except HookRefusal:
                self.refused += 1
                pod["stuck"] = True  # the kubelet would retry; this pod waits for its deletion
                return
            cid = self.runtime.add(uid, name, qos, milli, cid=made["id"], cgroup_path=made["path"],
                                   annotations=pod["spec"]["annotations"])
        elif self.mode == "agent":
            cid = self.runtime.add(uid, name, qos, milli, annotations=pod["spec"]["annotations"])
        else:
            cid = self._nri_create(uid, name, qos, milli)
        pod["ids"].append(cid)
        pod["next"] += 1
        if self.mode == "agent":
            self.manager.reconcile()
        if kind == "init":
            self.exit(uid, cid)

    def exit(self, uid, cid):
        if self.mode == "nri":
            listed, info = self.view.known[cid]
            self.clock += 10
            self.view.known[cid] = (listed._replace(state=EXITED), info._replace(exit_code=0, finished_at=self.clock))
            self.manager.reconcile(scope={uid})
        else:
            self.runtime.exit(cid)

    def delete(self, uid):
        del self.pods[uid]
        if self.mode == "nri":
            for cid in [cid for cid, (listed, _info) in self.view.known.items() if listed.pod_uid == uid]:
                del self.view.known[cid]
            self.manager.reconcile(scope={uid})
        else:
            for cid in [cid for cid, listed in self.runtime.listed.items() if listed.pod_uid == uid]:
                shutil.rmtree(self.node.directory(self.runtime.infos[cid].cgroup_path), ignore_errors=True)  # runc's
            self.runtime.remove_pod(uid)
            self.manager.reconcile()

    def agent_pass(self):
        self.manager.reconcile(scope=None)

    def _nri_create(self, uid, name, qos, milli):
        """As ``NRIPlugin._on_create_container``: the container told, then a pass scoped to its pod."""
        self.clock += 10
        cid = "%064x" % (0x10_0000 + self.clock)
        limit = milli if qos == "Guaranteed" else 0
        parent = {"Guaranteed": "/kubepods/pod%s", "Burstable": "/kubepods/burstable/pod%s",
                  "BestEffort": "/kubepods/besteffort/pod%s"}[qos] % uid
        listed = ListedContainer(cid, "sb-" + uid, uid, "pod", "ns", name, 0, RUNNING, self.clock)
        info = ContainerInfo(cid, uid, "pod", "ns", name, 0, qos, parent + "/" + cid, milli_to_shares(milli),
                             milli_to_quota(limit) or -1, 100000, 0,
                             annotations=kubecpu_annotations(self.pods[uid]["spec"]["annotations"]))
        self.view.known[cid] = (listed, info)
        self.manager.reconcile(scope={uid})
        return cid

    def check(self):
        """The two properties, now."""
        state = StateStore(self.node.state, read_only=True).load()
        assert self.probe.held_at == [], "runtime calls under the state lock: %s" % self.probe.held_at
        if state is None:
            return
        held = {}
        for uid, _name, cpus in state.assignments():
            held[uid] = held.get(uid, CPUSet()).union(cpus)
        for uid, cpus in held.items():
            spec = self.pods[uid]["spec"] if uid in self.pods else None
            assert spec is not None, "pod %s is gone but holds %s" % (uid, cpus)
            assert len(cpus) <= charged(spec), "pod %s holds %s, charged %s: %s" % (uid, cpus, charged(spec), spec)
            if spec["qos"] == "Burstable":
                self.burstable_pinned.add(uid)
        pods = list(held.items())
        for index, (uid, cpus) in enumerate(pods):
            assert not cpus.intersection(state.default), (uid, cpus, state.default)
            for other, theirs in pods[index + 1:]:
                assert not cpus.intersection(theirs), (uid, other, cpus, theirs)


def run_steps(mode, specs, steps):
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(mode, Path(tmp))
        queue = list(specs)
        for action, pick in steps:
            if action == "next":
                if queue and (not cluster.pods or pick % 3 == 0):
                    cluster.start(queue.pop(0))
                if cluster.pods:
                    uids = sorted(cluster.pods)
                    cluster.step(uids[pick % len(uids)])
            elif action == "delete" and cluster.pods:
                uids = sorted(cluster.pods)
                cluster.delete(uids[pick % len(uids)])
            elif action == "pass" and mode != "nri":
                cluster.agent_pass()
            cluster.check()
        totals = TOTALS.setdefault(mode, {"examples": 0, "steps": 0, "runtime_calls": 0, "refused": 0,
                                          "burstable_pinned": 0})
        totals["burstable_pinned"] += len(cluster.burstable_pinned)
        totals["examples"] += 1
        totals["steps"] += len(steps)
        totals["runtime_calls"] += cluster.probe.calls
        totals["refused"] += cluster.refused
        if os.environ.get("KUBECPU_TENANT_COUNTS"):
            print("tenant property: %s" % TOTALS)


@settings(max_examples=90, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mode=st.sampled_from(MODES), specs=st.lists(pods(), min_size=1, max_size=6), steps=STEPS)
def test_no_pod_holds_more_than_it_is_charged_and_no_creation_waits_on_a_runtime_call(mode, specs, steps):
    run_steps(mode, specs, steps)


def created_in_each_mode(spec, tmp_path):
    """The pod ``spec`` created alone in each mode, container after container, the invariants checked after each:
    (the mode, its cluster, the pod's UID, the state then) for each."""
    for mode in MODES:
        cluster = Cluster(mode, tmp_path / mode)
        cluster.start(spec)
        (uid,) = list(cluster.pods)  # the one pod it started
        for _container in spec["containers"]:
            cluster.step(uid)
            cluster.check()
        yield mode, cluster, uid, StateStore(cluster.node.state, read_only=True).load()


def test_the_reviews_pod_of_init_3_init_3_app_1_holds_3_cpus_in_every_mode(tmp_path):
    """The reproduction of issue 62's finding 1, in each mode: charged 3, it holds 3 (not CPUs 1-7)."""
    spec = {"qos": "Guaranteed", "annotations": {},
            "containers": [("init-1", "init", 3000), ("init-2", "init", 3000), ("app", "app", 1000)]}
    for mode, cluster, uid, state in created_in_each_mode(spec, tmp_path):
        held = CPUSet().union(*(cpus for pod, _name, cpus in state.assignments() if pod == uid))
        assert len(held) == 3, (mode, held)
        other = {"qos": "Guaranteed", "annotations": {}, "containers": [("db", "app", 1000)]}
        cluster.start(other)
        second = next(u for u in cluster.pods if u != uid)
        cluster.step(second)
        cluster.check()
        assert cluster.refused == 0 and StateStore(cluster.node.state, read_only=True).load().get(second, "db")


def test_a_burstable_pods_named_containers_hold_what_they_are_charged_in_every_mode(tmp_path):
    """A Burstable pod whose ``cpu-exclusive.kubecpu.io`` names its init container (2 CPUs) and its app container (1
    CPU), beside a helper without a whole request: charged 2 for its pinned containers, it holds 2 in each mode (the
    app container reuses its init container's), and the helper holds none."""
    spec = {"qos": "Burstable", "annotations": {EXCLUSIVE: "setup,app"},
            "containers": [("setup", "init", 2000), ("app", "app", 1000), ("helper", "app", 500)]}
    assert charged(spec) == 2
    for mode, cluster, uid, state in created_in_each_mode(spec, tmp_path):
        held = {name: cpus for pod, name, cpus in state.assignments() if pod == uid}
        assert set(held) == {"setup", "app"} and len(CPUSet().union(*held.values())) == 2, (mode, held)
        assert held["app"].issubset(held["setup"]) and cluster.refused == 0, mode
