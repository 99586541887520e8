"""Issue 63's first three cases before the real kubelet 1.37.2 (tests/guest/kubelets.py: standalone, containerd 2.1.9,
the systemd cgroup driver): the kubelet role's no-drain planning (``plan_change`` and ``rewrite_for``, as
``cpu_manager_kubelet_config`` with ``state_rewrite`` composes them: the running pods from the runtime, the Memory
Manager's checkpoint beside the kubelet's) and its write gate (``CheckpointFile``, as ``cpu_manager_checkpoint`` with
``action: write`` and ``kubelet_stopped``) on a node where the pods were admitted by the kubelet itself. What the
planning writes, the restarted kubelet keeps: every container the same, its entries the same through two reconcile
periods. The file the planning wrote before the judge, the write gate refuses, and the restarted kubelet, given it
anyway, rejects the pod in the words the judge gave.

1. Topology Manager single-numa-node, scope pod: a pod of two containers on NUMA node 0, which is full, and the
   reservation grows into one of them. The planning moves the whole pod to NUMA node 1; moving the one container
   splits the pod, which the kubelet rejects ("Resources cannot be allocated with Topology locality").
2. The Memory Manager (Static) pinned a pod's memory to NUMA node 0, which is full, and the reservation grows into the
   pod's CPU. The planning writes nothing and says that the change needs a drain; the pod's CPU moved to NUMA node 1
   is rejected by the kubelet in the same words.
3. none -> static (adoption): a pod's init container of 2 CPUs finished, its app container of 2 CPUs runs, another
   pod takes the rest. The adopted file holds the init container's entry, the app container's CPUs inside it;
   without it the kubelet allocates the init container's CPUs afresh from none ("Allocate failed due to not enough
   cpus available to satisfy request").

Machine: CPUs 2n and 2n+1 are one core; NUMA node 0 = CPUs 0-3, node 1 = CPUs 4-7."""

from __future__ import annotations

import json
import os

import pytest
from conftest import NUMA, ROOT, cpus, lab_module, local_copy, shared_build
from kubelet_files import BASE, RELEASES, guaranteed_pod
from kubelets import RECONCILE, START_TIMEOUT, Kubelet, remove_static_pods, wait_on, watched_through_two_reconcile_periods

from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import StateError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.checkpoint_formats import write
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.discovery import discover_sysfs
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.kubelet_versions import kubelet_version
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.memory_state import beside
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import NodeConfig
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.checkpoint_file import CheckpointFile
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.kubelet_config import (
    Desired, adopter, plan_change, rewrite_for)

MINOR = "1.37"
LOCALITY = "Resources cannot be allocated with Topology locality"
NOT_ENOUGH = "Allocate failed due to not enough cpus available to satisfy request"
STATIC = {"policy": "static", "reconcile_period": "%ds" % RECONCILE}
SINGLE_NUMA_POD = dict(STATIC, topology_manager_policy="single-numa-node", topology_manager_scope="pod")
# The Memory Manager's Static policy: its reservation equals the node's reserved memory and hard eviction threshold
MEMORY_MANAGER = {"memoryManagerPolicy": "Static", "systemReserved": {"memory": "100Mi"},
                  "reservedMemory": [{"numaNode": 0, "limits": {"memory": "101Mi"}}]}
assert BASE["evictionHard"] == {"memory.available": "1Mi"}  # 100Mi + 1Mi: MEMORY_MANAGER's reservedMemory


