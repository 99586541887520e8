"""Every kubelet checkpoint any path writes passes the judge (node/judge.py), over random nodes: random machines
(1-2 sockets, 2 or 4 cores each, 1-2 threads, 1-2 NUMA nodes per socket), configurations (full-pcpus-only,
strict-cpu-reservation, reserved sets, Topology Manager policy and scope), pod sets admitted as the kubelet admits
them (init containers whose CPUs the app containers reuse, sidecars, the pod scope, memory the Memory Manager pinned
and devices the Device Manager allocated on the pods' NUMA nodes), some of which then end (a fragmented node), and
changes (a new reservation, policy options and Topology Manager). The no-drain
rewrite, adoption (none -> static), the rebuild and the defragmentation each either produce a file the restarted
kubelet accepts, or refuse and say the change needs a drain (or which container does not fit, and why).

The counts of random cases per path and outcome are hypothesis events (``--hypothesis-show-statistics``).
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from fractions import Fraction

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import AllocationError, StateError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint import decode, empty_file, encode
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.pod import GUARANTEED, Container, Pod
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.policy import new_policy
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.admission import Admission
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import ManagerOptions
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.manager import NodeManager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.plan import Plan
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.pod_views import build_views, running_pods
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.state_store import StateStore
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.what_if import adopt
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.defrag import Limits, plan_defrag
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.rebuild import rebuild_node
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.rewrite import rewrite_checkpoint
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.cgroups import CgroupFS
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.container_cache import ContainerCache
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.generated import generated
from hypothesis import event, given, settings
from hypothesis import strategies as st

TM_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")


def _policy(topo, reserved, options):
    return new_policy("static", topo, len(reserved), reserved, options or None)


def _options(full, strict):
    return {**({"full-pcpus-only": "true"} if full else {}), **({"strict-cpu-reservation": "true"} if strict else {})}


class Node:
    """A machine, its configuration before and after the change, the pods as admitted before it (in creation order,
    with which init containers are sidecars), their state and the NUMA nodes their memory is pinned to."""

    def __init__(self, topo, old, new, pods, state, pinned):
        self.topo, self.old, self.new, self.pods, self.state = topo, old, new, pods, state
        self.memory, self.devices = pinned

    def policy(self, which):
        reserved, options, _tm, _scope = which
        return _policy(self.topo, reserved, options)

    def admission(self, which):
        return Admission(self.topo, which[2], which[3], {})

    def judge(self, which, pods=None, pinned=True):
        return self.admission(which).judge(self.policy(which), memory=self.memory if pinned else {},
                                           devices=self.devices if pinned else {},
                                           pods=self.pods if pods is None else pods)


def _container(name, cpus, init=False, sidecar=False):
    return Container(name, Fraction(cpus), Fraction(cpus), Fraction(1), Fraction(1),
                     restart_policy="Always" if sidecar else None, init=init)


def _admit(topo, which, pods, pin):
    """The state of a kubelet that admitted ``pods`` in order under ``which`` (pods it refuses do not run), and the
    NUMA nodes the Memory Manager pinned each admitted container's memory to, and the Device Manager's devices are
    on (``pin``: per pod, "memory", "devices" or None)."""
    policy, admission = _policy(topo, which[0], which[1]), Admission(topo, which[2], which[3], {})
    state = CPUState("static")
    policy.start(state)
    admitted, memory, devices = [], {}, {}
    for pod, pinned in zip(pods, pin):
        attempt = state.copy()
        try:
            for item in pod.all_containers():
                affinity = admission.admit(policy, attempt, pod, item.name, None)
                policy.allocate(attempt, pod, item.name, affinity)
        except AllocationError:
            continue
        state = attempt
        admitted.append(pod)
        held = dict(state.entries.get(pod.uid, {}))
        whole = frozenset(topo.loc[c][2] for cpus in held.values() for c in cpus)
        for name, cpus in held.items():
            nodes = whole if which[3] == "pod" else frozenset(topo.loc[c][2] for c in cpus)
            if pinned == "memory":
                memory[(pod.uid, name)] = nodes
            elif pinned == "devices":
                devices[(pod.uid, name)] = {"example.com/nic": nodes}
    return state, admitted, (memory, devices)


@st.composite
def nodes(draw, most_pods=8, sizes=(2, 4)):
    """A Node; ``most_pods`` pods at most; ``sizes``: the machine's cores per socket."""
    sockets, cores = draw(st.integers(1, 2)), draw(st.sampled_from(sizes))
    threads, numa = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    topo = generated(sockets, cores, threads, numa)
    cpus = sorted(topo.all_cpus)
    full = threads == 2 and draw(st.booleans())
    group = threads if full else 1

    def config():
        reserved = CPUSet(draw(st.lists(st.sampled_from(cpus), min_size=1, max_size=4)))
        return (reserved, _options(full, draw(st.booleans())), draw(st.sampled_from(TM_POLICIES)),
                draw(st.sampled_from(["container", "pod"])))

    old = config()
    new = config() if draw(st.booleans()) else (config()[0],) + old[1:]  # a new reservation, or a new everything
    pods, pin = [], []
    for n in range(draw(st.integers(1, most_pods))):
        inits = tuple(_container("init-%d" % i, group * draw(st.integers(1, 2)), True, draw(st.booleans()))
                      for i in range(draw(st.integers(0, 2))))
        apps = tuple(_container("app-%d" % i, group * draw(st.integers(1, 3))) for i in range(draw(st.integers(1, 2))))
        pods.append(Pod("pod-%d" % n, "p%d" % n, "ns", inits, apps, GUARANTEED))
        pin.append(draw(st.sampled_from([None, "memory", "devices"])))
    state, admitted, pinned = _admit(topo, old, pods, pin)
    policy, running = _policy(topo, old[0], old[1]), []
    for pod in admitted:  # some pods end: the node fragments
        if draw(st.booleans()) and len(admitted) > 1:
            for item in pod.all_containers():
                policy.remove_container(state, pod.uid, item.name)
                for kind in pinned:
                    kind.pop((pod.uid, item.name), None)
        else:
            running.append(pod)
    held = sorted(state.assigned())
    if held and draw(st.booleans()):  # the reservation grows into CPUs pods hold
        new = (old[0].union(CPUSet(draw(st.lists(st.sampled_from(held), min_size=1, max_size=2)))),) + new[1:]
    return Node(topo, old, new, running, state, pinned)


