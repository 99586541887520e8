"""The system partition (issue 66, feature 3; node/partition.py), through the agent's passes, the fail-closed OCI hook
and the NRI plugin: the system pods' shared containers on the reserved CPUs only, every other container off them,
with pods created, resized, defragmented and removed; a reserved set too small is a warning with the figures, never a
move back; the report shows the partition as its own kind of CPU; switched off, every shared container gets the whole
pool again; beside a kubelet that pins CPUs it is refused.

The runtime is the fake in memory on a fake cgroupfs and sysfs (1 socket x 4 cores x 2 threads: core g = {g, g + 4};
reserved CPUs 0 and 4, a whole core).
"""

from __future__ import annotations

import io
import os

import pytest
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import KubeletPinsError
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.cpuset import CPUSet
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.kubelet.state import CPUState
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.config import ManagerOptions
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.factory import build_manager
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.defrag import defrag_node
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.operations.info import node_info
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.runtime.nri_api import PLUGIN_SERVICE, schema
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.services.hook import Hook
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.services.hook_check import quick_check
from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.services.nri_plugin import NRIPlugin, NRIView

from ansible_collections.kubecpu.cpu_manager.tests.unit.support.fake_runtime import FakeRuntime
from ansible_collections.kubecpu.cpu_manager.tests.unit.support.hook_node import POD, Node

PRIORITY = "priority-class.kubecpu.io"
ON = ManagerOptions(system_partition=True, system_namespaces=["kube-system"])
RESERVED = CPUSet.parse("0,4")
PB = schema()


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path, False)  # cgroup v1: where the fake runtime writes too


def agent(node, runtime, options=ON):
    return build_manager(node.config(options=options, reserved_cpus=RESERVED), with_runtime=True, runtime=runtime)


def test_the_agent_keeps_system_pods_on_the_reserved_cpus_and_everything_else_off_them(node):
    runtime = FakeRuntime(str(node.cgroup))
    cni = runtime.add(POD % 1, "cni", "Burstable", 100, namespace="kube-system")
    exporter = runtime.add(POD % 2, "exporter", "BestEffort", annotations={PRIORITY: "system-node-critical"})
    web = runtime.add(POD % 3, "web", "Burstable", 500, annotations={PRIORITY: "high"})
    manager = agent(node, runtime)
    plan = manager.reconcile()
    assert (runtime.read(cni), runtime.read(exporter), runtime.read(web)) == ("0,4", "0,4", "1-3,5-7")
    assert {a.container: a.reason for a in plan.actions if a.action == "update"} == {
        "cni": "system partition: the reserved CPUs 0,4", "exporter": "system partition: the reserved CPUs 0,4",
        "web": "shared pool is now 1-3,5-7 (was 0-7)"}
    assert plan.counts["system_partition_containers"] == 2 and plan.errors == []
    db = runtime.add(POD % 4, "db", "Guaranteed", 2000, namespace="kube-system")  # exclusive: its own CPUs
    manager.reconcile()
    assert (runtime.read(db), runtime.read(cni), runtime.read(web)) == ("1,5", "0,4", "2-3,6-7")
    runtime.remove_pod(POD % 4)
    manager.reconcile()
    assert (runtime.read(cni), runtime.read(web)) == ("0,4", "1-3,5-7")
    assert agent(node, runtime).reconcile().actions == []  # settled: nothing to do


def test_a_defragmentation_never_puts_a_container_on_the_system_partition(node):
    runtime = FakeRuntime(str(node.cgroup))
    cni = runtime.add(POD % 1, "cni", "Burstable", 100, namespace="kube-system")
    web = runtime.add(POD % 3, "web", "Burstable", 500)
    a = runtime.add(POD % 5, "a", "Guaranteed", 1000)
    b = runtime.add(POD % 6, "b", "Guaranteed", 1000)
    manager = agent(node, runtime)
    manager.reconcile()
    fragmented = CPUState("static", CPUSet.parse("0,2-5,7"))  # a on CPU 1, b on CPU 6: two half-used cores
    fragmented.set(POD % 5, "a", CPUSet.parse("1"))
    fragmented.set(POD % 6, "b", CPUSet.parse("6"))
    manager.store.save(fragmented)
    manager.reconcile()
    assert (runtime.read(cni), runtime.read(web)) == ("0,4", "2-3,5,7")
    done = defrag_node(manager)
    assert [(x.container, x.cpus) for x in done.actions if x.action == "move"] == [("a", "2")]  # joins b's core
    assert (runtime.read(a), runtime.read(b), runtime.read(cni), runtime.read(web)) == ("2", "6", "0,4", "1,3,5,7")
    assert done.result["after"]["free_whole_cores"] == 2