class Node:
    """A case's kubelet 1.37.2 in ``directory``, first on the configuration the kubelet role plans for ``desired``
    over ``BASE`` and ``extra`` (the node's own settings)."""

    def __init__(self, binary, lab, directory, desired, extra=None):
        self.binary, self.lab, self.dir = binary, lab, str(directory)
        self.config = self.planned(dict(BASE, **(extra or {})), desired, None).config
        self.kubelet = self.made(self.config)
        self.checkpoint = self.kubelet.checkpoint

    def made(self, config):
        return Kubelet(self.binary, self.dir, dict(config, containerRuntimeEndpoint=self.lab.endpoint))

    def planned(self, config, desired, state):
        return plan_change(config, desired, discover_sysfs("/"), RELEASES[MINOR], state=state,
                           state_path=os.path.join(self.dir, "root", "cpu_manager_state"))

    def start(self, config=None):
        """Started (on ``config``, the kubelet's configuration from then on) and healthy."""
        if config is not None:
            self.config, self.kubelet = config, self.made(config)
        self.kubelet.start()
        self.kubelet.up(MINOR)

    def admit(self, *pods):
        """Each pod into the manifest directory once the one before runs (the kubelet admits them in that order);
        (pod UID, container) -> ID of every running container."""
        for order, pod in enumerate(pods):
            self.kubelet.add_pod(pod, order)
            names = {c["name"] for c in pod["spec"]["containers"]}
            uid = pod["metadata"]["uid"]
            wait_on(lambda uid=uid, names=names: self.kubelet.proc.poll() is not None or names <= {
                name for (pod_uid, name) in self.running() if pod_uid == uid},
                START_TIMEOUT, "kubelet %s running %s" % (MINOR, pod["metadata"]["name"]))
            assert self.kubelet.proc.poll() is None, self.kubelet.log()
        return self.running()

    def running(self):
        return {(c.pod_uid, c.name): c.id for c in self.lab.cri.list_containers() if c.state == "CONTAINER_RUNNING"}

    def stopped(self):
        """The kubelet stopped; its checkpoint as it left it."""
        self.kubelet.stop()
        with open(self.checkpoint, "rb") as handle:
            return handle.read()

    def rewritten(self, desired):
        """The kubelet role's no-drain planning of ``desired`` on this file and these pods: (its change, the
        node's settings the write gate takes, its rewrite)."""
        data = self.stopped()
        change, topo = self.planned(self.config, desired, data), discover_sysfs("/")
        settings = dict(change.settings(), state_path=self.checkpoint, runtime="cri", runtime_endpoint=self.lab.endpoint,
                        runtime_timeout=30)
        adopt = adopter(NodeConfig.from_mapping(settings, read_only=True), topo)
        return change, settings, rewrite_for(change, topo, data, adopt, state_path=self.checkpoint)

    def keeps(self, config, data, running):
        """The kubelet started on ``config`` over the file ``data`` (written by the gate) keeps every container:
        the same ones, its entries the file's through two reconcile periods."""
        self.start(config)
        watched_through_two_reconcile_periods(self.kubelet, json.loads(data))
        assert self.running() == running

    def rejects(self, data, uid, config=None):
        """The kubelet stopped, ``data`` written in place of its checkpoint, started again (on ``config``): its
        rejection of pod ``uid`` (the pod's status reason and message)."""
        self.kubelet.stop()
        with open(self.checkpoint, "wb") as handle:
            handle.write(data)
        self.start(config)
        status = self.kubelet.rejected(uid, MINOR)
        return "%s: %s" % (status.get("reason"), status.get("message"))

    def close(self):
        self.kubelet.stop()
        remove_static_pods(self.lab)


def gate(settings, data):
    """The role's write (``cpu_manager_checkpoint``, ``action: write``, ``kubelet_stopped``): its result."""
    return CheckpointFile(NodeConfig.from_mapping(settings), kubelet_stopped=True).run("write", content=data.decode())


def file_of(entries, default):
    """Kubelet 1.37.2's file (V4) for {pod UID: {container: CPU list}} and the shared pool ``default``."""
    state = CPUState("static", CPUSet.parse(default))
    for pod, containers in entries.items():
        for name, text in containers.items():
            state.set(pod, name, CPUSet.parse(text))
    return write(state, kubelet_version(RELEASES[MINOR]))


def numa(text):
    return {NUMA[cpu] for cpu in cpus(text)}


def shared(entries):
    """The shared pool beside ``entries``: every CPU they do not hold."""
    return str(CPUSet(set(range(8)) - set().union(*(cpus(c) for pod in entries.values() for c in pod.values()))))


@pytest.fixture(scope="module")
def kubelet_137():
    """Kubelet 1.37.2 on the guest's disk (conftest's ``kubelet_binary``, for this one version)."""
    return local_copy(shared_build(os.path.join(ROOT, ".cache", "kubelet", "kubelet-%s" % MINOR)))


def test_case_1_pod_scope_a_pod_moves_whole_and_one_container_moved_alone_is_rejected(kubelet_137, lab21, tmp_path):
    node = Node(kubelet_137, lab21, tmp_path, Desired(reserved_cpus=CPUSet.parse("0"), **SINGLE_NUMA_POD))
    try:
        node.start()
        running = node.admit(guaranteed_pod("split", lab_module.BUSYBOX_IMAGE, (("a", 1), ("b", 1))),
                             guaranteed_pod("fill", lab_module.BUSYBOX_IMAGE, (("f", 1),)))
        before = json.loads(node.stopped())["entries"]
        held = before["split-uid"]
        assert numa(held["a"]) == numa(held["b"]) == numa(before["fill-uid"]["f"]) == {0}, before  # NUMA 0 is full:
        assert shared(before) == "0,4-7", before  # CPU 0 reserved, 1-3 held
        grown = Desired(reserved_cpus=CPUSet.parse("0").union(CPUSet.parse(held["a"])), **SINGLE_NUMA_POD)
        change, settings, rewrite = node.rewritten(grown)
        after = json.loads(rewrite.data)["entries"]
        assert numa(after["split-uid"]["a"]) == numa(after["split-uid"]["b"]) == {1}, after
        assert after["fill-uid"] == before["fill-uid"] and {m.container for m in rewrite.moves} == {"a", "b"}
        assert gate(settings, rewrite.data)["changed"]
        node.keeps(change.config, rewrite.data, running)
        print("case 1: before %s; the role's file %s; kubelet %s keeps every container" % (
            before, after, RELEASES[MINOR]))

        alone = dict(after, **{"split-uid": {"a": after["split-uid"]["a"], "b": held["b"]}})
        naive = file_of(alone, shared(alone))  # the container on the reserved CPUs moved alone, to NUMA 1
        with pytest.raises(StateError) as refused:
            gate(settings, naive)
        said = node.rejects(naive, "split-uid")
        assert LOCALITY in str(refused.value) and LOCALITY in said, (str(refused.value), said)
        print("case 1: moved alone %s: the gate says %s; kubelet %s: %s" % (alone, refused.value, RELEASES[MINOR],
                                                                            said))
    finally:
        node.close()