def _refused_saying_why(result):
    if result.unfit:
        assert all(u["reason"] for u in result.unfit)
        return "unfit"
    assert "needs a drain" in result.reason or "nothing is rewritten" in result.reason, result.reason
    return "drain"


def _counts_kept(before, data):
    after = decode(data, "static").state
    owners = {}
    for pod, name, cpus in before.assignments():
        now = after.get(pod, name)
        assert now is not None and len(now) == len(cpus)
    for pod, _name, cpus in after.assignments():
        for cpu in cpus:
            assert owners.setdefault(cpu, pod) == pod  # no CPU is given to two pods


@settings(max_examples=600, deadline=None)
@given(nodes())
def test_every_file_the_rewrite_writes_passes_the_judge(node):
    """static -> static (a new reservation, options, Topology Manager): the file written, or a refusal that says
    why."""
    policy, admission = node.policy(node.new), node.admission(node.new)
    result = rewrite_checkpoint(encode(node.state), policy, admission=admission, memory=node.memory, pods=node.pods,
                                devices=node.devices)
    if result.data is None:
        event("rewrite: refused (%s)" % _refused_saying_why(result))
        return
    assert node.judge(node.new).file(result.data) is None
    _counts_kept(node.state, result.data)
    event("rewrite: written, %s" % ("unchanged" if not result.moves else "containers moved"))


def _runtime(tmp, node, exclusive=None):
    """The node's pods in a fake runtime: init containers exited, sidecars and app containers running (each in the
    cgroup cpuset ``exclusive`` gives it, else every CPU)."""
    runtime = FakeRuntime(os.path.join(tmp, "cgroup"), str(node.topo.all_cpus), "0")
    for pod in node.pods:
        for item in pod.all_containers():
            cid = runtime.add(pod.uid, item.name, "Guaranteed", int(item.cpu_request * 1000))
            if item.init and not item.restartable_init:
                runtime.exit(cid)
            elif exclusive is not None:
                cpus = exclusive.get(pod.uid, item.name) or exclusive.default
                runtime.write("cpuset", runtime.infos[cid].cgroup_path, "cpuset.cpus", str(cpus))
    return runtime