def test_a_reserved_set_too_small_is_a_warning_with_the_figures_never_a_move_back(node):
    runtime = FakeRuntime(str(node.cgroup))
    big = runtime.add(POD % 1, "proxy", "Burstable", 2500, namespace="kube-system")
    plan = agent(node, runtime).reconcile()
    assert runtime.read(big) == "0,4"
    assert [e["error"] for e in plan.errors if e["kind"] == "partition"] == [
        "the system partition's 1 containers (pods kube-system/%s) request 2500m of CPU and the reserved CPUs 0,4 are "
        "2000m: they share them (kept there; reserve more CPUs to give them room)" % (POD % 1)]


def test_switched_off_every_shared_container_gets_the_whole_pool_again(node):
    runtime = FakeRuntime(str(node.cgroup))
    cni = runtime.add(POD % 1, "cni", "Burstable", 100, namespace="kube-system")
    web = runtime.add(POD % 3, "web", "Burstable", 500)
    agent(node, runtime).reconcile()
    agent(node, runtime, options=ManagerOptions()).reconcile()
    assert (runtime.read(cni), runtime.read(web)) == ("0-7", "0-7")


def test_the_report_shows_the_partition_as_its_own_kind_of_cpu(node):
    runtime = FakeRuntime(str(node.cgroup))
    runtime.add(POD % 1, "cni", "Burstable", 100, namespace="kube-system")
    runtime.add(POD % 3, "web", "Burstable", 500)
    manager = agent(node, runtime)
    manager.reconcile()
    info = node_info(manager, manager.read_state())
    assert info["system_partition"] == {"cpus": "0,4", "namespaces": ["kube-system"],
                                        "priority_classes": ["system-node-critical"]}
    assert {row["cpu"]: row["kind"] for row in info["cpus"]} == {
        0: "system", 1: "shared", 2: "shared", 3: "shared", 4: "system", 5: "shared", 6: "shared", 7: "shared"}
    assert {row["container"]: (row["system"], row["cpus"], row["drift"]) for row in info["containers"]} == {
        "cni": (True, "0,4", False), "web": (False, "1-3,5-7", False)}


def test_beside_a_kubelet_that_pins_the_partition_is_refused(node):
    runtime = FakeRuntime(str(node.cgroup))
    runtime.add(POD % 1, "cni", "Burstable", 100, namespace="kube-system")
    node.kubelet_pins()
    manager = build_manager(node.config(options=ON, reserved_cpus=RESERVED, force=True), with_runtime=True,
                            runtime=runtime, service=True)  # force lets kubecpu pin beside it: not this option
    with pytest.raises(KubeletPinsError, match="system_partition changes who holds which CPU"):
        manager.reconcile()
    with pytest.raises(KubeletPinsError, match="system_partition changes who holds which CPU"):
        build_manager(node.config(options=ON, reserved_cpus=RESERVED, force=True), with_runtime=True,
                      runtime=runtime)


# --- the OCI hook --------------------------------------------------------------------------------------------------
def hook(node, runtime=None, options=ON):
    return Hook(node.config(options=options, reserved_cpus=RESERVED), lock_timeout=0.3, runtime=lambda: runtime)


def test_the_hook_places_a_system_container_on_the_reserved_cpus_and_any_other_off_them(node):
    runtime = FakeRuntime(str(node.cgroup))
    node.run(node.container("Guaranteed", 2000, name="db"), options=ON, reserved_cpus=RESERVED)  # a state
    system = node.container("Burstable", 100, name="cni", uid=POD % 20)
    runtime.pod_notes["sb-" + POD % 20] = {PRIORITY: "system-node-critical"}
    other = node.container("Burstable", 500, name="web", uid=POD % 21)
    runtime.pod_notes["sb-" + POD % 21] = {}
    options = ManagerOptions(system_partition=True)
    assert hook(node, runtime, options).run(io.BytesIO(system["stdin"])).cpus == "0,4"
    assert hook(node, runtime, options).run(io.BytesIO(other["stdin"])).cpus == "2-3,6-7"
    assert (node.cpus(system), node.cpus(other)) == (RESERVED, CPUSet.parse("2-3,6-7"))
    assert runtime.calls == {"inspect_pod": 2}  # containerd's spec had not the annotation: one call each
    by_namespace = node.container("Burstable", 100, name="proxy", uid=POD % 22)  # namespace "lab" chosen
    assert hook(node, runtime, ManagerOptions(system_partition=True, system_namespaces=["lab"],
                                              system_priority_classes=[])).run(
        io.BytesIO(by_namespace["stdin"])).cpus == "0,4"
    assert runtime.calls == {"inspect_pod": 2}  # the namespace decides: nothing asked