def test_case_2_memory_pinned_on_a_full_numa_node_needs_a_drain_and_the_moved_cpu_is_rejected(
        kubelet_137, lab21, tmp_path):
    node = Node(kubelet_137, lab21, tmp_path, Desired(reserved_cpus=CPUSet.parse("0"), **SINGLE_NUMA_POD),
                extra=MEMORY_MANAGER)
    try:
        node.start()
        node.admit(guaranteed_pod("pinned", lab_module.BUSYBOX_IMAGE, (("app", 1),)),
                   guaranteed_pod("fill", lab_module.BUSYBOX_IMAGE, (("f", 2),)))
        before = json.loads(node.stopped())["entries"]
        with open(beside(node.checkpoint), encoding="utf-8") as handle:
            memory = json.load(handle)
        assert shared(before) == "0,4-7" and numa(before["pinned-uid"]["app"]) == {0}, before
        grown = Desired(reserved_cpus=CPUSet.parse("0").union(CPUSet.parse(before["pinned-uid"]["app"])), **SINGLE_NUMA_POD)
        change, settings, rewrite = node.rewritten(grown)
        assert rewrite.data is None and "nothing is rewritten" in rewrite.reason, rewrite
        assert [u["container"] for u in rewrite.unfit] == ["app"] and LOCALITY in rewrite.unfit[0]["reason"]
        print("case 2: before %s, memory %s; the role writes nothing: %s (%s)" % (
            before, memory, rewrite.reason, rewrite.unfit))

        moved = dict(before, **{"pinned-uid": {"app": "4"}})
        naive = file_of(moved, shared(moved))  # its CPU moved to NUMA 1, its memory left on NUMA 0
        with pytest.raises(StateError) as refused:
            gate(settings, naive)
        said = node.rejects(naive, "pinned-uid", change.config)
        assert "its memory pinned to NUMA node(s) [0]" in str(refused.value) and LOCALITY in said, (
            str(refused.value), said)
        print("case 2: moved %s: the gate says %s; kubelet %s: %s" % (moved, refused.value, RELEASES[MINOR], said))
    finally:
        node.close()


def test_case_3_adoption_keeps_a_finished_init_container_and_without_it_the_pod_is_rejected(
        kubelet_137, lab21, tmp_path):
    node = Node(kubelet_137, lab21, tmp_path, Desired(policy="none", reconcile_period="%ds" % RECONCILE))
    try:
        node.start()
        running = node.admit(guaranteed_pod("reuse", lab_module.BUSYBOX_IMAGE, (("app", 2),), init=(("init", 2),)),
                             guaranteed_pod("rest", lab_module.BUSYBOX_IMAGE, (("big", 5),)))
        change, settings, rewrite = node.rewritten(Desired(reserved_cpus=CPUSet.parse("0"), **STATIC))
        after = json.loads(rewrite.data)["entries"]
        assert after["reuse-uid"]["init"] == after["reuse-uid"]["app"] and len(cpus(after["reuse-uid"]["app"])) == 2
        assert len(cpus(after["rest-uid"]["big"])) == 5, after
        assert gate(settings, rewrite.data)["changed"]
        node.keeps(change.config, rewrite.data, running)
        print("case 3: policy none; the role's adopted file %s; kubelet %s keeps every container" % (
            after, RELEASES[MINOR]))

        dropped = dict(after, **{"reuse-uid": {"app": after["reuse-uid"]["app"]}})
        naive = file_of(dropped, shared(dropped))  # adoption's file before: the running containers only
        with pytest.raises(StateError) as refused:
            gate(settings, naive)
        said = node.rejects(naive, "reuse-uid")
        assert NOT_ENOUGH in str(refused.value) and NOT_ENOUGH in said, (str(refused.value), said)
        print("case 3: without the init entry %s: the gate says %s; kubelet %s: %s" % (
            dropped, refused.value, RELEASES[MINOR], said))
    finally:
        node.close()