def _manager(tmp, node, which, runtime):
    options = ManagerOptions(topology_manager_policy=which[2], topology_manager_scope=which[3])
    store = StateStore(os.path.join(tmp, "kubelet", "cpu_manager_state"), "static", read_only=True)
    return NodeManager(node.topo, node.policy(which), store, runtime, cgroups=CgroupFS(os.path.join(tmp, "cgroup")),
                       cache=ContainerCache(), options=options)


@settings(max_examples=200, deadline=None)
@given(nodes())
def test_every_file_adoption_writes_passes_the_judge(node):
    """none -> static: the running Guaranteed containers adopted as the new configuration admits them (a finished
    init container first), judged with the pods as the runtime shows them."""
    with tempfile.TemporaryDirectory() as tmp:
        runtime = _runtime(tmp, node)
        manager = _manager(tmp, node, node.new, runtime)
        pods = running_pods(build_views(manager.observe(Plan(CPUState("static")))))
        result = rewrite_checkpoint(empty_file("none"), manager.policy, admission=manager.topology_admission,
                                    adopt=functools.partial(adopt, manager), pods=pods)
    if result.data is None:
        event("adoption: refused (%s)" % _refused_saying_why(result))
        return
    assert node.judge(node.new, pods=pods, pinned=False).file(result.data) is None
    adopted = decode(result.data, "static").state
    for pod in pods:  # every container of a running pod was admitted, its init containers included
        assert all(adopted.get(pod.uid, item.name) is not None for item in pod.all_containers())
    event("adoption: written")


@settings(max_examples=150, deadline=None)
@given(nodes())
def test_every_file_the_rebuild_writes_passes_the_judge(node):
    """A lost checkpoint rebuilt from the cgroups of what runs, with the Memory and Device Managers' checkpoints."""
    with tempfile.TemporaryDirectory() as tmp:
        runtime = _runtime(tmp, node, node.state)
        manager = _manager(tmp, node, node.old, runtime)
        entries = {}
        for (pod, name), nodes_ in node.memory.items():
            entries.setdefault(pod, {})[name] = [{"numaAffinity": sorted(nodes_), "type": "memory", "size": 1}]
        os.makedirs(os.path.join(tmp, "kubelet"))
        with open(os.path.join(tmp, "kubelet", "memory_manager_state"), "w", encoding="utf-8") as handle:
            json.dump({"policyName": "Static", "entries": entries}, handle)
        allocated = [{"PodUID": pod, "ContainerName": name, "ResourceName": resource,
                      "DeviceIDs": {str(n): ["dev-%d" % n] for n in sorted(on)}, "AllocResp": ""}
                     for (pod, name), per in node.devices.items() for resource, on in per.items()]
        os.makedirs(os.path.join(tmp, "kubelet", "device-plugins"))
        with open(os.path.join(tmp, "kubelet", "device-plugins", "kubelet_internal_checkpoint"), "w",
                  encoding="utf-8") as handle:
            json.dump({"Data": {"PodDeviceEntries": allocated, "RegisteredDevices": {}}, "Checksum": 0}, handle)
        try:
            plan = rebuild_node(manager)
        except StateError as exc:
            assert "the restarted kubelet would refuse this checkpoint" in str(exc) and "drain" in str(exc)
            event("rebuild: refused (drain)")
            return
        pods = running_pods(build_views(manager.observe(Plan(CPUState("static")))))
    assert node.judge(node.old, pods=pods).verdict(plan.after) is None
    event("rebuild: written")


@settings(max_examples=300, deadline=None)
@given(nodes(most_pods=14, sizes=(4,)))
def test_defragmentation_moves_only_what_the_restarted_kubelet_admits_again(node):
    """A plan's state passes the judge whenever the state it starts from does (the defragmentation's own limits
    already keep a pod whole under the pod scope and a container beside its pinned memory; defrag_config judges
    the kubelet's file on top)."""
    policy, tm, scope = node.policy(node.old), node.old[2], node.old[3]
    judge = node.judge(node.old)
    if judge.verdict(node.state) is not None:
        event("defrag: the kubelet already rejects the node as it is")
        return
    limits = Limits(pods_whole=scope == "pod" and tm in ("single-numa-node", "restricted"), memory=node.memory,
                    devices=node.devices)
    found = plan_defrag(node.topo, policy.options, node.state, policy.reserved, budget=0.05, limits=limits)
    assert judge.verdict(found.state) is None
    event("defrag: %s" % ("moved" if found.moves else "nothing to move"))