def test_on_a_node_with_no_state_yet_the_hook_places_shared_containers_on_their_side_too(node):
    """The first containers of a fresh node, before any state file: without the partition every CPU is shared and
    the hook passes them; with it, a system container goes on the reserved CPUs and any other off them (the hook
    passed both before: found on containerd 2.4.2, tests/integration/test_hook.py)."""
    runtime = FakeRuntime(str(node.cgroup))
    system = node.container("Burstable", 100, name="cni", uid=POD % 20)
    runtime.pod_notes["sb-" + POD % 20] = {PRIORITY: "system-node-critical"}
    other = node.container("Burstable", 500, name="web", uid=POD % 21)
    runtime.pod_notes["sb-" + POD % 21] = {}
    assert not os.path.exists(node.config().state_path)
    assert hook(node, runtime, ManagerOptions()).run(io.BytesIO(other["stdin"])).action == "passed"
    options = ManagerOptions(system_partition=True)
    assert hook(node, runtime, options).run(io.BytesIO(system["stdin"])).cpus == "0,4"
    assert hook(node, runtime, options).run(io.BytesIO(other["stdin"])).cpus == "1-3,5-7"
    assert (node.cpus(system), node.cpus(other)) == (RESERVED, CPUSet.parse("1-3,5-7"))


def test_the_hooks_quick_path_leaves_shared_containers_to_the_full_hook_with_the_partition(node):
    node.run(node.container("Guaranteed", 1000, name="db"))
    web = node.container("Burstable", 500, name="web", cpus=node.saved().default)
    assert quick_check(web["stdin"], node.state, str(node.cgroup), node.kubelet_state)["action"] == "checked"
    assert quick_check(web["stdin"], node.state, str(node.cgroup), node.kubelet_state, system_partition=True) is None


# --- the NRI plugin ------------------------------------------------------------------------------------------------
def nri_pod(uid, namespace="ns", notes=None):
    message = PB.PodSandbox(id="sb-" + uid, name="p-" + uid, uid=uid, namespace=namespace, annotations=notes or {})
    message.linux.cgroup_parent = "/kubepods/burstable/pod%s" % uid
    return message


def nri_container(uid, name, milli):
    message = PB.Container(id="%s-%s" % (uid, name), pod_sandbox_id="sb-" + uid, name=name, state=3,
                           labels={"io.kubernetes.container.name": name})
    message.linux.cgroups_path = "/kubepods/burstable/pod%s/%s-%s" % (uid, uid, name)
    message.linux.resources.cpu.shares.value = max(2, milli * 1024 // 1000)
    message.linux.resources.cpu.period.value = 100000
    return message


def test_the_nri_plugin_adjusts_each_container_to_its_side_at_its_creation(node):
    view = NRIView()
    plugin = NRIPlugin(agent(node, view), view, io.StringIO())

    def create(uid, name, namespace="ns", notes=None):
        request = PB.CreateContainerRequest(pod=nri_pod(uid, namespace, notes), container=nri_container(uid, name, 100))
        code, text, payload = plugin.handle(PLUGIN_SERVICE, "CreateContainer", request.SerializeToString(), 0)
        assert code == 0, text
        return PB.CreateContainerResponse.FromString(payload).adjust.linux.resources.cpu.cpus

    assert create("a", "cni", "kube-system") == "0,4"
    assert create("b", "exporter", notes={PRIORITY: "system-node-critical"}) == "0,4"
    assert create("c", "web") == "1-3,5-7"
    removed = PB.StateChangeEvent(event=11, pod=nri_pod("a", "kube-system"), container=nri_container("a", "cni", 100))
    plugin.handle(PLUGIN_SERVICE, "StateChange", removed.SerializeToString(), 0)
    assert plugin.manager.read_state() == CPUState("static", CPUSet.parse("0-7"))


def test_the_housekeeper_beside_a_kubelet_refuses_both_options(node):
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.errors import ConfigError
    from ansible_collections.kubecpu.cpu_manager.plugins.module_utils.node.factory import kubelet_housekeeping

    node.kubelet_pins()
    for options, named in ((ManagerOptions(irq_isolation="exclusive", system_partition=True), "system_partition"),
                           (ManagerOptions(irq_isolation="exclusive", exclusive_burstable=True,
                                           system_partition=True), "exclusive_burstable and system_partition")):
        with pytest.raises(ConfigError, match="housekeeping runs beside a kubelet that pins CPUs itself, and %s "
                                              "change" % named):
            kubelet_housekeeping(node.config(options=options, reserved_cpus=RESERVED))
